//! The conformance suite: the real `gtd` binary, one `gtd run` process per acceleration region
//! and `gtd demo --backends-only` for the endpoints, driven from many client addresses; the
//! share of decisions each group takes on each node compared with what `sim --format json`
//! predicts for the same config file.
//!
//! What is checked, per listener and region, each time:
//! 1. the node's `/status` split (mode, group order, health, share) is `sim`'s, to 1e-9, before
//!    and after the load (so the load measured one split);
//! 2. every decision is answered, by an endpoint of a group the split lists;
//! 3. the observed share of each group is the expected one within the tolerance:
//!    - `affinity = "none"`: a smooth rotation (docs/design.md §3.4) gives every group within
//!      two decisions of N × share over any N consecutive decisions; a measurement is N = 400
//!      consecutive decisions of that listener on that node (nothing else sends it traffic), so
//!      the bound is ±(200 / N + 0.01) points = ±0.51 points: exact, not statistical;
//!    - `affinity = "source-ip"`: the group is a hash of the client address, each of the N
//!      clients (127.1.x.y) is seen once, so the count is a binomial draw with p = share:
//!      ±(5 standard deviations + 100 / N) points (a false alarm less than once in a million
//!      measurements); a sample of clients is also checked one by one against
//!      `sim --client`, which must name exactly the group the node chose;
//!    - a share of 0 must get no decision at all.
//!
//! Waits are for events (`/healthz` answering, `/status` showing a state), bounded by 60 s;
//! no duration is asserted. Configs are written to temp dirs with every port replaced by a
//! free one, so the suite runs beside other tests. Health checks run every second in the
//! suite's own configs and the scenario copies, so a stopped endpoint is out after three.
//!
//! Scenarios with `[latency]` or `[demand]` are not run against nodes (see `scenarios.rs`).

#[path = "../common/mod.rs"]
mod common;
// The dashboard tests' DevTools client, for the fleet tab against a real fleet.
#[path = "../dashboard/cdp.rs"]
#[allow(dead_code)]
mod cdp;
mod etcd;
mod fleet;
mod load;
mod split;

mod compaction;
mod drain;
mod election;
mod errors;
mod failover;
mod fleet_tab;
mod graceful;
mod history;
mod predictions;
mod ramp;
mod ranking;
mod registry;
mod reload;
mod revisions;
mod routes;
mod scenarios;
mod secure;
mod shipped;
