//! What a reconcile pass reports: failures with their precise reason, and notes that become
//! Events on the Service (R14).

use std::net::IpAddr;

use ferrolb_crds::addresses::Family;

use super::request::ServiceKey;

/// Why a Service has no (or not every) address. The `Display` text is the `AllocationFailed`
/// Event message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// No pool admits the Service, or the pool it names does not exist or does not admit it.
    #[error("no pool can serve this Service: {0}")]
    NoPool(NoPool),
    /// Every pool that could serve the Service is out of addresses of this family.
    #[error("{}", exhausted(*family, pools))]
    Exhausted {
        /// The family that ran out.
        family: Family,
        /// The pools tried, in order.
        pools: Vec<String>,
    },
    /// The requested address is held by a Service it may not share with (R3).
    #[error("requested IP {ip} is held by {holder}: {why}")]
    RequestedHeld {
        /// The requested address.
        ip: IpAddr,
        /// The oldest holder.
        holder: ServiceKey,
        /// Why they may not share ([`crate::sharing::incompatibility`]): no common sharing key,
        /// different namespaces in a pool that does not allow it, a common port, backends.
        why: String,
    },
    /// The requested address is in no pool that admits the Service (R3).
    #[error("requested IP {ip} is in no pool that admits this Service: {detail}")]
    RequestedInNoPool {
        /// The requested address.
        ip: IpAddr,
        /// Which way it fails.
        detail: NotHandedOut,
    },
    /// No pool that admits the Service has addresses of this family (R5).
    #[error("family unavailable: no pool that admits this Service has {0} addresses")]
    FamilyUnavailable(Family),
    /// The Service's annotations cannot be honoured (the message, from the glue's translation of
    /// the Service, names the annotation and the problem).
    #[error("{0}")]
    Invalid(String),
}

fn exhausted(family: Family, pools: &[String]) -> String {
    match pools {
        [one] => format!("pool {one} is exhausted: no free {family} address"),
        many => format!(
            "pools {} are exhausted: no free {family} address",
            many.join(", ")
        ),
    }
}

/// Why no pool can serve a Service ([`Failure::NoPool`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPool {
    /// The `address-pool` annotation names a pool that does not exist.
    #[error("the pool it names, {0}, does not exist")]
    NamedMissing(String),
    /// The named pool's `spec.addresses` cannot be used.
    #[error("the pool it names, {name}, is invalid: {reason}")]
    NamedInvalid {
        /// The pool.
        name: String,
        /// Why its addresses are unusable (names the entry).
        reason: String,
    },
    /// The named pool's `serviceAllocation` does not admit the Service.
    #[error("the pool it names, {0}, does not admit it (serviceAllocation)")]
    NamedRefuses(String),
    /// The requested addresses belong to no pool.
    #[error("the requested addresses are in no pool")]
    RequestedOutside,
    /// There is no IPAddressPool at all.
    #[error("there is no IPAddressPool")]
    NoPools,
    /// No valid `autoAssign` pool admits the Service.
    #[error("no valid IPAddressPool with autoAssign admits it")]
    NoneAdmits,
    /// The pools that admit the Service have no usable address of any wanted family (R5).
    #[error("no usable {families} address in the pools that admit it ({})", pools.join(", "))]
    NoUsableAddress {
        /// The wanted families, `/`-separated (`IPv4/IPv6`).
        families: String,
        /// The pools that admit it.
        pools: Vec<String>,
    },
}

/// Why a requested address cannot be handed out ([`Failure::RequestedInNoPool`], R3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotHandedOut {
    /// The pool that would serve the Service does not own the address (R9).
    #[error("it is not handed out by pool {0}")]
    OtherPool(String),
    /// The address is not free in its owner pool (reserved, e.g. `avoidBuggyIPs`).
    #[error("pool {0} does not hand it out")]
    NotFree(String),
    /// The address is a Node address (R10).
    #[error("it is an address of node {0}")]
    NodeAddress(String),
    /// No pool contains the address.
    #[error("no pool contains it")]
    InNoPool,
    /// The Service requests addresses of two different pools.
    #[error("the requested addresses are in different pools")]
    DifferentPools,
    /// The owner pool's `serviceAllocation` does not admit the Service.
    #[error("pool {0} does not admit it (serviceAllocation)")]
    NotAdmitted(String),
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
    /// The Service carries a sharing key a group in another namespace holds an address with,
    /// and would have joined it but for the namespace rule; it got addresses of its own
    /// (`NotShared`, Warning; issue #27 item 6).
    NotShared {
        /// The address it did not join.
        ip: IpAddr,
        /// The oldest holder there.
        holder: ServiceKey,
        /// Why (names the pool and `spec.allowSharingAcrossNamespaces`).
        why: String,
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
