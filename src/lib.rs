//! gtd — a global traffic director.
//!
//! # Layout (data flows down the list)
//!
//! - [`config`]: `config.toml` → the spanned TOML document → `validate/` (one file per
//!   section) → the typed, validated [`config::Config`] (`model/`: every type and every
//!   default, once). Every error names `FILE:LINE:COL` and the path of names.
//! - [`regions`]: the region catalogue and the great-circle RTT estimate used before any
//!   measurement exists.
//! - [`health`] (pure): the verdict of an endpoint's active checks — thresholds, `explicit`,
//!   `essential`, flap damping — as a state machine fed one check result at a time, and the
//!   measured RTT averages that rank groups.
//! - [`balance`] (pure): inside a group — one module per balancing method behind one interface,
//!   with per-endpoint state in atomics shared by all threads of a node.
//! - [`split`] (pure): between groups — priority ranking with hysteresis, the
//!   traffic-distribution-ratio cascade, failover, the per-decision group choice (smooth
//!   rotation, or weighted rendezvous hashing of the client address), the forwarding rules of
//!   HTTP listeners, and [`split::plan`]: the routing plan as a value (facts → listener plan,
//!   per-rule plans, sticky cookie table).
//! - [`node`] (I/O only): the listener node, in wings that do not import each other —
//!   [`node::http`] (server, header rules, the request loop `proxy()` over the retry rule as a
//!   pure value in `http/retry.rs`, upstream and keep-alive pool, gtd's HTTP/1.1 client and
//!   codec, bodies, its own answers) and [`node::l4`] (TCP relay, UDP flows, PROXY protocol) —
//!   over shared parts that import no wing: [`node::accept`], [`node::connect`] (outbound
//!   sockets), [`node::attempt`] (the one attempt budget and the order of attempts),
//!   [`node::snapshot`] (the plan with this node's I/O handles attached, behind `ArcSwap`;
//!   what a wing hangs on it is an opaque `Attached` the wing builds and reads back),
//!   `node::access` (the access log's writer thread and sink, and the TCP/UDP line; the HTTP
//!   line is `http/access/`), `node::watch` (each endpoint's check state), `node::checks` (the active health checks
//!   and RTT probes), `node::status` (the listeners' views, for `/status` and the registry),
//!   `node::outcomes` (what an attempt's failure, answer or success does to its listener:
//!   marks, ejections, the timeline's listener events), the admin server, and
//!   [`node::telemetry`] (the metrics registry and [`node::events`], the event timeline,
//!   below admin and the data planes).
//! - [`fleet`]: the fleet on etcd — config revisions (`gtd push`), the node registry under
//!   leases, `gtd fleet`'s report, and the per-node predictions of `gtd push --dry-run` and
//!   `gtd fleet diff` (`fleet/predict.rs`: each node's entry as the simulator's input), over gtd's own etcd v3 client ([`fleet::etcd`], its
//!   gRPC code generated from `proto/etcd/` and checked in); a node in a fleet follows
//!   revisions with [`node::fleet`] and applies each as a reload.
//! - [`sim`]: the what-if simulator — a config and what-ifs (failing groups, check replays,
//!   latencies, ratios, client demand, a node's own order of groups) → each node region's split through [`split::plan`],
//!   capacity against demand, the N+1 check, as a table, JSON, CSV or SVG; one entry point,
//!   [`sim::run`], for the `sim` program, `gtd push --dry-run` and `gtd fleet diff`.
//! - [`view`]: what a node shows, as serde types both ways — the `/status` document, the
//!   listeners of a registry entry, `sim`'s per-group rows — built by pure functions from the
//!   plan and the live facts the node gathers; the demo, `gtd fleet` and the tests read them
//!   (the JSON contract: docs/status.md). [`view::explain`]: why one client goes where it goes
//!   (`GET /explain`, `sim --client`'s `explain`, `gtd explain`), one builder over the plan and
//!   the balancers' own walks (docs/explain.md).
//! - [`demo`]: `gtd demo` — real nodes, one per region, with embedded backends and client
//!   load on loopback, and a live view of observed against expected shares.
//!
//! The `gtd` node and the simulator ([`sim`]) both build their plans with [`split::plan`]
//! and call [`split`] and [`balance`] for every decision; there is no second implementation of
//! any decision. The rules themselves are stated in `docs/design.md`.

pub mod balance;
mod calendar;
pub mod config;
pub mod demo;
pub mod files;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod geoip;
pub mod health;
pub mod node;
mod pem;
pub mod regions;
pub mod sim;
pub mod split;
pub mod view;
