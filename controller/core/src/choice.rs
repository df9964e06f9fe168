//! Choosing addresses for a Service that needs some: the candidate pools in order (R4), what
//! each pool can give per family (requested IP, a compatible sharing group, or the lowest free
//! address; R2, R3), and the plan over families (R5). Read-only over the allocator state; the
//! engine commits the plan.

use ferrolb_crds::addresses::{Family, to_offset};

use super::engine::Ipam;
use super::outcome::{Failure, NoPool, NotHandedOut};
use super::pick::{Pick, Plan};
use super::pool::PoolConfig;
use super::request::{FamilyPolicy, ServiceRequest};

impl Ipam {
    /// What `req` would get of `family` in `pool`, or why not.
    pub(super) fn pick(
        &self,
        req: &ServiceRequest,
        pool: &str,
        family: Family,
    ) -> Result<Pick, Failure> {
        if let Some(r) = req.requested_of(family) {
            // A requested address may lie in the overlap the pool shares with an older one when
            // the Service names this pool (R9, [`Ipam::pool_for`]).
            if self.pool_for(req, r) != Some(pool) {
                return Err(Failure::RequestedInNoPool {
                    ip: r,
                    detail: NotHandedOut::OtherPool(pool.to_owned()),
                });
            }
            if self.holdings.contains_key(&r) {
                return match self.blocker(req, r, None) {
                    Some((holder, why)) => Err(Failure::RequestedHeld { ip: r, holder, why }),
                    None => Ok(Pick::Join(r)),
                };
            }
            let free_at_owner = self
                .pool_of(r)
                .and_then(|owner| self.free.get(&(owner.to_owned(), family)))
                .is_some_and(|fs| fs.contains(to_offset(r)));
            return if free_at_owner {
                Ok(Pick::Take(r))
            } else {
                Err(Failure::RequestedInNoPool {
                    ip: r,
                    detail: NotHandedOut::NotFree(pool.to_owned()),
                })
            };
        }
        let Some(free) = self.free.get(&(pool.to_owned(), family)) else {
            return Err(Failure::FamilyUnavailable(family));
        };
        let usable = match self.pools.get(pool).map(|p| &p.addresses) {
            Some(Ok(a)) => self.layout.usable_count(pool, a, family),
            _ => 0,
        };
        if usable == 0 {
            return Err(Failure::FamilyUnavailable(family));
        }
        if let Some(k) = &req.sharing_key
            && let Some(ips) = self.groups.get(k)
        {
            for ip in ips.keys() {
                if Family::of(*ip) == family
                    && self.holdings.contains_key(ip)
                    && self.pool_for(req, *ip) == Some(pool)
                    && self.blocker(req, *ip, None).is_none()
                {
                    return Ok(Pick::Join(*ip));
                }
            }
        }
        match free.peek_lowest() {
            Some(o) => Ok(Pick::Take(family.addr(o))),
            None => Err(Failure::Exhausted {
                family,
                pools: vec![pool.to_owned()],
            }),
        }
    }

    /// The pools `req` may use, in the order they are tried (R4), or why none.
    fn candidates(&self, req: &ServiceRequest) -> Result<Vec<&PoolConfig>, Failure> {
        let ns = self.namespaces.get(&*req.key.namespace);
        if let Some(name) = &req.pool {
            let Some(p) = self.pools.get(name) else {
                return Err(Failure::NoPool(NoPool::NamedMissing(name.clone())));
            };
            if let Err(e) = &p.addresses {
                return Err(Failure::NoPool(NoPool::NamedInvalid {
                    name: name.clone(),
                    reason: e.to_string(),
                }));
            }
            if !p.admits(req, ns) {
                return Err(Failure::NoPool(NoPool::NamedRefuses(name.clone())));
            }
            return Ok(vec![p]);
        }
        if !req.requested.is_empty() {
            let mut owner: Option<&str> = None;
            for r in &req.requested {
                let Some(p) = self.layout.owner_of(*r) else {
                    let detail = match self.nodes.get(r) {
                        Some(node) => NotHandedOut::NodeAddress(node.clone()),
                        None => NotHandedOut::InNoPool,
                    };
                    return Err(Failure::RequestedInNoPool { ip: *r, detail });
                };
                if owner.is_some_and(|o| o != p) {
                    return Err(Failure::RequestedInNoPool {
                        ip: *r,
                        detail: NotHandedOut::DifferentPools,
                    });
                }
                owner = Some(p);
            }
            let p = owner.and_then(|o| self.pools.get(o));
            return match p {
                Some(p) if p.admits(req, ns) => Ok(vec![p]),
                Some(p) => Err(Failure::RequestedInNoPool {
                    ip: req.requested[0],
                    detail: NotHandedOut::NotAdmitted(p.name.clone()),
                }),
                None => Err(Failure::NoPool(NoPool::RequestedOutside)),
            };
        }
        let mut v: Vec<&PoolConfig> = self
            .pools
            .values()
            .filter(|p| p.auto_assign && p.addresses.is_ok() && p.admits(req, ns))
            .collect();
        v.sort_by(|a, b| a.choice_key().cmp(&b.choice_key()));
        if v.is_empty() {
            return Err(Failure::NoPool(if self.pools.is_empty() {
                NoPool::NoPools
            } else {
                NoPool::NoneAdmits
            }));
        }
        Ok(v)
    }

