//! ferrolb-cli: the `ferrolb` command-line tool. `ferrolb migrate`: MetalLB configuration in,
//! `ferrolb.io/v1beta1` objects out (docs/migration-from-metallb.md); `ferrolb uninstall`: ferrolb
//! removed from a cluster with no Service status of ours left behind (docs/install.md).
//!
//! Module map:
//! - [`migrate`]: the conversion and the dry report of Services. Pure — no `kube`, no `tokio`, no
//!   file or network I/O: documents in, objects, Services and findings out.
//! - [`cluster`]: the I/O edge of `--from-cluster`: reads (never writes) MetalLB's objects, its
//!   legacy ConfigMap, Services, Nodes and Namespaces with the kube client.
//! - [`status`]: `ferrolb status`: a pure report (objects in, [`status::Report`] out, text or
//!   JSON) and its thin read-only I/O edge, [`status::collect`].
//! - [`uninstall`]: the I/O of `ferrolb uninstall` (stop the controller, release every status it
//!   wrote, delete the install), with two pure verdicts (is the Lease held, is a CRD ours).
//!
//! The binary (`src/main.rs`) holds the flags, reads files and stdin, prints, and sets the exit
//! status.

pub mod cluster;
pub mod migrate;
pub mod status;
pub mod uninstall;
