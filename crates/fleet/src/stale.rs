//! `gtd fleet`, `gtd fleet history` and a node's `GET /fleet` without etcd's quorum: when no
//! member answers with a leader, what they show is read from one member's own store
//! (serializable reads, which need no leader) and the answer says so, with the member and how
//! far its store had come. Nothing is written this way.

use serde::{Deserialize, Serialize};

use super::{Access, Class, Error, Result, Store, Unreachable, normalise_prefix};

/// Where a stale answer came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stale {
    /// The member that answered.
    pub member: String,
    /// Its raft index when asked (how far its log had come).
    pub raft_index: u64,
    /// Its store revision when asked.
    pub revision: i64,
    /// Whether it knew a leader (a stale read is taken only when the linearizable one failed,
    /// usually because no member knows one).
    pub leader: bool,
    /// Why the linearizable read failed.
    pub why: String,
}

impl Stale {
    /// The lines a stale answer opens with: where it was read and why, and that `what` may be
    /// missing from it.
    pub fn banner(&self, what: &str) -> String {
        format!(
            "STALE: read from {}'s own store (raft index {}, etcd revision {}{}): {what} may be missing\n  (no quorum read: {})\n",
            self.member,
            self.raft_index,
            self.revision,
            if self.leader { "" } else { ", no leader" },
            self.why
        )
    }
}

impl Store {
    /// A connection to the first member that answers, leader or not, with every read
    /// serializable (from that member's own store); and what the member said of itself.
    /// `why` is the linearizable read's failure, kept in the answer.
    pub async fn connect_stale(
        access: &Access,
        prefix: &str,
        why: String,
    ) -> Result<(Store, Stale)> {
        let prefix = normalise_prefix(prefix).map_err(|error| Error::Prefix {
            prefix: prefix.to_owned(),
            error,
        })?;
        // Without "hasleader": a member without a leader still answers from its store.
        let options = access.options(true)?.with_require_leader(false);
        let mut errors = Vec::new();
        for endpoint in access.endpoints() {
            let client = match Store::connect_one(endpoint, options.clone(), false).await {
                Ok(c) => c,
                Err((reason, class)) => {
                    errors.push((format!("{endpoint}: {reason}"), class));
                    continue;
                }
            };
            let status = match tokio::time::timeout(super::REQUEST_TIMEOUT, client.status()).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    errors.push((format!("{endpoint}: {}", e.brief()), Class::of(&e)));
                    continue;
                }
                Err(_) => {
                    errors.push((format!("{endpoint}: timed out"), Class::Outage));
                    continue;
                }
            };
            let stale = Stale {
                member: endpoint.clone(),
                raft_index: status.raft_index,
                revision: status.header.as_ref().map_or(0, |h| h.revision),
                leader: status.leader != 0,
                why,
            };
            let store = Store {
                client,
                prefix,
                endpoint: endpoint.clone(),
                user: access.user().map(str::to_owned),
                serializable: true,
            };
            return Ok((store, stale));
        }
        Err(Unreachable::of(access, errors))
    }
}