    /// Picks a pool and addresses for a Service that has none (R3–R5), or says why not.
    pub(super) fn choose(&self, req: &ServiceRequest) -> Result<Plan, Failure> {
        let candidates = self.candidates(req)?;
        let wanted = req.wanted_families();
        let mut full: Option<Plan> = None;
        let mut partial: Option<Plan> = None;
        let mut errors: Vec<(Family, Failure)> = Vec::new();
        for p in &candidates {
            let results: Vec<(Family, Result<Pick, Failure>)> = wanted
                .iter()
                .map(|f| (*f, self.pick(req, &p.name, *f)))
                .collect();
            let ok: Vec<Pick> = results
                .iter()
                .filter_map(|(_, r)| r.as_ref().ok().copied())
                .collect();
            let failed: Vec<(Family, Failure)> = results
                .iter()
                .filter_map(|(f, r)| r.as_ref().err().map(|e| (*f, e.clone())))
                .collect();
            errors.extend(failed.iter().cloned());
            if failed.is_empty() {
                let joins = ok.iter().any(|p| matches!(p, Pick::Join(_)));
                if joins {
                    return Ok(Plan {
                        pool: p.name.clone(),
                        picks: ok,
                        missing: None,
                    });
                }
                if full.is_none() {
                    full = Some(Plan {
                        pool: p.name.clone(),
                        picks: ok,
                        missing: None,
                    });
                }
            } else if req.policy == FamilyPolicy::PreferDualStack && !ok.is_empty() {
                let has_primary = results[0].1.is_ok();
                let better = match &partial {
                    None => true,
                    Some(prev) => has_primary && Family::of(prev.picks[0].ip()) != wanted[0],
                };
                if better {
                    partial = Some(Plan {
                        pool: p.name.clone(),
                        picks: ok,
                        missing: failed.first().cloned(),
                    });
                }
            }
        }
        if let Some(plan) = full.or(partial) {
            return Ok(plan);
        }
        // PreferDualStack would have taken any family: its primary family's reason is the one.
        let required = if req.policy == FamilyPolicy::PreferDualStack {
            &wanted[..1]
        } else {
            &wanted[..]
        };
        let errors = errors
            .into_iter()
            .filter(|(f, _)| required.contains(f))
            .collect();
        Err(summarise(&candidates, required, errors))
    }
}

/// The most precise reason among the per-pool, per-family failures.
fn summarise(
    candidates: &[&PoolConfig],
    wanted: &[Family],
    errors: Vec<(Family, Failure)>,
) -> Failure {
    if let Some((_, f)) = errors
        .iter()
        .find(|(_, f)| matches!(f, Failure::RequestedHeld { .. }))
    {
        return f.clone();
    }
    if let Some((_, f)) = errors
        .iter()
        .find(|(_, f)| matches!(f, Failure::RequestedInNoPool { .. }))
    {
        return f.clone();
    }
    let unavailable = |family: Family| {
        errors
            .iter()
            .filter(|(f, e)| *f == family && matches!(e, Failure::FamilyUnavailable(_)))
            .count()
            == candidates.len()
    };
    if wanted.iter().all(|f| unavailable(*f)) {
        return Failure::NoPool(NoPool::NoUsableAddress {
            families: wanted
                .iter()
                .map(|f| f.as_k8s())
                .collect::<Vec<_>>()
                .join("/"),
            pools: candidates.iter().map(|p| p.name.clone()).collect(),
        });
    }
    if let Some(f) = wanted.iter().find(|f| unavailable(**f)) {
        return Failure::FamilyUnavailable(*f);
    }
    let mut pools: Vec<String> = Vec::new();
    let mut family = wanted[0];
    for (f, e) in &errors {
        if let Failure::Exhausted { pools: p, .. } = e {
            family = *f;
            for name in p {
                if !pools.contains(name) {
                    pools.push(name.clone());
                }
            }
        }
    }
    Failure::Exhausted { family, pools }
}
