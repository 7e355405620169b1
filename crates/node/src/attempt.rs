//! The attempts of one connection, flow or request (docs/design.md §4, retries), for every protocol:
//!
//! - [`Budget`]: how many attempts may start and until when — `tries` in all while `retry` is
//!   on, none started once `retry_timeout` has passed since the first (nginx's
//!   `proxy_next_upstream_tries` and `proxy_next_upstream_timeout`). Pure: it takes the clock
//!   as an argument. TCP, UDP and HTTP all ask it; HTTP adds only its own rule on top (the body
//!   can be sent again, and the method is idempotent or nothing was sent).
//! - [`Attempts`]: where each attempt goes — the chosen group's balancer first, then the
//!   group's other usable endpoints, then the highest-priority eligible group not yet tried.
//!   In fail-open (no group healthy, `fail_open = true`) "usable" ignores the health verdicts:
//!   endpoints are picked as if healthy, never disabled, `down` or draining ones.
//!   Allocation-free.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::Guard;

use gtd_core::balance::{Admit, Pick, RequestKey};
use gtd_core::config::Listener;
use gtd_core::split::{ListenerPlan, Plan};

use super::snapshot::ListenerState;

/// The attempt budget of one connection, flow or request.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Attempts allowed in all (1 when `retry` is off).
    tries: u32,
    made: u32,
    /// The start plus `retry_timeout`: no retry starts from then on (`None`: beyond what the
    /// clock can hold, so never).
    retries_until: Option<Instant>,
}

impl Budget {
    /// The budget of listener `l` for a decision whose first attempt may start at `started`.
    pub fn new(l: &Listener, started: Instant) -> Budget {
        Budget {
            tries: if l.retry { l.tries.max(1) } else { 1 },
            made: 0,
            retries_until: started.checked_add(l.retry_timeout),
        }
    }

    /// A budget of `tries` attempts (with `retry` on), no retry starting `retry_timeout`
    /// after `started`.
    #[cfg(test)]
    pub(crate) fn of(tries: u32, retry_timeout: std::time::Duration, started: Instant) -> Budget {
        Budget {
            tries,
            made: 0,
            retries_until: started.checked_add(retry_timeout),
        }
    }

    /// Whether an attempt may start at `now`: the first always, another while fewer than
    /// `tries` were made and `retry_timeout` has not passed since the start.
    pub fn allows(&self, now: Instant) -> bool {
        self.made == 0
            || (self.made < self.tries && self.retries_until.is_none_or(|until| now < until))
    }

    /// Counts an attempt that starts; true when it is a retry (not the first).
    pub fn spend(&mut self) -> bool {
        self.made += 1;
        self.made > 1
    }

    /// Attempts made so far.
    pub fn made(&self) -> u32 {
        self.made
    }

    /// Whether the count leaves room for another attempt after those made (the clock aside):
    /// what a caller deciding to keep a copy of the request for a retry needs to know.
    pub fn room_for_another(&self) -> bool {
        self.made < self.tries
    }
}

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

/// The plans a decision follows: the listener's own, or one by the client's location.
enum Planned {
    Node(Guard<Arc<ListenerPlan>>),
    Client(Arc<ListenerPlan>),
}

/// Walks the attempts of one connection/request.
pub struct Attempts<'a> {
    listener: &'a ListenerState,
    planned: Planned,
    client: IpAddr,
    /// The forwarding rule whose plan decides (HTTP), or the listener's own plan.
    route: Option<usize>,
    current: Option<usize>,
    tried_groups: u64,
    excluded: [usize; MAX_EXCLUDED],
    n_excluded: usize,
    started: bool,
}

