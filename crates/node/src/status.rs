//! What each listener of a node shows now, as the typed views of [`gtd_core::view`]: the facts
//! gathered from the snapshot, the balancers, the checks, the counters and the names, and
//! the views built from them. `/status` ([`super::admin`]) and the registry entry
//! ([`super::fleet`]) both start here, so that neither imports the other.

use std::time::Instant;

use super::snapshot::Snapshot;
use super::telemetry::served;
use super::{Inner, dns};
use gtd_core::config::Host;
use gtd_core::view::explain::{Ask, ExplainFacts, Query, QueryError};
use gtd_core::view::{
    CheckFacts, DrainView, EndpointFacts, Explain, GroupLive, LastCheck, ListenerFacts,
    ListenerView,
};
use gtd_fleet::drain::Drain;

/// Every listener of `snap` as `node` runs it at `now`; `names` for the endpoints' DNS errors.
pub(crate) fn listeners(
    node: &Inner,
    snap: &Snapshot,
    names: &dns::Table,
    now: Instant,
) -> Vec<ListenerView> {
    snap.listeners
        .iter()
        .map(|l| {
            let http = l.cfg.protocol.is_http();
            let planned = l.planned.load();
            let ranked = l.ranked.load();
            let watches: Vec<Vec<_>> = l
                .groups
                .iter()
                .map(|g| g.watches.iter().map(|w| w.state()).collect())
                .collect();
            let groups = l
                .groups
                .iter()
                .zip(&l.cfg.groups)
                .zip(&watches)
                .enumerate()
                .map(|(gi, ((g, cfg), watches))| GroupLive {
                    rank: l.why_ranked(gi, now),
                    endpoints: g
                        .balancer
                        .endpoints()
                        .iter()
                        .zip(&cfg.endpoints)
                        .zip(watches)
                        .map(|((state, e), w)| EndpointFacts {
                            config: e,
                            state,
                            check: w.verdict.as_ref().map(|verdict| CheckFacts {
                                verdict,
                                last: w.last.as_ref().map(|c| LastCheck {
                                    result: c.result.as_str(),
                                    reason: &c.reason,
                                    at: c.at,
                                }),
                            }),
                            rtt_ms: w.rtt.value(),
                            served: served(
                                &node.registry,
                                http,
                                &[&l.cfg.name, &g.name, &e.address.id()],
                            ),
                            dns_error: match &e.address.host {
                                Host::Name(n) => names.get(n).and_then(|s| s.error.as_deref()),
                                _ => None,
                            },
                        })
                        .collect(),
                })
                .collect();
            let facts = ListenerFacts {
                config: &l.cfg,
                planned: &planned,
                ranked: &ranked,
                groups,
            };
            let mut view = ListenerView::build(&facts, now);
            if let Some(fleet) = &node.fleet {
                name_fleet_drains(&mut view, &l.cfg, &fleet.drains());
            }
            view
        })
        .collect()
}

/// Names the fleet drain behind each endpoint one drains (the config the node runs says
/// `drain` for it as for the config's own).
fn name_fleet_drains(view: &mut ListenerView, cfg: &gtd_core::config::Listener, drains: &[Drain]) {
    if drains.is_empty() {
        return;
    }
    for g in &mut view.groups {
        let Some(gc) = cfg.groups.iter().find(|x| x.name == g.name) else {
            continue;
        };
        for (e, ec) in g.endpoints.iter_mut().zip(&gc.endpoints) {
            if let Some(d) = gtd_fleet::drain::naming(drains, &cfg.name, &gc.name, ec) {
                e.drained_by = Some(DrainView::from(d));
            }
        }
    }
}

/// Why the client of `q` goes where it goes on its listener (`GET /explain`): the plan its
/// decisions follow now (the listener's, or under `priority_by = "client-location"` the plan
/// of the client's place, as the data path looks it up), the ranking and the live balancers,
/// handed to [`Explain::build`]. Nothing is picked or counted. An unknown listener, or a host
/// or path on a listener that is not HTTP, is the query's fault.
pub(crate) fn explain(
    node: &Inner,
    snap: &Snapshot,
    q: &Query,
    now: Instant,
) -> Result<Explain, QueryError> {
    let Some(l) = snap.listener(&q.listener) else {
        let served: Vec<&str> = snap.listeners.iter().map(|l| l.cfg.name.as_str()).collect();
        return Err(QueryError {
            parameter: "listener",
            message: format!(
                "{:?}: no such listener on this node (it serves: {})",
                q.listener,
                served.join(", ")
            ),
        });
    };
    if !l.cfg.protocol.is_http() && (q.host.is_some() || q.path.is_some() || !q.headers.is_empty())
    {
        return Err(QueryError {
            parameter: match (&q.host, &q.path) {
                (Some(_), _) => "host",
                (None, Some(_)) => "path",
                (None, None) => "header",
            },
            message: format!(
                "listener {:?} is {}: host, path and headers apply to HTTP listeners only",
                l.cfg.name,
                l.cfg.protocol.as_str()
            ),
        });
    }
    let place = l.locate(q.client);
    let by_client = l.client_plan(place.as_ref());
    let node_plan = l.planned.load();
    let planned = by_client.as_deref().unwrap_or(&node_plan);
    let ranked = l.ranked.load();
    let facts = ExplainFacts {
        listener: &l.cfg,
        region: &node.region,
        planned,
        ranked: &ranked,
        balancers: l.groups.iter().map(|g| g.balancer.as_ref()).collect(),
        by_location: by_client.is_some(),
    };
    let ask = Ask {
        client: q.client,
        host: q.host.as_deref(),
        path: q.path.as_deref(),
        key: q.key.as_deref(),
        headers: &q.headers,
    };
    Ok(Explain::build(&facts, &ask, now))
}
