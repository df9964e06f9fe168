//! What a reconcile pass reports: failures with their precise reason, and notes that become
//! Events on the Service (R14).

use std::fmt;
use std::net::IpAddr;

use ferrolb_crds::addresses::Family;

use super::request::ServiceKey;

/// Why a Service has no (or not every) address. The `Display` text is the `AllocationFailed`
/// Event message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No pool admits the Service, or the pool it names does not exist or does not admit it.
    NoPool(String),
    /// Every pool that could serve the Service is out of addresses of this family.
    Exhausted {
        /// The family that ran out.
        family: Family,
        /// The pools tried, in order.
        pools: Vec<String>,
    },
    /// The requested address is held by a Service it may not share with (R3).
    RequestedHeld {
        /// The requested address.
        ip: IpAddr,
        /// The oldest holder.
        holder: ServiceKey,
    },
    /// The requested address is in no pool that admits the Service (R3).
    RequestedInNoPool {
        /// The requested address.
        ip: IpAddr,
        /// Which way it fails.
        detail: String,
    },
    /// No pool that admits the Service has addresses of this family (R5).
    FamilyUnavailable(Family),
    /// The Service's annotations cannot be honoured (message names the problem).
    Invalid(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::NoPool(detail) => write!(f, "no pool can serve this Service: {detail}"),
            Failure::Exhausted { family, pools } if pools.len() == 1 => {
                write!(
                    f,
                    "pool {} is exhausted: no free {family} address",
                    pools[0]
                )
            }
            Failure::Exhausted { family, pools } => {
                write!(
                    f,
                    "pools {} are exhausted: no free {family} address",
                    pools.join(", ")
                )
            }
            Failure::RequestedHeld { ip, holder } => {
                write!(f, "requested IP {ip} is held by {holder}")
            }
            Failure::RequestedInNoPool { ip, detail } => {
                write!(
                    f,
                    "requested IP {ip} is in no pool that admits this Service: {detail}"
                )
            }
            Failure::FamilyUnavailable(family) => write!(
                f,
                "family unavailable: no pool that admits this Service has {family} addresses"
            ),
            Failure::Invalid(msg) => f.write_str(msg),
        }
    }
}

/// Something that happened to one Service in a reconcile pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Addresses were handed out (`IPAllocated`).
    Allocated {
        /// The new addresses (only the added ones when a family was added later).
        ips: Vec<IpAddr>,
        /// From which pool.
        pool: String,
    },
    /// Addresses the Service had were taken away and (maybe) replaced (`Reallocated`, Warning).
    Reallocated {
        /// What it had.
        from: Vec<IpAddr>,
        /// What it has now (empty: pending, see the following `Failed`).
        to: Vec<IpAddr>,
        /// Why, e.g. `"198.51.100.7 left every pool"`.
        why: String,
    },
    /// Addresses were freed because the Service no longer wants them (`IPReleased`).
    Released {
        /// The freed addresses.
        ips: Vec<IpAddr>,
        /// Why.
        why: String,
    },
    /// The Service is pending, or its reason changed (`AllocationFailed`, Warning).
    Failed(Failure),
    /// PreferDualStack got only some families (Warning); the rest follow when possible.
    Partial {
        /// The family still missing.
        missing: Family,
        /// Why it is missing.
        why: Failure,
    },
    /// The status found on the Service could not be kept and was replaced (R8, Warning).
    StatusReplaced {
        /// Each discarded entry and why.
        discarded: Vec<String>,
    },
}

/// A [`Note`] about one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceNote {
    /// Which Service.
    pub key: ServiceKey,
    /// What happened.
    pub note: Note,
}
