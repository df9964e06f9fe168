//! The allocator: the in-memory index of pools, Nodes, Namespaces and Services, and the
//! level-triggered reconcile pass that computes every Service's addresses from it.
//!
//! Feed it the current objects (`upsert_*`, `remove_*`, `set_nodes`), then call
//! [`Ipam::reconcile`]: it validates every assignment against the index (R7, R9, R10, R2), adopts
//! the statuses of Services it sees for the first time before handing out anything (R1, R8), then
//! serves Services that still need addresses, requests first, oldest first (R3–R5, R11). Nothing
//! depends on the order in which objects were fed.
//!
//! Costs: taking or releasing an address is O(log n) in the allocated addresses of its pool; a pass
//! is O(S log S) for S Services; pool or Node changes rebuild the free sets in O(held · log).
//! Memory is O(Services + held addresses + pool ranges), never O(pool size) (R12).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_crds::addresses::{Family, PoolAddressError, to_offset};

use super::free_set::FreeSet;
use super::layout::Layout;
use super::outcome::{Failure, Note, ServiceNote};
use super::pick::Pick;
use super::pool::PoolConfig;
use super::request::{FamilyPolicy, ServiceKey, ServiceRequest};
use super::sharing::{SharingScope, incompatibility};

/// The addresses a Service holds, all from one pool, in the order of its wanted families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The pool they come from.
    pub pool: String,
    /// One per family, primary family first.
    pub ips: Vec<IpAddr>,
}

/// One held address: its pool and the Services on it (several only when sharing, R2).
#[derive(Debug, Clone)]
pub(super) struct Holding {
    pub(super) pool: String,
    /// Sorted, no duplicates (a `Vec`: one member is the rule, and a one-element `BTreeSet`
    /// allocates a whole B-tree node, ~0.5 KiB per held address).
    pub(super) members: Vec<ServiceKey>,
}

/// Why a Service left the allocator's care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// The Service object was deleted.
    Deleted,
    /// It still exists but is no longer ours: not `LoadBalancer`, or another class (R6). Its old
    /// status is never adopted again.
    NotHandled,
}

/// Per-pool counters and condition inputs, for the pool's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolReport {
    /// Pool name.
    pub name: String,
    /// Held IPv4 addresses.
    pub assigned_v4: u64,
    /// Free usable IPv4 addresses (saturating).
    pub available_v4: u64,
    /// Held IPv6 addresses.
    pub assigned_v6: u64,
    /// Free usable IPv6 addresses (saturating at `u64::MAX`).
    pub available_v6: u64,
    /// Overlaps with older pools (R9), naming them.
    pub overlaps: Vec<String>,
    /// Node addresses inside the pool (R10), naming the Nodes.
    pub node_conflicts: Vec<String>,
    /// Why `spec.addresses` could not be used, naming the entry (or, for forbidden blocks, every
    /// entry).
    pub invalid: Option<PoolAddressError>,
}

/// The allocator state. See the module docs.
#[derive(Debug, Default)]
pub struct Ipam {
    pub(super) pools: BTreeMap<String, PoolConfig>,
    pub(super) nodes: BTreeMap<IpAddr, String>,
    pub(super) namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// The current request per Service. An `Arc` so [`Ipam::sigs`] shares it while unchanged.
    services: BTreeMap<ServiceKey, Arc<ServiceRequest>>,
    /// Services that went through a pass: their status is never adopted again.
    seen: BTreeSet<ServiceKey>,
    pub(super) layout: Layout,
    layout_dirty: bool,
    pub(super) free: BTreeMap<(String, Family), FreeSet>,
    assigned: BTreeMap<(String, Family), u128>,
    pub(super) holdings: BTreeMap<IpAddr, Holding>,
    /// sharing key → held addresses with a member carrying it → number of such members.
    pub(super) groups: BTreeMap<String, BTreeMap<IpAddr, usize>>,
    assignments: BTreeMap<ServiceKey, Assignment>,
    pending: BTreeMap<ServiceKey, Failure>,
    partial: BTreeMap<ServiceKey, Failure>,
    /// What each holder looked like, as far as sharing goes, when last validated: when sharers
    /// become incompatible, the one whose spec changed moves, not the others.
    /// Only the sharing fields are compared ([`same_sig`]); the request itself is kept (shared
    /// with [`Ipam::services`] while unchanged, so it costs one pointer per holder).
    sigs: BTreeMap<ServiceKey, Arc<ServiceRequest>>,
    /// Services added or changed since the last [`Ipam::reconcile`]: the only ones a pass
    /// re-validates, adopts or allocates, besides those still pending or partial.
    dirty: BTreeSet<ServiceKey>,
    /// Pools, Node addresses or Namespace labels changed since the last pass: every Service is
    /// re-validated.
    all_dirty: bool,
}

