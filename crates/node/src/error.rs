//! Why a node did not start (or a reload was refused): the edge [`super::Node::start`] returns.
//!
//! Each message is whole, inner error included, as the binary and the reload's log print it
//! (`{e:#}`); a fleet's etcd errors keep their chains for [`gtd_fleet::describe`].

use std::net::SocketAddr;
use std::path::PathBuf;

use gtd_core::config::{ConfigErrors, RegionError};

use super::access::AccessLogError;
use super::snapshot::BuildError;

/// What stops a node from starting, or a reload from being applied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The config (file or fleet revision) does not validate: every error, then their count.
    #[error("{}", errors.report(file))]
    Config {
        /// The file the errors point at.
        file: PathBuf,
        /// Every error found.
        errors: ConfigErrors,
    },
    /// `--region` is not one the config serves.
    #[error(transparent)]
    Region(#[from] RegionError),
    /// The resolver for the config's host names cannot be set up.
    #[error("{0}")]
    Resolver(String),
    /// The config cannot be built into a snapshot: a certificate, key or client (the message
    /// names the listener, the group and the file).
    #[error(transparent)]
    Snapshot(#[from] BuildError),
    /// The access log cannot be opened or installed.
    #[error(transparent)]
    AccessLog(#[from] AccessLogError),
    /// An admin server reachable beyond this host without a token.
    #[error(
        "the admin server on {bind} is reachable beyond this host, and [admin] in {} has no \
         token: set token = \"...\" or allow_without_token = true",
        config.display()
    )]
    Admin {
        /// Where the admin server is bound.
        bind: SocketAddr,
        /// The config without a token.
        config: PathBuf,
    },
    /// `[node] source_ip` (or `--source-ip`) cannot be bound: not an address of this machine.
    #[error(
        "{from} {ip}: not an address of this machine ({error}); every connection to an \
         endpoint would fail"
    )]
    SourceIp {
        /// The address.
        ip: std::net::IpAddr,
        /// Where it was set: `FILE: [node] source_ip =`, or `--source-ip`.
        from: String,
        /// Why it cannot be bound.
        error: std::io::Error,
    },
    /// A reload while the node drains (SIGTERM): its ports are closed for good.
    #[error("the node is draining (SIGTERM): reload refused")]
    Draining,
    /// A reload's step run off the runtime ended without an answer (it panicked).
    #[error("{doing} failed: {error}")]
    Interrupted {
        /// "reading the config", "opening the access log", "building the snapshot".
        doing: &'static str,
        /// The task's end.
        error: tokio::task::JoinError,
    },
    /// The admin server's address cannot be bound.
    #[error("binding the admin server on {addr}: {error}")]
    AdminBind {
        /// Where.
        addr: SocketAddr,
        /// Why not.
        error: std::io::Error,
    },
    /// A listener's port cannot be bound.
    #[error("listener {name:?}: binding {protocol} {addr}: {error}")]
    Bind {
        /// The listener's name.
        name: String,
        /// `tcp` or `udp`.
        protocol: &'static str,
        /// Where.
        addr: SocketAddr,
        /// Why not.
        error: std::io::Error,
    },
    /// A socket's own address cannot be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The fleet gives no revision to start from.
    #[error(transparent)]
    Fleet(#[from] super::fleet::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages anyhow's contexts printed (`{e:#}`), whole in `{e}` now: the binary, the
    /// reload's log and the tests match on them.
    #[test]
    fn bind_messages_carry_the_os_error() {
        let addr: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let error = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let bind = Error::Bind {
            name: "web".into(),
            protocol: "tcp",
            addr,
            error: error(),
        };
        assert_eq!(
            bind.to_string(),
            format!("listener \"web\": binding tcp 127.0.0.1:80: {}", error())
        );
        let admin = Error::AdminBind {
            addr,
            error: error(),
        };
        assert_eq!(
            format!("{admin:#}"),
            format!("binding the admin server on 127.0.0.1:80: {}", error())
        );
    }
}
