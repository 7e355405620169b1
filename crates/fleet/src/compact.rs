//! Compaction of etcd's history, done by the fleet's nodes as Kubernetes' API servers do it
//! (docs/operations.md "etcd's size"): every [`INTERVAL`], one node of the fleet wins a
//! transaction on `PREFIX/compaction` and compacts etcd to the store revision the previous
//! round saw, so that at least one interval of history stays (enough for a node's watch to
//! resume after a reconnect) and nothing older piles up. The registry's rewrites and the pushes
//! leave no more than that behind; etcd's own `--auto-compaction-*` flags (deploy/) do the same
//! job from the server's side, and either is enough.

use super::etcd::pb::etcdserverpb as rpc;
use super::{Error, Store};

/// How often a round runs: the history kept is between one and two of these.
pub const INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

/// What one node knows between rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// The version of `PREFIX/compaction` this node last saw (0: none yet).
    pub version: i64,
    /// The store revision when it was seen: what the next winner compacts to (0: nothing).
    pub revision: i64,
}

/// What a round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Another node ran this round (or this node's view was behind): nothing compacted.
    Lost,
    /// This node won the round; history before `compacted` is gone (0: nothing to compact
    /// yet, the first round).
    Won {
        /// The revision compacted to.
        compacted: i64,
    },
}

/// One round: a transaction that succeeds only for the node whose last view of
/// `PREFIX/compaction` is still current (so that one node of the fleet wins each round), then,
/// for the winner, a compaction to the revision of the previous round. Returns the view for the
/// next round and what happened.
pub async fn round(store: &Store, last: Round) -> Result<(Round, Outcome), Error> {
    use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
    use rpc::request_op::Request;
    let key = format!("{}/compaction", store.prefix()).into_bytes();
    let txn = rpc::TxnRequest {
        compare: vec![rpc::Compare {
            result: CompareResult::Equal.into(),
            target: CompareTarget::Version.into(),
            key: key.clone(),
            target_union: Some(TargetUnion::Version(last.version)),
            ..Default::default()
        }],
        success: vec![rpc::RequestOp {
            request: Some(Request::RequestPut(rpc::PutRequest {
                key: key.clone(),
                value: last.revision.to_string().into_bytes(),
                ..Default::default()
            })),
        }],
        failure: vec![rpc::RequestOp {
            request: Some(Request::RequestRange(rpc::RangeRequest {
                key,
                ..Default::default()
            })),
        }],
    };
    let resp = store
        .client()
        .txn(txn)
        .await
        .map_err(crate::etcd_error("claiming the compaction round"))?;
    let now = resp.header.as_ref().map_or(0, |h| h.revision);
    if !resp.succeeded {
        // Someone else's round: remember the key's version, so that this node can win the next
        // one if nobody else does.
        let version = resp
            .responses
            .first()
            .and_then(|r| match &r.response {
                Some(rpc::response_op::Response::ResponseRange(range)) => range.kvs.first(),
                _ => None,
            })
            .map_or(0, |kv| kv.version);
        return Ok((
            Round {
                version,
                revision: now,
            },
            Outcome::Lost,
        ));
    }
    let next = Round {
        version: last.version + 1,
        revision: now,
    };
    if last.revision == 0 {
        return Ok((next, Outcome::Won { compacted: 0 }));
    }
    match store.client().compact(last.revision).await {
        Ok(_) => {}
        // Compacted further already (etcd's own auto-compaction, an operator): nothing left.
        Err(e) if e.is_compacted() => {}
        Err(error) => {
            return Err(Error::etcd("compacting etcd's history", error));
        }
    }
    Ok((
        next,
        Outcome::Won {
            compacted: last.revision,
        },
    ))
}