/// Whether `old` and `req` agree on the fields that decide sharing (R2): sharing key, ports and
/// backend.
fn same_sig(old: &ServiceRequest, req: &ServiceRequest) -> bool {
    old.sharing_key == req.sharing_key && old.ports == req.ports && old.backend == req.backend
}

impl Ipam {
    /// An empty allocator.
    pub fn new() -> Ipam {
        Ipam::default()
    }

    /// Adds or replaces a pool. Takes effect at the next [`Ipam::reconcile`].
    pub fn upsert_pool(&mut self, pool: PoolConfig) {
        if self.pools.get(&pool.name) != Some(&pool) {
            self.pools.insert(pool.name.clone(), pool);
            self.layout_dirty = true;
            self.all_dirty = true;
        }
    }

    /// Removes a pool. Its Services are re-allocated at the next pass (R7).
    pub fn remove_pool(&mut self, name: &str) {
        if self.pools.remove(name).is_some() {
            self.layout_dirty = true;
            self.all_dirty = true;
        }
    }

    /// Replaces the set of Node addresses (`InternalIP`/`ExternalIP` → node name) (R10).
    pub fn set_nodes(&mut self, nodes: BTreeMap<IpAddr, String>) {
        if self.nodes != nodes {
            self.nodes = nodes;
            self.layout_dirty = true;
            self.all_dirty = true;
        }
    }

    /// Records a Namespace's labels (for `namespaceSelectors`).
    pub fn set_namespace(&mut self, name: &str, labels: BTreeMap<String, String>) {
        if self.namespaces.get(name) != Some(&labels) {
            self.namespaces.insert(name.to_owned(), labels);
            self.all_dirty = true;
        }
    }

    /// Forgets a Namespace.
    pub fn remove_namespace(&mut self, name: &str) {
        if self.namespaces.remove(name).is_some() {
            self.all_dirty = true;
        }
    }

    /// Adds or replaces a Service we handle.
    pub fn upsert_service(&mut self, req: ServiceRequest) {
        let key = req.key.clone();
        let old_key = self.services.get(&key).and_then(|s| s.sharing_key.clone());
        if old_key != req.sharing_key
            && let Some(a) = self.assignments.get(&key)
        {
            let ips = a.ips.clone();
            for ip in &ips {
                if let Some(k) = &old_key {
                    group_remove(&mut self.groups, k, *ip);
                }
                if let Some(k) = &req.sharing_key {
                    *self
                        .groups
                        .entry(k.clone())
                        .or_default()
                        .entry(*ip)
                        .or_default() += 1;
                }
            }
        }
        if self.services.get(&key).is_some_and(|old| **old == req) {
            return; // unchanged: keep the Arc the sharing signature may share
        }
        let req = Arc::new(req);
        // A change that leaves the sharing fields alone (e.g. the status we wrote came back)
        // refreshes the signature to the new request, so the old one is not kept alive.
        if let Some(old) = self.sigs.get_mut(&key)
            && same_sig(old, &req)
        {
            *old = req.clone();
        }
        self.dirty.insert(key.clone());
        self.services.insert(key, req);
    }

    /// A Service is gone or no longer ours: frees its addresses (R6) and returns them.
    pub fn remove_service(&mut self, key: &ServiceKey, gone: Gone) -> Vec<IpAddr> {
        let mut freed = Vec::new();
        if let Some(a) = self.assignments.remove(key) {
            for ip in a.ips {
                self.unhold(ip, key);
                freed.push(ip);
            }
        }
        self.services.remove(key);
        self.pending.remove(key);
        self.partial.remove(key);
        self.sigs.remove(key);
        self.dirty.remove(key);
        match gone {
            Gone::Deleted => self.seen.remove(key),
            Gone::NotHandled => self.seen.insert(key.clone()),
        };
        freed
    }

    /// The addresses a Service holds.
    pub fn assignment(&self, key: &ServiceKey) -> Option<&Assignment> {
        self.assignments.get(key)
    }

    /// The addresses that should be in the Service's status: its assignment, or nothing.
    pub fn desired_ips(&self, key: &ServiceKey) -> Vec<IpAddr> {
        self.assignments
            .get(key)
            .map(|a| a.ips.clone())
            .unwrap_or_default()
    }

    /// Why a Service without addresses is pending, if it is.
    pub fn pending_reason(&self, key: &ServiceKey) -> Option<&Failure> {
        self.pending.get(key)
    }

