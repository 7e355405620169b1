//! gtd — a global traffic director.
//!
//! # Module map (data flows down the list)
//!
//! - [`config`]: `config.toml` → validated, typed [`config::Config`]; every error names
//!   `FILE:LINE:COL` and the path of names.
//! - [`regions`]: the region catalogue and the great-circle RTT estimate used before any
//!   measurement exists.
//! - [`split`] (pure): between groups — priority ranking with hysteresis, the
//!   traffic-distribution-ratio cascade, failover, and the per-decision group choice (smooth
//!   rotation, or weighted rendezvous hashing of the client address).
//! - [`balance`] (pure): inside a group — one module per balancing method behind one interface,
//!   with per-endpoint state in atomics shared by all threads of a node.
//! - [`node`] (I/O): the listener node — routing snapshot behind `ArcSwap`, TCP, UDP and
//!   HTTP/HTTPS data planes (forwarding rules from [`split::rules`], pooled upstreams, TLS),
//!   reload and drain, the admin server and metrics.
//!
//! The `gtd` node and the `sim` simulator both call [`split`] and [`balance`]; there is no second
//! implementation of any decision.

pub mod balance;
pub mod config;
pub mod node;
mod pem;
pub mod regions;
pub mod split;
