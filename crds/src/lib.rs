//! ferrolb-crds: the `ferrolb.io/v1beta1` API types, their CRD manifests, and the pure address and
//! selector logic shared by the controller and the speaker.
//!
//! Module map:
//! - [`v1beta1`]: `IPAddressPool`, `L2Advertisement` (kube-derive + schemars, CEL validation);
//! - [`announcement`]: `L2Announcement`, who answers for one IP (written by the speakers);
//! - [`addresses`]: parse entries, membership, counts, lazy walks (pure);
//! - [`auto_pool`]: the addresses of an automatic pool (`spec.autoAddresses`) (pure);
//! - [`selector`]: label-selector matching (pure);
//! - [`service`]: which Services are ours (class rule), and the IPs in their status (pure);
//! - [`annotations`]: the Service annotations, their MetalLB spellings and precedence (pure);
//! - [`node`]: which addresses are Node addresses (R10, pure);
//! - [`ownership`]: which pool owns an address — overlaps (R9) and Node addresses (R10) (pure);
//! - [`version`]: the Kubernetes version floor and the `/version` parser (pure);
//! - [`conflict_event`]: the `IPConflict` Event note the speaker writes and the controller reads;
//! - [`manifests`]: the CRD YAML committed under `deploy/crds/`.
//!
//! Every rule the controller and the speaker must agree on lives here exactly once, and both call
//! it. The crate depends on `kube-core` and `kube-derive` only — never the kube client, runtime,
//! tokio or an HTTP stack (`tests/purity.rs` checks).

pub mod addresses;
pub mod annotations;
pub mod announcement;
pub mod auto_pool;
pub mod conflict_event;
pub mod exclude_lb;
pub mod manifests;
pub mod node;
pub mod ownership;
pub mod selector;
pub mod service;
pub mod v1beta1;
pub mod version;

pub use announcement::{L2Announcement, L2AnnouncementSpec, announcement_name};
pub use v1beta1::{
    IPAddressPool, IPAddressPoolSpec, IPAddressPoolStatus, L2Advertisement, L2AdvertisementSpec,
};
