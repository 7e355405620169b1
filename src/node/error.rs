//! Why a node did not start (or a reload was refused): the edge [`super::Node::start`] returns.
//!
//! Each message is whole, inner error included, as the binary and the reload's log print it
//! (`{e:#}`); a fleet's etcd errors keep their chains for [`crate::fleet::describe`].

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{ConfigErrors, RegionError};

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
    /// A certificate or key cannot be used (the message names the listener and the file).
    #[error("{0}")]
    Snapshot(String),
    /// The access log cannot be opened or installed.
    #[error("{0}")]
    AccessLog(String),
    /// An admin server reachable beyond this host without a token.
    #[error("{0}")]
    Admin(String),
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
