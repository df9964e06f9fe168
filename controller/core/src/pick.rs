//! What a choice would do: one [`Pick`] per family in one pool, gathered in a [`Plan`]. Made by
//! [`crate::choice`] (read-only over the allocator state) and committed by [`crate::engine`]; kept
//! apart so that neither of those two modules imports the other.

use std::net::IpAddr;

use ferrolb_crds::addresses::Family;

use super::outcome::Failure;

/// What one pick in one pool and family would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pick {
    /// Take a free address.
    Take(IpAddr),
    /// Join a sharing group on this held address.
    Join(IpAddr),
}

impl Pick {
    pub(super) fn ip(self) -> IpAddr {
        match self {
            Pick::Take(ip) | Pick::Join(ip) => ip,
        }
    }
}

/// A full choice for one Service.
pub(super) struct Plan {
    pub(super) pool: String,
    pub(super) picks: Vec<Pick>,
    pub(super) missing: Option<(Family, Failure)>,
}
