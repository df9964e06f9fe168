//! ferrolb-cli: the `ferrolb` command-line tool. One subcommand so far, `ferrolb migrate`: MetalLB
//! configuration in, `ferrolb.io/v1beta1` objects out (docs/migration-from-metallb.md).
//!
//! Module map:
//! - [`migrate`]: the conversion and the dry report of Services. Pure — no `kube`, no `tokio`, no
//!   file or network I/O: documents in, objects, Services and findings out.
//! - [`cluster`]: the I/O edge of `--from-cluster`: reads (never writes) MetalLB's objects, its
//!   legacy ConfigMap, Services, Nodes and Namespaces with the kube client.
//!
//! The binary (`src/main.rs`) holds the flags, reads files and stdin, prints, and sets the exit
//! status.

pub mod cluster;
pub mod migrate;
