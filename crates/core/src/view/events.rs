//! `GET /events`: what happened on a node lately, newest first (docs/status.md, `Events`).

use serde::{Deserialize, Serialize};

/// The `/events` document: the node's last events, newest first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Events {
    /// At most this many are kept.
    pub capacity: usize,
    /// The events, newest first.
    pub events: Vec<EventView>,
}

/// One event of a node's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    /// When it happened, ms since the Unix epoch.
    pub at_unix_ms: u64,
    /// `failover`, `failback`, `mode`, `rank`, `passive`, `ejection`, `reload` or `revision`.
    pub kind: String,
    /// The listener it concerns (`None`, written `null`: the node's).
    pub listener: Option<String>,
    /// The group it concerns, where one does.
    pub group: Option<String>,
    /// The endpoint it concerns, where one does (its address as `/status` writes it).
    pub endpoint: Option<String>,
    /// What happened, and why: the groups and RTTs of a rank change, the cause of a mark.
    pub message: String,
}
