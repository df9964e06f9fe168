//! ferrolb-crds: the `ferrolb.io/v1beta1` API types, their CRD manifests, and the pure address and
//! selector logic shared by the controller and the speaker.
//!
//! Module map:
//! - [`v1beta1`]: `IPAddressPool`, `L2Advertisement` (kube-derive + schemars, CEL validation);
//! - [`addresses`]: parse entries, membership, counts, lazy walks (pure);
//! - [`selector`]: label-selector matching (pure);
//! - [`service`]: which Services are ours, and the IPs in their status (pure);
//! - [`manifests`]: the CRD YAML committed under `deploy/crds/`.

pub mod addresses;
pub mod manifests;
pub mod selector;
pub mod service;
pub mod v1beta1;

pub use v1beta1::{
    IPAddressPool, IPAddressPoolSpec, IPAddressPoolStatus, L2Advertisement, L2AdvertisementSpec,
};
