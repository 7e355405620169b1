//! Active health checks and measured RTT, end to end on loopback: nodes in this process check
//! real backends (TCP, HTTP, HTTPS) that refuse, hang, or answer the wrong status, header or
//! body, each check numbered by the backend so that thresholds are counted exactly; failover to
//! the next group and back while HTTP GETs keep succeeding; `recompute` against
//! `next-priority`; priority re-ranked by measured RTT, and not by jitter; health kept across a
//! reload; the metrics the shipped alerts watch moving as their events happen.
//!
//! Intervals are the minimum (1 s). Every wait is for an event, with a generous bound; no test
//! asserts a duration. Backends, nodes and clients are stopped by their own handles.

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod checks;
mod failover;
mod metrics;
mod outlier;
mod passive;
mod ranking;
mod shortage;
mod talk;
mod timeline;
mod udp;
