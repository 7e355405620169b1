//! The nodes the fleet expects (docs/operations.md "Missing nodes"): `PREFIX/expected/ID`, with
//! no lease, so that a node whose registry entry left with its lease is shown missing rather
//! than forgotten, until `gtd fleet forget ID`.
//!
//! Written twice at most per disappearance, never on a clock (etcd stays small): once by the
//! node itself, in the transaction of a registry write, only while the key is absent (its first
//! registration, or the first after a `forget`); and once by another node that saw the entry
//! leave ([`Gone`]: when, and the revision the node last served), guarded so that of the nodes
//! that saw it one writes.

use serde::{Deserialize, Serialize};

use super::etcd::pb::etcdserverpb as rpc;
use super::outcome::Outcome;
use super::registry::Entry;
use super::{Error, Result, Store, etcd_error, range};

/// A node that registered once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    /// Its id, as in the registry.
    pub id: String,
    /// Its acceleration region.
    pub region: String,
    /// Its admin server's address.
    pub admin: String,
    /// When it first registered, ms since the Unix epoch.
    pub registered_at_ms: u64,
    /// Its entry's last departure, as another node saw it (none: never seen to leave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone: Option<Gone>,
}

/// A registry entry seen leaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gone {
    /// When a node saw it leave, ms since the Unix epoch.
    pub at_ms: u64,
    /// The revision its last entry said it served.
    pub applied: Option<u64>,
    /// etcd's store revision of the deletion.
    pub etcd_revision: i64,
}

/// An expected node without a registry entry now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    /// Its id.
    pub id: String,
    /// Its acceleration region.
    pub region: String,
    /// Its admin server's address.
    pub admin: String,
    /// When it first registered, ms since the Unix epoch.
    pub registered_at_ms: u64,
    /// Since when it is missing, ms since the Unix epoch (none: no node saw its entry leave,
    /// e.g. every node was down then).
    pub since_ms: Option<u64>,
    /// The revision it last served, when known.
    pub last_applied: Option<u64>,
    /// etcd's store revision when its entry left, when known.
    pub etcd_revision: Option<i64>,
}

impl Expected {
    /// The record a node's first registry entry leaves.
    pub fn of(entry: &Entry) -> Expected {
        Expected {
            id: entry.id.clone(),
            region: entry.region.clone(),
            admin: entry.admin.clone(),
            registered_at_ms: entry.updated_at_ms,
            gone: None,
        }
    }
}

/// The expected nodes without a live entry, in region and id order.
pub fn missing(expected: &[Expected], live: &[Entry]) -> Vec<Missing> {
    let mut out: Vec<Missing> = expected
        .iter()
        .filter(|e| !live.iter().any(|l| l.id == e.id))
        .map(|e| Missing {
            id: e.id.clone(),
            region: e.region.clone(),
            admin: e.admin.clone(),
            registered_at_ms: e.registered_at_ms,
            since_ms: e.gone.map(|g| g.at_ms),
            last_applied: e.gone.and_then(|g| g.applied),
            etcd_revision: e.gone.map(|g| g.etcd_revision),
        })
        .collect();
    out.sort_by(|a, b| (&a.region, &a.id).cmp(&(&b.region, &b.id)));
    out
}

/// The write of a node's registry `entry` under `lease` (`nodes_key` + id), with its expected
/// record when there is none yet (`with_expected`; a node whose etcd user may not write
/// `PREFIX/expected/` writes the entry alone): one transaction, one store revision.
pub fn register(
    store: &Store,
    entry: &Entry,
    lease: i64,
    with_expected: bool,
) -> std::result::Result<rpc::TxnRequest, serde_json::Error> {
    use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
    use rpc::request_op::Request;
    let put = |key: String, value: Vec<u8>, lease: i64| rpc::RequestOp {
        request: Some(Request::RequestPut(rpc::PutRequest {
            key: key.into_bytes(),
            value,
            lease,
            ..Default::default()
        })),
    };
    let entry_put = put(
        format!("{}{}", store.nodes_key(), entry.id),
        serde_json::to_vec(entry)?,
        lease,
    );
    if !with_expected {
        return Ok(rpc::TxnRequest {
            compare: vec![],
            success: vec![entry_put],
            failure: vec![],
        });
    }
    let key = store.expected_key(&entry.id);
    let record = serde_json::to_vec(&Expected::of(entry))?;
    Ok(rpc::TxnRequest {
        compare: vec![rpc::Compare {
            result: CompareResult::Equal.into(),
            target: CompareTarget::Version.into(),
            key: key.clone().into_bytes(),
            target_union: Some(TargetUnion::Version(0)),
            ..Default::default()
        }],
        success: vec![entry_put.clone(), put(key, record, 0)],
        failure: vec![entry_put],
    })
}

/// A watch of the registry's departures from store revision `start` (0: from now): its
/// entries' deletions, each with the entry it deleted.
pub fn departures(store: &Store, start: i64) -> rpc::WatchCreateRequest {
    let r = range(&store.nodes_key(), true);
    rpc::WatchCreateRequest {
        key: r.key,
        range_end: r.range_end,
        start_revision: start,
        filters: vec![rpc::watch_create_request::FilterType::Noput.into()],
        prev_kv: true,
        ..Default::default()
    }
}

