//! The node against real sockets on loopback: TCP and UDP through `gtd` to backends that name
//! themselves, compared with what `sim` expects for the same config; retries, no-route,
//! half-close, a 1 GB stream, UDP flows, fail-open, reload under load, bad reloads, SIGTERM
//! draining.
//!
//! Every backend, node and process a test starts is stopped by its own handle. Waits are for
//! events (with generous bounds), never fixed sleeps standing in for them.

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod admin_drain;
mod dns;
mod errors;
mod explain;
mod fail_open;
mod failback;
mod geoip;
mod lifecycle;
mod stream_log;
mod tcp;
mod udp;
