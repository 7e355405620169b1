//! HTTP and HTTPS listeners against real sockets on loopback: requests through `gtd` to small
//! hyper backends that name themselves. The split compared with `sim`, nginx's round-robin
//! sequence, retries (and what is never retried), failover across groups, 1 GB each way with
//! bounded memory, HTTP/2 to HTTP/1.1, fail-open, forwarding rules and their 404, sticky cookies,
//! HTTPS with SNI and ALPN, TLS and mTLS to endpoints, header timeouts, WebSocket upgrades,
//! endpoints that stall mid-body, every response framing through gtd's own client and its
//! keep-alive race, the access log of all of them, and hostile endpoints and clients (an endpoint
//! that writes unasked must never answer the wrong client; request framing and `Connection`).
//!
//! Every backend and node a test starts is stopped by its own handle. Waits are for events
//! (with generous bounds), never fixed sleeps standing in for them; nothing asserts timing.

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod access_log;
mod descriptors;
mod drain;
mod errors;
mod fail_open;
mod feedback;
mod h2_conformance;
mod h2_readers;
mod hostile;
mod limits;
mod own_client;
mod parking;
mod protocols;
mod retries;
mod routes;
mod split;
mod stalled;
mod sticky;
mod streaming;
mod timeouts;
mod tls;
mod trailers;
mod upgrades;
