//! ferrolb controller: assigns external IPs from `IPAddressPool`s to Services of type
//! LoadBalancer and writes their status (DESIGN §4).
//!
//! Pure modules (no `kube`, no `tokio`): [`ipam`].

pub mod ipam;
