//! gtd's decisions, pure: every rule a node and the simulator apply, with no I/O runtime in
//! this crate's dependencies (no tokio, hyper or tonic), so that nothing here can wait on a
//! socket or reach up into the crates that do.
//!
//! # Layout (data flows down the list)
//!
//! - [`config`]: `config.toml` → the spanned TOML document → `validate/` (one file per
//!   section) → the typed, validated [`config::Config`] (`model/`: every type and every
//!   default, once). Every error names `FILE:LINE:COL` and the path of names.
//! - [`regions`]: the region catalogue and the great-circle RTT estimate used before any
//!   measurement exists.
//! - [`health`]: the verdict of an endpoint's active checks — thresholds, `explicit`,
//!   `essential`, flap damping — as a state machine fed one check result at a time, and the
//!   measured RTT averages that rank groups.
//! - [`balance`]: inside a group — one module per balancing method behind one interface,
//!   with per-endpoint state in atomics shared by all threads of a node.
//! - [`split`]: between groups — priority ranking with hysteresis, the
//!   traffic-distribution-ratio cascade, failover, the per-decision group choice (smooth
//!   rotation, or weighted rendezvous hashing of the client address), the forwarding rules of
//!   HTTP listeners, and [`split::plan`]: the routing plan as a value (facts → listener plan,
//!   per-rule plans, sticky cookie table).
//! - [`view`]: what a node shows, as serde types both ways — the `/status` document, the
//!   listeners of a registry entry, `sim`'s per-group rows — built by pure functions from the
//!   plan and the live facts the node gathers (the JSON contract: docs/status.md).
//!   [`view::explain`]: why one client goes where it goes (`GET /explain`, `sim --client`'s
//!   `explain`, `gtd explain`), one builder over the plan and the balancers' own walks
//!   (docs/explain.md).
//! - Leaves every layer may use: [`files`] (reading files an operator names), [`geoip`]
//!   (`.mmdb` look-ups), [`hash`] (the fixed placement hash: source-ip affinity, sticky
//!   cookies, the check spread), [`pem`] (certificates and keys, checked with rustls's ring
//!   provider: `gtd check` proves a key matches its certificate before any node starts),
//!   [`calendar`], [`sync`] (the one policy for a poisoned lock).
//!
//! The node (`gtd-node`) and the simulator (`gtd-sim`) both build their plans with
//! [`split::plan`] and call [`split`] and [`balance`] for every decision; there is no second
//! implementation of any decision. The rules themselves are stated in `docs/design.md`.

pub mod balance;
pub mod calendar;
pub mod config;
pub mod files;
pub mod geoip;
pub mod hash;
pub mod health;
pub mod pem;
pub mod regions;
pub mod split;
pub mod sync;
pub mod view;
