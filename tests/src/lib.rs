//! ferrolb-tests: the test cluster (real etcd + kube-apiserver built from the Go module proxy), the
//! network-namespace lab, and the end-to-end scenarios under `tests/tests/`.
//!
//! - [`cluster`]: start/stop a control plane with the ferrolb CRDs; clients and kubeconfigs.
//! - [`namespace`]: a fresh namespace per test.

pub mod cluster;
pub mod namespace;
