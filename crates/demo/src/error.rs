//! Why the demo did not run: what [`super::run`] returns, each message whole (the binary
//! prints it as `gtd demo: {e:#}`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use gtd_core::config::ConfigErrors;

/// What stops the demo.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config does not validate: every error, then their count.
    #[error("{}", errors.report(file))]
    Config {
        /// The file the errors point at.
        file: PathBuf,
        /// Every error found.
        errors: ConfigErrors,
    },
    /// `--rate 0`.
    #[error("--rate 0: the demo needs at least one decision a second")]
    NoRate,
    /// More regions than loopback addresses for their nodes.
    #[error("the demo runs at most 252 regions")]
    TooManyRegions,
    /// A `--stop`/`--start` naming no group of the config.
    #[error("{flag} {item}: no group {name:?} in the config (GROUP or LISTENER/GROUP)")]
    NoGroup {
        /// `--stop` or `--start`.
        flag: &'static str,
        /// As written.
        item: String,
        /// The group named.
        name: String,
    },
    /// A `--stop`/`--start` after the run ends.
    #[error("{flag} {item}: after the end of the run ({duration})")]
    AfterEnd {
        /// `--stop` or `--start`.
        flag: &'static str,
        /// As written.
        item: String,
        /// The run's `--duration`, as written in a config.
        duration: String,
    },
    /// A group that speaks TLS to its endpoints.
    #[error(
        "listener {listener:?} group {group:?} speaks TLS to its endpoints: the demo's endpoints \
         are plain; remove the group's tls table for the demo"
    )]
    GroupTls {
        /// The listener.
        listener: String,
        /// The group.
        group: String,
    },
    /// An endpoint off this machine.
    #[error(
        "listener {listener:?} group {group:?}: endpoint {endpoint} is not a loopback address; the \
         demo runs every endpoint on this machine (127.0.0.0/8, ::1)"
    )]
    NotLoopback {
        /// The listener.
        listener: String,
        /// The group.
        group: String,
        /// The endpoint, as written.
        endpoint: String,
    },
    /// One address for endpoints of different protocols.
    #[error(
        "{addr} is an endpoint (or check port) of {first} and of {second}, of different protocols: \
         the demo cannot serve both on one address"
    )]
    Shared {
        /// The address.
        addr: SocketAddr,
        /// The groups of the first endpoint there.
        first: String,
        /// The groups of the other.
        second: String,
    },
    /// An endpoint's address cannot be bound.
    #[error(
        "{addr} ({groups}): {error}; the demo serves this endpoint itself, so nothing else may \
         listen there — stop what does, or run the demo with a config whose endpoints are free"
    )]
    Taken {
        /// The address.
        addr: SocketAddr,
        /// Its groups.
        groups: String,
        /// Why not.
        error: std::io::Error,
    },
    /// The TLS client for HTTPS listeners.
    #[error("{0}")]
    Tls(String),
    /// A region's node did not start.
    #[error("starting the node of {region} on {ip}: {error}")]
    Node {
        /// The region.
        region: String,
        /// Its node's address.
        ip: IpAddr,
        /// Why not.
        error: gtd_node::Error,
    },
    /// The JSON report does not serialise (never seen).
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    /// A listener the node did not bind.
    #[error("listener {listener:?} not bound on {region}")]
    NotBound {
        /// The listener.
        listener: String,
        /// The region.
        region: String,
    },
}