impl<'a> Attempts<'a> {
    /// The attempts of a decision about `client`, on the listener's current plan.
    pub fn new(listener: &'a ListenerState, client: IpAddr) -> Attempts<'a> {
        Self::for_route(listener, None, client)
    }

    /// The attempts over the plan of forwarding rule `route` (config index; it runs the cascade
    /// over that rule's groups only), or the listener's plan for `None`.
    pub fn for_route(
        listener: &'a ListenerState,
        route: Option<usize>,
        client: IpAddr,
    ) -> Attempts<'a> {
        Attempts {
            listener,
            planned: Planned::Node(listener.planned.load()),
            client,
            route,
            current: None,
            tried_groups: 0,
            excluded: [0; MAX_EXCLUDED],
            n_excluded: 0,
            started: false,
        }
    }

    /// The attempts of a decision about `client` at `place` (looked up once per connection):
    /// under `priority_by = "client-location"` on the plan of the client's order of groups when
    /// the database gave coordinates, else on the listener's plan (as [`Attempts::for_route`]).
    pub fn for_client(
        listener: &'a ListenerState,
        route: Option<usize>,
        client: IpAddr,
        place: Option<&gtd_core::geoip::Place>,
    ) -> Attempts<'a> {
        let mut a = Self::for_route(listener, route, client);
        if let Some(p) = listener.client_plan(place) {
            a.planned = Planned::Client(p);
        }
        a
    }

    /// The plan decisions follow.
    pub fn plan(&self) -> &Plan {
        let planned: &ListenerPlan = match &self.planned {
            Planned::Node(g) => g,
            Planned::Client(p) => p,
        };
        planned.for_route(self.route)
    }

    /// Which endpoints the plan lets a pick choose: in fail-open (docs/design.md §3.3) the
    /// health verdicts do not count.
    fn admit(&self) -> Admit {
        self.plan().admit()
    }

    /// The first attempt for a request bound to endpoint `index` of `group` (a sticky cookie):
    /// `None` when the group is not eligible in this plan or the endpoint may not serve it now
    /// (the caller then asks [`Self::next`]). When it succeeds, later attempts continue with
    /// the group's other endpoints, then other groups, as after any first attempt.
    pub fn bound(&mut self, group: usize, index: usize, now: Instant) -> Option<Attempt> {
        if self.started || !self.plan().eligible.get(group).copied().unwrap_or(false) {
            return None;
        }
        let pick =
            self.listener.groups[group]
                .balancer
                .pick_sticky_admitting(index, self.admit(), now)?;
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
                    self.plan().choose_at(self.client, now)?
                }
                None => {
                    let tried = self.tried_groups;
                    self.plan().fallback(|g| tried & (1 << g) != 0)?
                }
            };
            self.current = Some(group);
            let balancer = &self.listener.groups[group].balancer;
            let excluded = &self.excluded[..self.n_excluded];
            if let Some(pick) = balancer.pick_admitting(request, excluded, self.admit(), now) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn budget(retry: bool, tries: u32, timeout_ms: u64, t0: Instant) -> Budget {
        Budget {
            tries: if retry { tries } else { 1 },
            made: 0,
            retries_until: t0.checked_add(Duration::from_millis(timeout_ms)),
        }
    }

    #[test]
    fn tries_bound_the_attempts() {
        let t0 = Instant::now();
        let mut b = budget(true, 3, 10_000, t0);
        let mut made = 0;
        while b.allows(t0) {
            let retry = b.spend();
            assert_eq!(retry, made > 0);
            made += 1;
        }
        assert_eq!(made, 3);
        assert!(!b.room_for_another());
    }

    #[test]
    fn retry_off_allows_one_attempt() {
        let t0 = Instant::now();
        let mut b = budget(false, 5, 10_000, t0);
        assert!(b.allows(t0));
        assert!(!b.spend());
        assert!(!b.allows(t0));
    }

    #[test]
    fn no_retry_starts_after_retry_timeout() {
        let t0 = Instant::now();
        let mut b = budget(true, 10, 100, t0);
        b.spend();
        assert!(b.allows(t0 + Duration::from_millis(99)));
        assert!(!b.allows(t0 + Duration::from_millis(100)));
        // The first attempt is never refused, however late it is decided.
        let late = budget(true, 10, 100, t0);
        assert!(late.allows(t0 + Duration::from_secs(60)));
    }
}