    /// Every Service left without addresses by the last [`Ipam::reconcile`], with why.
    pub fn pending(&self) -> impl Iterator<Item = (&ServiceKey, &Failure)> {
        self.pending.iter()
    }

    /// The Services holding `ip`.
    pub fn holders(&self, ip: IpAddr) -> Vec<ServiceKey> {
        self.holdings
            .get(&ip)
            .map(|h| h.members.clone())
            .unwrap_or_default()
    }

    /// Every held address with its pool and holders, ascending.
    pub fn held(&self) -> impl Iterator<Item = (IpAddr, &str, Vec<&ServiceKey>)> {
        self.holdings
            .iter()
            .map(|(ip, h)| (*ip, h.pool.as_str(), h.members.iter().collect()))
    }

    /// Names of the known pools.
    pub fn pool_names(&self) -> Vec<String> {
        self.pools.keys().cloned().collect()
    }

    /// Names of the known Namespaces.
    pub fn namespace_names(&self) -> Vec<String> {
        self.namespaces.keys().cloned().collect()
    }

    /// The Services we handle.
    pub fn services(&self) -> impl Iterator<Item = &ServiceRequest> {
        self.services.values().map(|s| &**s)
    }

    /// Status inputs of every pool.
    pub fn pool_reports(&mut self) -> Vec<PoolReport> {
        self.ensure_layout();
        self.pools
            .values()
            .map(|p| {
                let counts = |family: Family| -> (u64, u64) {
                    let held = self
                        .assigned
                        .get(&(p.name.clone(), family))
                        .copied()
                        .unwrap_or(0);
                    let total = match &p.addresses {
                        Ok(a) => self.layout.usable_count(&p.name, a, family),
                        Err(_) => 0,
                    };
                    let sat = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
                    (sat(held), sat(total.saturating_sub(held)))
                };
                let (assigned_v4, available_v4) = counts(Family::V4);
                let (assigned_v6, available_v6) = counts(Family::V6);
                let pl = self.layout.pools.get(&p.name).cloned().unwrap_or_default();
                PoolReport {
                    name: p.name.clone(),
                    assigned_v4,
                    available_v4,
                    assigned_v6,
                    available_v6,
                    overlaps: pl.overlaps,
                    node_conflicts: pl.node_conflicts,
                    invalid: p.addresses.as_ref().err().cloned(),
                }
            })
            .collect()
    }

    fn ensure_layout(&mut self) {
        if !self.layout_dirty {
            return;
        }
        self.layout_dirty = false;
        self.layout = Layout::build(self.pools.values().map(PoolConfig::claim), &self.nodes);
        self.free.clear();
        self.assigned.clear();
        for p in self.pools.values() {
            let Ok(addrs) = &p.addresses else { continue };
            let owned = self
                .layout
                .pools
                .get(&p.name)
                .map(|pl| pl.owned.clone())
                .unwrap_or_default();
            for family in [Family::V4, Family::V6] {
                let mut fs = FreeSet::new(family, addrs.avoid_buggy());
                for r in owned.iter().filter(|r| r.family() == family) {
                    fs.insert_range(*r);
                }
                self.free.insert((p.name.clone(), family), fs);
            }
        }
        let held: Vec<IpAddr> = self.holdings.keys().copied().collect();
        for ip in held {
            if let Some(pool) = self.pool_of(ip).map(str::to_owned) {
                let o = to_offset(ip);
                if let Some(fs) = self.free.get_mut(&(pool.clone(), Family::of(ip))) {
                    fs.remove_range(o, o);
                }
                *self.assigned.entry((pool, Family::of(ip))).or_default() += 1;
            }
        }
    }

    /// The pool `ip` may be handed out from: owned after overlaps and Node addresses, and not
    /// excluded by `avoidBuggyIPs`.
    pub(super) fn pool_of(&self, ip: IpAddr) -> Option<&str> {
        let owner = self.layout.owner_of(ip)?;
        let pool = self.pools.get(owner)?;
        pool.addresses.as_ref().ok()?.is_usable(ip).then_some(owner)
    }

    /// The pool `req` is served from at `ip` ([`Layout::pool_for`]: the pool its annotation
    /// names when that pool contains `ip`, else the owner), when `ip` is usable there. The
    /// annotation counts even when other annotations make the request invalid, as the speaker
    /// (which reads only this one) sees it.
    pub(super) fn pool_for(&self, req: &ServiceRequest, ip: IpAddr) -> Option<&str> {
        // Usable by its owner too (`avoidBuggyIPs` may differ between overlapping pools), so
        // the address is accounted for, and freed, in the owner's free set.
        self.pool_of(ip)?;
        let pool = self.layout.pool_for(req.pool.as_deref(), ip)?;
        let (name, config) = self.pools.get_key_value(pool)?;
        config
            .addresses
            .as_ref()
            .ok()?
            .is_usable(ip)
            .then_some(name.as_str())
    }

