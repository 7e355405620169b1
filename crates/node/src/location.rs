//! Client locations on a node (`[geoip]`, docs/design.md §3.1 and §7): the per-listener series
//! that count clients by continent and country, and for `priority_by = "client-location"` the
//! plans by the client's order of groups.
//!
//! A connection (TCP), flow (UDP) or HTTP client connection is looked up in the database once,
//! when it opens; what that gives ([`Place`]) is kept with it. Every decision then computes the
//! client's order from the place's coordinates ([`location::by_distance`], on the stack) and
//! reads the plan of that order from a table swapped whole ([`ArcSwap`]): no lock and no
//! allocation, except the first time an order is seen since the facts last changed (then the
//! plan is built, as the node builds its own, and added to the table). Each cached plan has its
//! own rotation, so the clients of one order divide as its shares say.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use metrics::Counter;

use gtd_core::config::Listener;
use gtd_core::geoip::{Labels, Place};
use gtd_core::regions::Catalog;
use gtd_core::split::location::{self, Order};
use gtd_core::split::{GroupFacts, ListenerPlan, Ranking};

use super::telemetry::{self as m, Registry};

/// Most distinct orders whose plans a listener keeps: far more than real fleets produce (the
/// orders of n places by distance from points on a sphere are few for the handful of groups a
/// listener has). Past it a decision builds its plan without keeping it: correct, not free.
pub const MAX_ORDERS: usize = 256;

/// The client-location series of one listener: one counter per (continent, country) slot.
#[derive(Debug)]
pub struct ClientSeries {
    labels: Labels,
    connections: Vec<Counter>,
    requests: Vec<Counter>,
}

impl ClientSeries {
    /// Registers the series of listener `name` (`requests` only for HTTP listeners).
    pub(crate) fn register(
        registry: &Registry,
        name: &str,
        countries: &[String],
        http: bool,
    ) -> ClientSeries {
        let labels = Labels::new(countries);
        let series = |def: &m::Def| {
            (0..labels.len())
                .map(|i| {
                    let (continent, country) = labels.values(i);
                    registry.counter(def, &[name, continent, country])
                })
                .collect::<Vec<_>>()
        };
        ClientSeries {
            connections: series(&m::CLIENT_CONNECTIONS_TOTAL),
            requests: if http {
                series(&m::CLIENT_REQUESTS_TOTAL)
            } else {
                Vec::new()
            },
            labels,
        }
    }

    /// Counts a client connection or flow (`place`: where the database put it, `None` when it
    /// is not in the database).
    pub fn connection(&self, place: Option<&Place>) {
        self.connections[self.labels.slot(place)].increment(1);
    }

    /// Counts an HTTP request.
    pub fn request(&self, place: Option<&Place>) {
        if let Some(c) = self.requests.get(self.labels.slot(place)) {
            c.increment(1);
        }
    }
}

/// `priority_by = "client-location"`: each group's coordinates and the plans by order.
#[derive(Debug)]
pub struct ByLocation {
    coords: Vec<(f64, f64)>,
    table: ArcSwap<Table>,
    generation: AtomicU64,
}

#[derive(Debug)]
struct Table {
    generation: u64,
    /// The node's ranking when the facts were taken (its RTTs are what `/status` shows).
    ranking: Ranking,
    facts: Vec<GroupFacts>,
    plans: Vec<(Order, Arc<ListenerPlan>)>,
}

impl ByLocation {
    /// For `listener` with the node's current `ranking` and `facts`.
    pub(crate) fn new(
        listener: &Listener,
        catalog: &Catalog,
        ranking: Ranking,
        facts: Vec<GroupFacts>,
    ) -> ByLocation {
        ByLocation {
            coords: location::group_coords(listener, catalog),
            table: ArcSwap::from_pointee(Table {
                generation: 0,
                ranking,
                facts,
                plans: Vec::new(),
            }),
            generation: AtomicU64::new(0),
        }
    }

    /// The client's order of the groups, from its coordinates.
    pub fn order(&self, at: (f64, f64)) -> Order {
        location::by_distance(at, &self.coords)
    }

    /// The plan for a client at `at` (lat, lon).
    pub fn plan(&self, listener: &Listener, at: (f64, f64)) -> Arc<ListenerPlan> {
        let order = self.order(at);
        let table = self.table.load();
        if let Some((_, p)) = table.plans.iter().find(|(o, _)| *o == order) {
            return Arc::clone(p);
        }
        let plan = Arc::new(build(listener, &table.ranking, &table.facts, &order));
        if table.plans.len() < MAX_ORDERS {
            let generation = table.generation;
            drop(table);
            self.table.rcu(|t| {
                if t.generation != generation
                    || t.plans.len() >= MAX_ORDERS
                    || t.plans.iter().any(|(o, _)| *o == order)
                {
                    return Arc::clone(t);
                }
                let mut plans = t.plans.clone();
                plans.push((order, Arc::clone(&plan)));
                Arc::new(Table {
                    generation: t.generation,
                    ranking: t.ranking.clone(),
                    facts: t.facts.clone(),
                    plans,
                })
            });
        }
        plan
    }

    /// The facts (or the node's ranking) changed: every kept order gets a new plan from them.
    pub(crate) fn replan(&self, listener: &Listener, ranking: &Ranking, facts: &[GroupFacts]) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let old = self.table.load();
        let plans = old
            .plans
            .iter()
            .map(|(o, was)| {
                let plan = build(listener, ranking, facts, o);
                // An order whose split did not move goes on with its rotation.
                plan.continue_from(was);
                (*o, Arc::new(plan))
            })
            .collect();
        self.table.store(Arc::new(Table {
            generation,
            ranking: ranking.clone(),
            facts: facts.to_vec(),
            plans,
        }));
    }

    /// How many orders have a plan now.
    pub fn orders(&self) -> usize {
        self.table.load().plans.len()
    }
}

fn build(listener: &Listener, ranking: &Ranking, facts: &[GroupFacts], o: &Order) -> ListenerPlan {
    ListenerPlan::build(
        listener,
        location::ranking(ranking, o),
        facts.to_vec(),
        listener.affinity,
    )
}