impl Store {
    /// `PREFIX/expected/ID`.
    pub fn expected_key(&self, id: &str) -> String {
        format!("{}/expected/{id}", self.prefix)
    }

    /// Every expected node's record.
    pub async fn expected(&mut self) -> Result<Vec<Expected>> {
        let from = self.expected_key("");
        let resp = self
            .client
            .range(rpc::RangeRequest {
                serializable: self.serializable,
                ..range(&from, true)
            })
            .await
            .map_err(etcd_error("reading the expected nodes"))?;
        Ok(resp
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect())
    }

    /// Deletes node `id`'s expected record; whether there was one.
    pub async fn forget(&mut self, id: &str) -> Result<bool> {
        let resp = self
            .client
            .delete_range(rpc::DeleteRangeRequest {
                key: self.expected_key(id).into_bytes(),
                ..Default::default()
            })
            .await
            .map_err(etcd_error(format!("forgetting node {id}")))?;
        Ok(resp.deleted > 0)
    }

    /// Records in `last`'s expected record that its entry left at store revision `deleted`,
    /// unless its record is gone (forgotten), already says so (another node was first), or the
    /// node is back. Whether this call wrote it.
    pub async fn mark_gone(&self, last: &Entry, deleted: i64) -> Result<bool> {
        use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
        use rpc::request_op::Request;
        let key = self.expected_key(&last.id);
        let resp = self
            .client
            .range(range(&key, false))
            .await
            .map_err(etcd_error(format!(
                "reading node {}'s expected record",
                last.id
            )))?;
        let Some(kv) = resp.kvs.first() else {
            return Ok(false);
        };
        if kv.mod_revision > deleted {
            return Ok(false);
        }
        let Ok(mut record) = serde_json::from_slice::<Expected>(&kv.value) else {
            return Ok(false);
        };
        record.gone = Some(Gone {
            at_ms: super::now_ms(),
            applied: last.applied,
            etcd_revision: deleted,
        });
        let compare = |key: String, target: CompareTarget, union: TargetUnion| rpc::Compare {
            result: CompareResult::Equal.into(),
            target: target.into(),
            key: key.into_bytes(),
            target_union: Some(union),
            ..Default::default()
        };
        let txn = rpc::TxnRequest {
            compare: vec![
                compare(
                    key.clone(),
                    CompareTarget::Mod,
                    TargetUnion::ModRevision(kv.mod_revision),
                ),
                compare(
                    format!("{}{}", self.nodes_key(), last.id),
                    CompareTarget::Version,
                    TargetUnion::Version(0),
                ),
            ],
            success: vec![rpc::RequestOp {
                request: Some(Request::RequestPut(rpc::PutRequest {
                    key: key.into_bytes(),
                    value: serde_json::to_vec(&record).map_err(Error::Encode)?,
                    ..Default::default()
                })),
            }],
            failure: vec![],
        };
        let resp = self
            .client
            .txn(txn)
            .await
            .map_err(etcd_error(format!("recording that node {} left", last.id)))?;
        Ok(resp.succeeded)
    }
}

/// `gtd fleet forget ID`: its expected record deleted, or an error naming it.
pub async fn forget(store: &mut Store, id: &str) -> Result<Outcome> {
    let live = store.nodes().await?.iter().any(|e| e.id == id);
    if !store.forget(id).await? {
        return Ok(Outcome {
            out: String::new(),
            err: format!(
                "gtd: node {id:?} is not expected under {} (gtd fleet lists the ids); nothing forgotten\n",
                store.prefix()
            ),
            code: 1,
        });
    }
    let mut out = format!("forgot node {id} under {}\n", store.prefix());
    if live {
        out.push_str(&format!(
            "{id} is registered now: it is expected again when its entry next changes\n"
        ));
    }
    Ok(Outcome {
        out,
        err: String::new(),
        code: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> Entry {
        serde_json::from_value(serde_json::json!({
            "id": id, "region": "r", "admin": "127.0.0.1:9100", "bind": "127.0.0.1",
            "version": "0", "applied": 3, "source": "etcd", "refused": null, "uptime_s": 0,
            "updated_at_ms": 1000, "listeners": []
        }))
        .unwrap()
    }

    #[test]
    fn an_expected_node_without_an_entry_is_missing_with_what_was_seen_of_its_leaving() {
        let gone = Gone {
            at_ms: 5000,
            applied: Some(3),
            etcd_revision: 42,
        };
        let mut b = Expected::of(&entry("b"));
        b.gone = Some(gone);
        let expected = [Expected::of(&entry("a")), b, Expected::of(&entry("c"))];
        let missing = missing(&expected, &[entry("a")]);
        let seen: Vec<(&str, Option<u64>, Option<u64>)> = missing
            .iter()
            .map(|m| (m.id.as_str(), m.since_ms, m.last_applied))
            .collect();
        assert_eq!(seen, [("b", Some(5000), Some(3)), ("c", None, None)]);
        assert_eq!(missing[0].etcd_revision, Some(42));
    }

    #[test]
    fn a_node_that_left_and_came_back_is_not_missing() {
        let mut a = Expected::of(&entry("a"));
        a.gone = Some(Gone {
            at_ms: 1,
            applied: None,
            etcd_revision: 1,
        });
        assert!(missing(&[a], &[entry("a")]).is_empty());
    }
}