    fn order(&self, key: &ServiceKey) -> (i64, ServiceKey) {
        (
            self.services.get(key).map_or(i64::MAX, |s| s.created),
            key.clone(),
        )
    }

    fn hold(&mut self, ip: IpAddr, pool: &str, key: &ServiceKey) {
        if let Some(s) = self.services.get(key) {
            self.sigs.insert(key.clone(), s.clone());
        }
        let sharing = self.services.get(key).and_then(|s| s.sharing_key.clone());
        match self.holdings.get_mut(&ip) {
            Some(h) => {
                if let Err(at) = h.members.binary_search(key) {
                    h.members.insert(at, key.clone());
                }
            }
            None => {
                let family = Family::of(ip);
                // Counted against the owner (R9), also when held for a Service of a newer pool.
                let owner = self.pool_of(ip).unwrap_or(pool).to_owned();
                if let Some(fs) = self.free.get_mut(&(owner.clone(), family)) {
                    let o = to_offset(ip);
                    fs.remove_range(o, o);
                }
                *self.assigned.entry((owner, family)).or_default() += 1;
                self.holdings.insert(
                    ip,
                    Holding {
                        pool: pool.to_owned(),
                        members: vec![key.clone()],
                    },
                );
            }
        }
        if let Some(k) = sharing {
            *self.groups.entry(k).or_default().entry(ip).or_default() += 1;
        }
    }

