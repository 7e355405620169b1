//! The sequence of attempts for one connection or request (SPEC 4, retries): the chosen group's
//! balancer first, then the group's other usable endpoints, then the highest-priority eligible
//! group not yet tried. Shared by every protocol; allocation-free.

use std::net::IpAddr;
use std::time::Instant;

use arc_swap::Guard;
use std::sync::Arc;

use crate::balance::{Pick, RequestKey};

use crate::split::Plan;

use super::state::{ListenerRt, Planned};

/// Most endpoints remembered as tried within one group (`tries` is at most 10).
const MAX_EXCLUDED: usize = 16;

/// One attempt: the group (config index) and the endpoint picked, with its accounting guard.
#[derive(Debug)]
pub struct Attempt {
    /// Group, config index.
    pub group: usize,
    /// The endpoint and its guard (counts the connection until dropped).
    pub pick: Pick,
}

/// Walks the attempts of one connection/request.
pub struct Router<'a> {
    listener: &'a ListenerRt,
    planned: Guard<Arc<Planned>>,
    client: IpAddr,
    /// The forwarding rule whose plan decides (HTTP), or the listener's own plan.
    route: Option<usize>,
    current: Option<usize>,
    tried_groups: u64,
    excluded: [usize; MAX_EXCLUDED],
    n_excluded: usize,
    started: bool,
}

impl<'a> Router<'a> {
    /// A router for a decision about `client`, on the listener's current plan.
    pub fn new(listener: &'a ListenerRt, client: IpAddr) -> Router<'a> {
        Self::for_route(listener, None, client)
    }

    /// A router over the plan of forwarding rule `route` (config index; it runs the cascade
    /// over that rule's groups only), or the listener's plan for `None`.
    pub fn for_route(listener: &'a ListenerRt, route: Option<usize>, client: IpAddr) -> Router<'a> {
        Router {
            listener,
            planned: listener.planned.load(),
            client,
            route,
            current: None,
            tried_groups: 0,
            excluded: [0; MAX_EXCLUDED],
            n_excluded: 0,
            started: false,
        }
    }

    /// The plan decisions follow.
    pub fn plan(&self) -> &Plan {
        match self.route {
            Some(r) => &self.planned.routes[r],
            None => &self.planned.plan,
        }
    }

    /// The first attempt for a request bound to endpoint `index` of `group` (a sticky cookie):
    /// `None` when the group is not eligible in this plan or the endpoint may not serve it now
    /// (the caller then asks [`Self::next`]). When it succeeds, later attempts continue with
    /// the group's other endpoints, then other groups, as after any first attempt.
    pub fn bound(&mut self, group: usize, index: usize, now: Instant) -> Option<Attempt> {
        if self.started || !self.plan().eligible.get(group).copied().unwrap_or(false) {
            return None;
        }
        let pick = self.listener.groups[group]
            .balancer
            .pick_sticky(index, now)?;
        self.started = true;
        self.current = Some(group);
        self.excluded[0] = index;
        self.n_excluded = 1;
        Some(Attempt { group, pick })
    }

    /// The next endpoint to try, or `None` when no eligible group has a usable endpoint left.
    pub fn next(&mut self, request: &impl RequestKey, now: Instant) -> Option<Attempt> {
        loop {
            let group = match self.current {
                Some(g) => g,
                None if !self.started => {
                    self.started = true;
                    self.plan().choose(self.client)?
                }
                None => {
                    let tried = self.tried_groups;
                    self.plan().fallback(|g| tried & (1 << g) != 0)?
                }
            };
            self.current = Some(group);
            let balancer = &self.listener.groups[group].balancer;
            if let Some(pick) =
                balancer.pick_excluding(request, &self.excluded[..self.n_excluded], now)
            {
                if self.n_excluded < MAX_EXCLUDED {
                    self.excluded[self.n_excluded] = pick.index();
                    self.n_excluded += 1;
                }
                return Some(Attempt { group, pick });
            }
            // This group has nothing left for us: move to the next eligible one.
            self.tried_groups |= 1 << group;
            self.n_excluded = 0;
            self.current = None;
        }
    }
}
