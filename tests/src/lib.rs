//! ferrolb-tests: the test cluster (real etcd + kube-apiserver built from the Go module proxy), the
//! network-namespace lab, and the end-to-end scenarios under `tests/tests/`.
//!
//! - [`chart`]: the Helm chart `deploy/helm/ferrolb/`, generated from the kustomize base.
//! - [`cluster`]: start/stop a control plane with the ferrolb CRDs; clients and kubeconfigs.
//! - [`controller`]: a `ferrolb-controller` process against the test cluster (the one fixture).
//! - [`lab`]: network namespaces on a bridge, with speakers in node namespaces.
//! - [`metallb`]: MetalLB's module source (sample configurations, CRDs) for the migration tests.
//! - [`namespace`]: a fresh namespace per test.
//! - [`objects`]: builders for pools, advertisements, Services, status and EndpointSlices.
//! - [`poll`]: the one polling helper.
//! - [`vm`]: the VM lab, a qemu guest on Debian's kernel for VLANs, bonds and IPVS (issue #30).

pub mod chart;
pub mod cluster;
pub mod controller;
pub mod lab;
pub mod metallb;
pub mod namespace;
pub mod objects;
pub mod poll;
pub mod readme;
pub mod verdicts;
pub mod vm;