    fn unhold(&mut self, ip: IpAddr, key: &ServiceKey) {
        if let Some(k) = self.services.get(key).and_then(|s| s.sharing_key.clone()) {
            group_remove(&mut self.groups, &k, ip);
        }
        let Some(h) = self.holdings.get_mut(&ip) else {
            return;
        };
        if let Ok(at) = h.members.binary_search(key) {
            h.members.remove(at);
        }
        if !h.members.is_empty() {
            return;
        }
        self.holdings.remove(&ip);
        if let Some(pool) = self.pool_of(ip).map(str::to_owned) {
            let family = Family::of(ip);
            if let Some(fs) = self.free.get_mut(&(pool.clone(), family)) {
                fs.insert(to_offset(ip));
            }
            if let Some(n) = self.assigned.get_mut(&(pool, family)) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Why `req` may not join the holders of `ip` (the oldest incompatible holder), if so.
    /// `before`: only holders ranked before `req` in it count (validation order).
    pub(super) fn blocker(
        &self,
        req: &ServiceRequest,
        ip: IpAddr,
        before: Option<&(bool, i64, ServiceKey)>,
    ) -> Option<(ServiceKey, String)> {
        self.blocker_in(req, ip, before, self.sharing_scope(req, ip))
    }

    /// [`Ipam::blocker`] under the sharing rules of `scope`.
    fn blocker_in(
        &self,
        req: &ServiceRequest,
        ip: IpAddr,
        before: Option<&(bool, i64, ServiceKey)>,
        scope: SharingScope<'_>,
    ) -> Option<(ServiceKey, String)> {
        let h = self.holdings.get(&ip)?;
        if h.members.len() == 1 && h.members.contains(&req.key) {
            return None;
        }
        let mut members: Vec<&ServiceKey> = h.members.iter().filter(|m| **m != req.key).collect();
        members.sort_by_cached_key(|m| self.order(m));
        members
            .into_iter()
            .filter(|m| before.is_none_or(|b| self.validation_rank(m) < *b))
            .find_map(|m| {
                let other = self.services.get(m)?;
                incompatibility(other, req, scope).map(|why| (m.clone(), why))
            })
    }

    /// The sharing rules for `req` joining the holders of `ip`: Services of different namespaces
    /// may share only when every pool involved — the one the holders are served from and the one
    /// `req` would be served from — sets `spec.allowSharingAcrossNamespaces` (issue #27 item 6);
    /// the first that does not is the one named.
    fn sharing_scope(&self, req: &ServiceRequest, ip: IpAddr) -> SharingScope<'_> {
        let held_from = self.holdings.get(&ip).map(|h| h.pool.as_str());
        let pools: Vec<&str> = held_from
            .into_iter()
            .chain(self.pool_for(req, ip))
            .collect();
        let refusing = pools.iter().find(|p| {
            !self
                .pools
                .get(**p)
                .is_some_and(|c| c.sharing_across_namespaces)
        });
        match (refusing, pools.first()) {
            (None, Some(first)) => SharingScope {
                pool: first,
                across_namespaces: true,
            },
            (Some(p), _) => SharingScope {
                pool: p,
                across_namespaces: false,
            },
            (None, None) => SharingScope {
                pool: "(none)",
                across_namespaces: false,
            },
        }
    }

    /// When `req`, which got `own`, carries a sharing key that a group holds on another address
    /// it could have joined but for the namespace rule (the holders are in another namespace and
    /// the pool does not allow sharing across namespaces): that address, its holder and why. The
    /// Warning Event `NotShared` says so, so a Service that shared across namespaces under
    /// MetalLB does not silently get an address of its own (issue #27 item 6).
    fn refused_across_namespaces(
        &self,
        req: &ServiceRequest,
        own: &[IpAddr],
    ) -> Option<(IpAddr, ServiceKey, String)> {
        let key = req.sharing_key.as_ref()?;
        let ns = self.namespaces.get(&*req.key.namespace);
        self.groups.get(key)?.keys().find_map(|ip| {
            if own.contains(ip) {
                return None;
            }
            let pool = self.pool_for(req, *ip)?;
            if !self.pools.get(pool).is_some_and(|p| p.admits(req, ns)) {
                return None;
            }
            let scope = self.sharing_scope(req, *ip);
            if scope.across_namespaces {
                return None;
            }
            let open = SharingScope {
                across_namespaces: true,
                ..scope
            };
            if self.blocker_in(req, *ip, None, open).is_some() {
                return None; // another rule refuses too: not the namespaces' doing
            }
            self.blocker_in(req, *ip, None, scope)
                .map(|(holder, why)| (*ip, holder, why))
        })
    }

    fn node_or_pool_why(&self, ip: IpAddr) -> String {
        match self.nodes.get(&ip) {
            Some(node) => format!("{ip} is an address of node {node}"),
            None => format!("{ip} left every pool"),
        }
    }

    /// Runs one level-triggered pass over the whole index and returns what changed.
    ///
    /// Proportional to what changed: when pools, Node addresses and Namespace labels are as in
    /// the last pass, only the Services added or changed since (plus those still pending or
    /// partial) are looked at. The outcome is the same as a pass over everything: an unchanged
    /// Service in an unchanged cluster was valid at the end of the last pass and still is (its
    /// co-holders that changed are validated after it, as in a full pass).
    pub fn reconcile(&mut self) -> Vec<ServiceNote> {
        let all = self.all_dirty || self.layout_dirty;
        self.ensure_layout();
        let dirty = std::mem::take(&mut self.dirty);
        let scope = (!all).then_some(&dirty);
        let mut notes = Vec::new();
        let moved = self.validate(scope, &mut notes);
        self.adopt(scope, &mut notes);
        self.allocate(moved, scope, &mut notes);
        self.all_dirty = false;
        notes
    }

    /// Whether the allocator holds a request of this Service (it is ours).
    pub fn handles(&self, key: &ServiceKey) -> bool {
        self.services.contains_key(key)
    }

    /// Makes the next [`Ipam::reconcile`] look at every Service, as if everything had changed.
    /// The outcome must not differ from an incremental pass (property-tested); the controller
    /// calls it on its slow resync as a safety net.
    pub fn resync(&mut self) {
        self.all_dirty = true;
    }

    /// The order in which holders are validated: unchanged ones (sharing signature as when
    /// last validated) first, then changed ones; oldest first within each, then by key.
    fn validation_rank(&self, key: &ServiceKey) -> (bool, i64, ServiceKey) {
        let changed = match (self.services.get(key), self.sigs.get(key)) {
            (Some(s), Some(old)) => !same_sig(old, s),
            _ => true,
        };
        let (created, key) = self.order(key);
        (changed, created, key)
    }

    /// Step 1: re-check every assignment against the index.
    /// `scope`: only these Services (see [`Ipam::reconcile`]); `None`: all.
    fn validate(
        &mut self,
        scope: Option<&BTreeSet<ServiceKey>>,
        notes: &mut Vec<ServiceNote>,
    ) -> BTreeMap<ServiceKey, (Vec<IpAddr>, String)> {
        let mut moved = BTreeMap::new();
        let mut keys: Vec<(bool, i64, ServiceKey)> = match scope {
            Some(scope) => scope
                .iter()
                .filter(|k| self.assignments.contains_key(*k))
                .map(|k| self.validation_rank(k))
                .collect(),
            None => self
                .assignments
                .keys()
                .map(|k| self.validation_rank(k))
                .collect(),
        };
        keys.sort();
        for (changed, created, key) in keys {
            let rank = (changed, created, key.clone());
            let (Some(req), Some(a)) = (self.services.get(&key), self.assignments.get(&key)) else {
                continue;
            };
            let wanted = req.wanted_families();
            let honour_request = req.invalid.is_none();
            // An address now owned by another pool that admits the Service keeps it (R7).
            let mut pool = a.pool.clone();
            let owners: BTreeSet<Option<&str>> =
                a.ips.iter().map(|ip| self.pool_for(req, *ip)).collect();
            if let [Some(p)] = owners.into_iter().collect::<Vec<_>>()[..]
                && p != a.pool
                && self
                    .pools
                    .get(p)
                    .is_some_and(|pc| pc.admits(req, self.namespaces.get(&*key.namespace)))
                && (!honour_request || req.pool.as_deref().is_none_or(|n| n == p))
            {
                pool = p.to_owned();
            }
            let (mut kept, mut dropped, mut unwanted, mut whys) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for ip in &a.ips {
                let family = Family::of(*ip);
                if !wanted.contains(&family)
                    || kept.iter().any(|k: &IpAddr| Family::of(*k) == family)
                {
                    unwanted.push(*ip);
                    continue;
                }
                let why = if honour_request && req.pool.as_deref().is_some_and(|n| n != pool) {
                    Some(format!(
                        "the Service now names pool {}",
                        req.pool.as_deref().unwrap_or_default()
                    ))
                } else if let Some(r) = req
                    .requested_of(family)
                    .filter(|r| honour_request && r != ip)
                {
                    Some(format!("the Service now requests {r}"))
                } else if self.pool_for(req, *ip) != Some(pool.as_str()) {
                    Some(match self.pool_for(req, *ip) {
                        Some(other) => format!("{ip} now belongs to pool {other}"),
                        None => self.node_or_pool_why(*ip),
                    })
                } else {
                    self.blocker(req, *ip, Some(&rank))
                        .map(|(_, why)| format!("{ip} can no longer be shared: {why}"))
                };
                match why {
                    None => kept.push(*ip),
                    Some(w) => {
                        dropped.push(*ip);
                        whys.push(w);
                    }
                }
            }
            let new_sig = (!kept.is_empty()
                && self.sigs.get(&key).is_none_or(|old| !same_sig(old, req)))
            .then(|| req.clone());
            let old_pool = a.pool.clone();
            if let Some(s) = new_sig {
                self.sigs.insert(key.clone(), s);
            }
            if unwanted.is_empty() && dropped.is_empty() && pool == old_pool {
                continue;
            }
            for ip in unwanted.iter().chain(&dropped) {
                self.unhold(*ip, &key);
            }
            for ip in &kept {
                if let Some(h) = self.holdings.get_mut(ip) {
                    h.pool = pool.clone();
                }
            }
            if !unwanted.is_empty() {
                notes.push(ServiceNote {
                    key: key.clone(),
                    note: Note::Released {
                        ips: unwanted,
                        why: "its ipFamilyPolicy/ipFamilies no longer ask for it".into(),
                    },
                });
            }
            if !dropped.is_empty() {
                moved.insert(key.clone(), (dropped, whys.join("; ")));
            }
            if kept.is_empty() {
                self.assignments.remove(&key);
            } else {
                self.assignments.insert(key, Assignment { pool, ips: kept });
            }
        }
        moved
    }

    /// Step 2: Services seen for the first time keep the status they carry when it is valid (R1);
    /// otherwise it is discarded with a note (R8).
    /// Only Services in `scope` can be new (`None`: look at all).
    fn adopt(&mut self, scope: Option<&BTreeSet<ServiceKey>>, notes: &mut Vec<ServiceNote>) {
        let candidates: Vec<&ServiceKey> = match scope {
            Some(scope) => scope
                .iter()
                .filter(|k| self.services.contains_key(*k))
                .collect(),
            None => self.services.keys().collect(),
        };
        let mut fresh: Vec<ServiceKey> = candidates
            .iter()
            .filter(|k| !self.seen.contains(**k) && !self.assignments.contains_key(**k))
            .map(|k| (*k).clone())
            .collect();
        let candidates: Vec<ServiceKey> = candidates.into_iter().cloned().collect();
        fresh.sort_by_cached_key(|k| self.order(k));
        for key in fresh {
            let Some(req) = self.services.get(&key).cloned() else {
                continue;
            };
            if req.observed.is_empty() {
                continue;
            }
            match self.adoptable(&req) {
                Ok((pool, ips)) => {
                    for ip in &ips {
                        self.hold(*ip, &pool, &key);
                    }
                    self.assignments.insert(key, Assignment { pool, ips });
                }
                Err(discarded) => notes.push(ServiceNote {
                    key,
                    note: Note::StatusReplaced { discarded },
                }),
            }
        }
        self.seen.extend(candidates);
    }

    fn adoptable(&self, req: &ServiceRequest) -> Result<(String, Vec<IpAddr>), Vec<String>> {
        let wanted = req.wanted_families();
        let honour_request = req.invalid.is_none();
        let mut problems = req.observed.unusable.clone();
        let mut by_family: BTreeMap<Family, IpAddr> = BTreeMap::new();
        let mut pool: Option<&str> = None;
        for ip in &req.observed.ips {
            let family = Family::of(*ip);
            let problem = if !wanted.contains(&family) {
                Some(format!("{ip}: the Service does not ask for {family}"))
            } else if let Some(first) = by_family.get(&family) {
                Some(format!("{ip}: a second {family} address after {first}"))
            } else {
                match self.pool_for(req, *ip) {
                    None => Some(format!(
                        "{ip}: {}",
                        self.node_or_pool_why(*ip).replace(&format!("{ip} "), "")
                    )),
                    Some(p) if pool.is_some_and(|q| q != p) => {
                        Some(format!("{ip}: in pool {p}, the other address is not"))
                    }
                    Some(p) if honour_request && req.pool.as_deref().is_some_and(|n| n != p) => {
                        Some(format!(
                            "{ip}: in pool {p}, not in the pool the Service names"
                        ))
                    }
                    Some(_)
                        if honour_request && req.requested_of(family).is_some_and(|r| r != *ip) =>
                    {
                        Some(format!("{ip}: the Service requests another address"))
                    }
                    Some(p) => match self.blocker(req, *ip, None) {
                        Some((holder, why)) => Some(format!("{ip}: held by {holder} ({why})")),
                        None => {
                            pool = Some(p);
                            by_family.insert(family, *ip);
                            None
                        }
                    },
                }
            };
            problems.extend(problem);
        }
        match pool {
            Some(p) if problems.is_empty() => {
                let ips = wanted
                    .iter()
                    .filter_map(|f| by_family.get(f).copied())
                    .collect();
                Ok((p.to_owned(), ips))
            }
            _ => {
                // All or nothing: an entry that was fine is discarded too.
                for ip in by_family.values() {
                    problems.push(format!("{ip}: dropped with the rest of the status"));
                }
                Err(problems)
            }
        }
    }

    /// Step 3: Services missing addresses, requests first, then oldest first. Rounds repeat
    /// while anything changes, so the reasons reported for Services left pending describe the
    /// final state of the pass (a second pass over an unchanged index is silent).
    /// `scope`: besides the Services still pending or partial (and those `moved`), only these
    /// can be missing addresses (`None`: look at all).
    fn allocate(
        &mut self,
        mut moved: BTreeMap<ServiceKey, (Vec<IpAddr>, String)>,
        scope: Option<&BTreeSet<ServiceKey>>,
        notes: &mut Vec<ServiceNote>,
    ) {
        let mut failures: BTreeMap<ServiceKey, Failure> = BTreeMap::new();
        let candidates: Option<BTreeSet<ServiceKey>> = scope.map(|scope| {
            scope
                .iter()
                .chain(self.pending.keys())
                .chain(self.partial.keys())
                .chain(moved.keys())
                .cloned()
                .collect()
        });
        loop {
            let mut progress = false;
            let services: Vec<&Arc<ServiceRequest>> = match &candidates {
                Some(keys) => keys.iter().filter_map(|k| self.services.get(k)).collect(),
                None => self.services.values().collect(),
            };
            let mut needy: Vec<(bool, i64, ServiceKey)> = services
                .into_iter()
                .filter(|s| match self.assignments.get(&s.key) {
                    None => true,
                    Some(a) => a.ips.len() < s.wanted_families().len(),
                })
                .map(|s| (s.requested.is_empty(), s.created, s.key.clone()))
                .collect();
            needy.sort();
            for (_, _, key) in needy {
                let Some(req) = self.services.get(&key).cloned() else {
                    continue;
                };
                if self.assignments.contains_key(&key) {
                    let before = self.assignments.get(&key).map(|a| a.ips.len());
                    self.complete(&req, notes);
                    if self.assignments.get(&key).map(|a| a.ips.len()) != before {
                        progress = true;
                    }
                    if self.assignments.contains_key(&key) {
                        continue;
                    }
                }
                let result = match &req.invalid {
                    Some(msg) => Err(Failure::Invalid(msg.clone())),
                    None => self.choose(&req),
                };
                match result {
                    Ok(plan) => {
                        progress = true;
                        failures.remove(&key);
                        let wanted = req.wanted_families();
                        let mut ips = self.commit(&req, &plan.pool, &plan.picks);
                        ips.sort_by_key(|ip| wanted.iter().position(|f| *f == Family::of(*ip)));
                        self.assignments.insert(
                            key.clone(),
                            Assignment {
                                pool: plan.pool.clone(),
                                ips: ips.clone(),
                            },
                        );
                        self.pending.remove(&key);
                        let refused = self.refused_across_namespaces(&req, &ips);
                        let note = match moved.remove(&key) {
                            Some((from, why)) => Note::Reallocated {
                                from,
                                to: ips.clone(),
                                why,
                            },
                            None => Note::Allocated {
                                ips,
                                pool: plan.pool.clone(),
                            },
                        };
                        notes.push(ServiceNote {
                            key: key.clone(),
                            note,
                        });
                        if let Some((ip, holder, why)) = refused {
                            notes.push(ServiceNote {
                                key: key.clone(),
                                note: Note::NotShared { ip, holder, why },
                            });
                        }
                        match plan.missing {
                            Some((missing, why)) => {
                                self.partial.insert(key.clone(), why.clone());
                                notes.push(ServiceNote {
                                    key,
                                    note: Note::Partial { missing, why },
                                });
                            }
                            None => {
                                self.partial.remove(&key);
                            }
                        }
                    }
                    Err(failure) => {
                        failures.insert(key, failure);
                    }
                }
            }
            if !progress {
                break;
            }
        }
        for (key, failure) in failures {
            if let Some((from, why)) = moved.remove(&key) {
                notes.push(ServiceNote {
                    key: key.clone(),
                    note: Note::Reallocated {
                        from,
                        to: Vec::new(),
                        why,
                    },
                });
            }
            if self.pending.get(&key) != Some(&failure) {
                self.pending.insert(key.clone(), failure.clone());
                notes.push(ServiceNote {
                    key,
                    note: Note::Failed(failure),
                });
            }
        }
    }

    /// Adds missing families to a Service that has some, from its own pool (R5: PreferDualStack
    /// later gains its second family without changing the first). A RequireDualStack Service
    /// that cannot be completed gives its address back and is served afresh.
    fn complete(&mut self, req: &ServiceRequest, notes: &mut Vec<ServiceNote>) {
        let Some(a) = self.assignments.get(&req.key).cloned() else {
            return;
        };
        let wanted = req.wanted_families();
        let mut added = Vec::new();
        let mut failure = None;
        for family in &wanted {
            if a.ips.iter().any(|ip| Family::of(*ip) == *family) {
                continue;
            }
            match self.pick(req, &a.pool, *family) {
                Ok(pick) => added.extend(self.commit(req, &a.pool, &[pick])),
                Err(f) => failure = Some((*family, f)),
            }
        }
        if !added.is_empty() {
            let mut ips = a.ips.clone();
            ips.extend(&added);
            ips.sort_by_key(|ip| wanted.iter().position(|f| *f == Family::of(*ip)));
            self.assignments.insert(
                req.key.clone(),
                Assignment {
                    pool: a.pool.clone(),
                    ips,
                },
            );
            notes.push(ServiceNote {
                key: req.key.clone(),
                note: Note::Allocated {
                    ips: added,
                    pool: a.pool.clone(),
                },
            });
        }
        match failure {
            None => {
                self.partial.remove(&req.key);
            }
            Some(_) if req.policy == FamilyPolicy::RequireDualStack => {
                if let Some(a) = self.assignments.remove(&req.key) {
                    for ip in &a.ips {
                        self.unhold(*ip, &req.key);
                    }
                    notes.push(ServiceNote {
                        key: req.key.clone(),
                        note: Note::Released {
                            ips: a.ips,
                            why: "RequireDualStack needs both families from one pool".into(),
                        },
                    });
                }
            }
            Some((missing, why)) => {
                if self.partial.get(&req.key) != Some(&why) {
                    self.partial.insert(req.key.clone(), why.clone());
                    notes.push(ServiceNote {
                        key: req.key.clone(),
                        note: Note::Partial { missing, why },
                    });
                }
            }
        }
    }

    fn commit(&mut self, req: &ServiceRequest, pool: &str, picks: &[Pick]) -> Vec<IpAddr> {
        let mut ips = Vec::new();
        for pick in picks {
            let ip = pick.ip();
            self.hold(ip, pool, &req.key);
            ips.push(ip);
        }
        ips
    }
}

fn group_remove(groups: &mut BTreeMap<String, BTreeMap<IpAddr, usize>>, key: &str, ip: IpAddr) {
    if let Some(g) = groups.get_mut(key) {
        if let Some(n) = g.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                g.remove(&ip);
            }
        }
        if g.is_empty() {
            groups.remove(key);
        }
    }
}
