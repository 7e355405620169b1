//! The fleet on etcd (v3 API): config revisions, the node registry, and what `gtd push` and
//! `gtd fleet` do with them (docs/operations.md).
//!
//! Keys under the prefix (default `/gtd`), nothing else:
//! - `PREFIX/revision`: the number of the current revision, as decimal text;
//! - `PREFIX/revisions/NNNNNNNNNNNN`: revision N as a JSON [`Revision`] (the config's text and its
//!   catalogue's), zero-padded so that keys sort by number; the last `keep` stay, for rollback
//!   and diff;
//! - `PREFIX/nodes/ID`: a node's [`registry::Entry`], under the node's lease, so that a node
//!   that dies leaves the registry when its lease runs out;
//! - `PREFIX/expected/ID`: a node that registered once ([`expected::Expected`]), without a
//!   lease: a node gone from the registry is shown missing until `gtd fleet forget ID`.
//! - `PREFIX/drains/LISTENER/GROUP[/ENDPOINT]`: a fleet-wide drain as a JSON [`drain::Drain`]
//!   (`gtd drain`), without a lease: it stays until `gtd undrain`.
//!
//! A push writes the new revision and moves `PREFIX/revision` in one transaction that succeeds
//! only if `PREFIX/revision` did not change since it was read: two pushes never both win, and a
//! node never sees a number whose document is missing. Nodes watch `PREFIX/revision`
//! (gtd-node's fleet follower) and apply each new revision as a reload.

pub mod access;
pub mod compact;
mod compare;
pub mod drain;
pub mod etcd;
pub mod expected;
pub mod history;
pub mod outcome;
mod predict;
pub mod push;
pub mod ramp;
pub mod registry;
pub mod report;
pub mod stale;
mod words;

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd::pb::etcdserverpb as rpc;
use etcd::{Client, ConnectOptions};
use serde::{Deserialize, Serialize};

use gtd_core::config::{self, Config, ConfigErrors};

pub use access::{Access, Credentials};

/// What went wrong with the fleet's keys on etcd, or reaching etcd.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `--prefix` that is not one.
    #[error("--prefix {prefix:?}: {error}")]
    Prefix {
        /// As given.
        prefix: String,
        /// Why not.
        error: PrefixError,
    },
    /// The etcd settings or their files.
    #[error(transparent)]
    Access(#[from] access::AccessError),
    /// No member answered, or every one refused.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    /// A request etcd failed (its error is the source, for [`describe`]), classified as it
    /// was turned into this error ([`Error::etcd`]).
    #[error("{doing}")]
    Etcd {
        /// What was being done: "reading the current revision".
        doing: String,
        /// What etcd's answer means for asking again.
        class: Class,
        /// etcd's answer, or the transport's failure.
        #[source]
        error: etcd::Error,
    },
    /// `PREFIX/revision` holds something else than a number.
    #[error("{key} holds {text:?}, not a revision number")]
    NotANumber {
        /// The key.
        key: String,
        /// What it holds.
        text: String,
    },
    /// `PREFIX/revision` names a revision that is gone.
    #[error("{key} names revision {n}, which is not kept")]
    NotKept {
        /// The key.
        key: String,
        /// The revision.
        n: u64,
    },
    /// A revision's key holds something else than a revision.
    #[error("{key} does not hold a gtd revision")]
    NotARevision {
        /// The key.
        key: String,
        /// What JSON says.
        #[source]
        error: serde_json::Error,
    },
    /// A revision, or a report, that does not serialise as JSON (never seen).
    #[error(transparent)]
    Encode(serde_json::Error),
    /// Another push won the transaction.
    #[error(
        "another push published a revision after {0} was read; nothing was published (push again)"
    )]
    Conflict(u64),
    /// The config or catalogue file of a draft.
    #[error("{0}")]
    Read(config::ConfigErrors),
    /// A config whose catalogue came from no file.
    #[error("the config's catalogue was not read from a file")]
    NoCatalogFile,
}

/// As a `dyn Error`, for [`describe`].
impl AsRef<dyn std::error::Error + Send + Sync + 'static> for Error {
    fn as_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
}

type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// etcd's `error` while `doing` something, classified here, once: every later question
    /// (ask again? an election?) reads the [`Class`], not etcd's error.
    pub fn etcd(doing: impl Into<String>, error: etcd::Error) -> Error {
        Error::Etcd {
            doing: doing.into(),
            class: Class::of(&error),
            error,
        }
    }
}

/// [`Error::etcd`] for `doing`, for `map_err`.
pub(crate) fn etcd_error(doing: impl Into<String>) -> impl FnOnce(etcd::Error) -> Error {
    let doing = doing.into();
    move |error| Error::etcd(doing, error)
}

/// What a failure to reach etcd, or etcd's answer, means for asking again: decided once,
/// where gtd's error is built from etcd's ([`Error::etcd`], [`Unreachable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Asking again does not change it: credentials or a request etcd refuses, a certificate
    /// one side of the TLS handshake refuses ([`refusal`]).
    Refused,
    /// etcd is electing a leader ([`etcd::Error::is_election`]): asking again once one is
    /// elected gets past it.
    Election,
    /// Anything else of etcd or the way to it (a member gone, a timeout, a connection
    /// refused): an outage, worth asking again.
    Outage,
}

impl Class {
    /// The class of etcd's answer (or the transport's failure).
    pub fn of(e: &etcd::Error) -> Class {
        if refusal(e) {
            Class::Refused
        } else if e.is_election() {
            Class::Election
        } else {
            Class::Outage
        }
    }

    /// Whether asking again may get another answer.
    pub fn transient(self) -> bool {
        self != Class::Refused
    }
}

/// An error of gtd's that may be, or wrap, a failure of etcd's: its [`Class`] as its variants
/// hold it (a wrapper asks the error it wraps). Read by [`transient`], [`in_election`] and
/// [`retrying`].
pub trait Classified {
    /// The class of etcd's failure this error is; `None` when it is not etcd's (a refusal of
    /// gtd's own, a file, a config).
    fn class(&self) -> Option<Class>;
}

impl Classified for Error {
    fn class(&self) -> Option<Class> {
        match self {
            Error::Etcd { class, .. } => Some(*class),
            Error::Unreachable(u) => Some(u.class()),
            _ => None,
        }
    }
}

/// The prefix when none is given.
pub const DEFAULT_PREFIX: &str = "/gtd";
/// How many revisions a push keeps (the new one included).
pub const DEFAULT_KEEP: u64 = 10;
/// How long connecting to etcd may take before a command gives up on it (a node keeps
/// retrying with backoff).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound of one request to etcd.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One published revision of the fleet's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    /// Its number: 1, 2, 3... (a rollback is a new number with an old revision's text).
    pub revision: u64,
    /// When it was published, ms since the Unix epoch.
    pub pushed_at_ms: u64,
    /// Who published it (`user@host`, and `as etcd user NAME` when etcd's users are on).
    pub pushed_by: String,
    /// The name of the config file it was pushed from (its errors and relative paths are
    /// read as if the file had this name in a node's working directory).
    pub config_name: String,
    /// The config's text.
    pub config: String,
    /// The name of the catalogue file.
    pub catalog_name: String,
    /// The region catalogue's text.
    pub catalog: String,
    /// The revision whose text this one republished (`gtd push --rollback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of: Option<u64>,
    /// What the pusher said of it (`gtd push -m`); empty when nothing was said, and in the
    /// revisions of versions before it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Revision {
    /// The file name errors in its config carry: `config.toml@7`. It has no directory, so
    /// relative paths in the config (certificates, the GeoIP database, the access log) are
    /// resolved against the working directory of whoever validates it: the node's.
    pub fn config_file(&self) -> PathBuf {
        PathBuf::from(format!("{}@{}", self.config_name, self.revision))
    }

    /// Validates the revision's config with its catalogue, as a node would load it: the
    /// files it names are read (relative to the working directory).
    pub fn validate(&self) -> Result<Config, ConfigErrors> {
        let catalog_file = PathBuf::from(format!("{}@{}", self.catalog_name, self.revision));
        let catalog = config::parse_catalog(&self.catalog, &catalog_file)?;
        let mut cfg = config::parse(&self.config, &self.config_file(), &catalog)?;
        cfg.catalog_file = Some(catalog_file);
        Ok(cfg)
    }

    /// Whether `other` carries the same config and catalogue text.
    pub fn same_text(&self, other: &Revision) -> bool {
        self.config == other.config && self.catalog == other.catalog
    }
}

/// A connection to etcd under one prefix (cheap to clone: the channel is shared).
#[derive(Clone)]
pub struct Store {
    client: Client,
    prefix: String,
    endpoint: String,
    /// The etcd user this connection authenticated as (none: no user, or users are off).
    user: Option<String>,
    /// Reads answered by the member from its own store, without asking the leader: they work
    /// during an election, and a node that follows a watch from the header they return misses
    /// nothing (see [`Store::serializable`]).
    serializable: bool,
}

/// An error in a few words: its context, then for an etcd client error the gRPC status's
/// message or, for a transport failure, its innermost cause ("Connection refused"), not
/// tonic's nested debug output.
pub fn describe<E>(e: &E) -> String
where
    E: AsRef<dyn std::error::Error + Send + Sync + 'static> + ?Sized,
{
    describe_error(e.as_ref())
}

/// [`describe`] of any error: each cause's text, down to the first [`etcd::Error`], which
/// is told in its own few words ([`etcd::Error::brief`]).
pub fn describe_error(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        next = cause.source();
        if let Some(etcd) = cause.downcast_ref::<etcd::Error>() {
            parts.push(etcd.brief());
            break;
        }
        parts.push(cause.to_string());
    }
    parts.join(": ")
}

/// `PREFIX/revision` as read: the number, and the etcd revision it was last written at (what
/// a push's transaction compares).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Current {
    /// The current revision's number (0: nothing published yet).
    pub number: u64,
    /// etcd's `mod_revision` of the key (0 when absent).
    pub mod_revision: i64,
    /// etcd's store revision when it was read: a watch from `header + 1` misses nothing.
    pub header: i64,
}

/// A `--prefix` that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a key prefix starts with / (e.g. /gtd)")]
pub struct PrefixError;

/// A prefix as keys use it: starts with `/`, no trailing `/`.
pub fn normalise_prefix(prefix: &str) -> std::result::Result<String, PrefixError> {
    let p = prefix.trim_end_matches('/');
    if !p.starts_with('/') || p.contains("//") {
        return Err(PrefixError);
    }
    Ok(p.to_owned())
}

impl Store {
    /// Connects to the first member, in turn from a random one, that answers and knows a
    /// leader. One member at a time, rather than one channel balanced over all: a balanced
    /// channel keeps sending a share of requests to a dead member (each failing with a
    /// connect error), while a connection to one member fails as a whole and the caller
    /// moves on to the next.
    pub async fn connect(access: &Access, prefix: &str) -> Result<Store> {
        let prefix = normalise_prefix(prefix).map_err(|error| Error::Prefix {
            prefix: prefix.to_owned(),
            error,
        })?;
        // The certificate and password files as they are now (rotated ones included).
        let options = access.options(true)?;
        let endpoints = access.endpoints();
        // Spread over the members: nodes started together do not all pick the first.
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| {
                d.subsec_nanos() as usize / 1000 + std::process::id() as usize
            });
        let mut errors = Vec::new();
        for i in 0..endpoints.len() {
            let endpoint = &endpoints[(start + i) % endpoints.len()];
            let mut user = access.user().map(str::to_owned);
            let mut attempt = Store::connect_one(endpoint, options.clone(), true).await;
            if let Err((why, _)) = &attempt
                && access.user().is_some()
                && why.contains(AUTH_OFF)
            {
                // As etcd's own client does: a user for a cluster whose users are off (before
                // `etcdctl auth enable`, or during an `auth disable`) is no reason to stop.
                tracing::warn!(
                    endpoint = %endpoint,
                    "etcd: users are off on this cluster; connecting without --etcd-user"
                );
                attempt = Store::connect_one(endpoint, access.options(false)?, true).await;
                user = None;
            }
            match attempt {
                Ok(client) => {
                    return Ok(Store {
                        client,
                        prefix,
                        endpoint: endpoint.clone(),
                        user,
                        serializable: false,
                    });
                }
                Err((why, class)) => {
                    errors.push((format!("{endpoint}: {why}"), class));
                }
            }
        }
        Err(Unreachable::of(access, errors))
    }

    /// A connection to one member (that knows a leader, unless not `leader`), or why not and
    /// its [`Class`]: refused (see [`refusal`]), a member without a leader (an election), or
    /// no answer.
    async fn connect_one(
        endpoint: &str,
        options: ConnectOptions,
        leader: bool,
    ) -> std::result::Result<Client, (String, Class)> {
        let work = async {
            let client = Client::connect(endpoint, options).await?;
            let status = client.status().await?;
            Ok::<_, etcd::Error>((client, status.leader))
        };
        match tokio::time::timeout(CONNECT_TIMEOUT * 2, work).await {
            Err(_) => Err(("timed out".to_owned(), Class::Outage)),
            Ok(Err(e)) => Err((e.brief(), Class::of(&e))),
            Ok(Ok((_, 0))) if leader => {
                Err(("the member knows no leader".to_owned(), Class::Election))
            }
            Ok(Ok((client, _))) => Ok(client),
        }
    }

    /// This connection with the current revision and the revisions' documents read from the
    /// member's own store (etcd's serializable reads): they answer while the cluster elects a
    /// leader, when a linearizable read waits for one. What they return may be older than the
    /// cluster's latest; a follower that then watches from the read's header receives the rest.
    pub fn serializable(mut self) -> Store {
        self.serializable = true;
        self
    }

    /// The member this connection talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The prefix keys live under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The client, for watches and leases.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `PREFIX/revision`.
    pub fn current_key(&self) -> String {
        format!("{}/revision", self.prefix)
    }

    fn revision_key(&self, n: u64) -> String {
        format!("{}/revisions/{n:012}", self.prefix)
    }

    /// `PREFIX/nodes/`.
    pub fn nodes_key(&self) -> String {
        format!("{}/nodes/", self.prefix)
    }

    /// The current revision's number, as read now.
    pub async fn current(&mut self) -> Result<Current> {
        let key = self.current_key();
        let resp = self
            .client
            .range(rpc::RangeRequest {
                serializable: self.serializable,
                ..range(&key, false)
            })
            .await
            .map_err(etcd_error("reading the current revision"))?;
        let header = resp.header.as_ref().map_or(0, |h| h.revision);
        let Some(kv) = resp.kvs.first() else {
            return Ok(Current {
                number: 0,
                mod_revision: 0,
                header,
            });
        };
        let text = std::str::from_utf8(&kv.value).unwrap_or_default();
        let number = text.trim().parse().map_err(|_| Error::NotANumber {
            key: key.clone(),
            text: text.to_owned(),
        })?;
        Ok(Current {
            number,
            mod_revision: kv.mod_revision,
            header,
        })
    }

    /// The revision `PREFIX/revision` names as `n` (none for 0: nothing published yet); an
    /// error when that revision is not kept, which a push's transaction never lets happen.
    pub async fn named(&mut self, n: u64) -> Result<Option<Revision>> {
        if n == 0 {
            return Ok(None);
        }
        let key = self.current_key();
        self.revision(n)
            .await?
            .map(Some)
            .ok_or(Error::NotKept { key, n })
    }

    /// Revision `n`'s document, if it is still kept.
    pub async fn revision(&mut self, n: u64) -> Result<Option<Revision>> {
        let key = self.revision_key(n);
        let resp = self
            .client
            .range(rpc::RangeRequest {
                serializable: self.serializable,
                ..range(&key, false)
            })
            .await
            .map_err(etcd_error(format!("reading revision {n}")))?;
        resp.kvs
            .first()
            .map(|kv| {
                serde_json::from_slice(&kv.value).map_err(|error| Error::NotARevision {
                    key: key.clone(),
                    error,
                })
            })
            .transpose()
    }

    /// The numbers of the kept revisions, oldest first.
    pub async fn kept(&mut self) -> Result<Vec<u64>> {
        let from = format!("{}/revisions/", self.prefix);
        let resp = self
            .client
            .range(rpc::RangeRequest {
                keys_only: true,
                serializable: self.serializable,
                ..range(&from, true)
            })
            .await
            .map_err(etcd_error("listing revisions"))?;
        let mut numbers: Vec<u64> = resp
            .kvs
            .iter()
            .filter_map(|kv| {
                std::str::from_utf8(&kv.key)
                    .ok()?
                    .strip_prefix(from.as_str())?
                    .parse()
                    .ok()
            })
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Publishes `draft` (its `revision` is set here) as the revision after `seen`, in one
    /// transaction that fails if another push moved `PREFIX/revision` since `seen` was read;
    /// revisions older than the last `keep` are deleted in the same transaction.
    pub async fn publish(&mut self, seen: Current, draft: Revision, keep: u64) -> Result<Revision> {
        self.publish_beside(seen, draft, keep, Beside::default())
            .await
    }

    /// [`Store::publish`] in a transaction that also holds `beside`'s compares and writes
    /// (a plain push's guard against a ramp stored meanwhile, `--force`'s stopped ramp): the
    /// revision and they are written together or not at all ([`Error::Conflict`]).
    pub(crate) async fn publish_beside(
        &mut self,
        seen: Current,
        mut draft: Revision,
        keep: u64,
        beside: Beside,
    ) -> Result<Revision> {
        let next = seen.number + 1;
        draft.revision = next;
        if let Some(user) = &self.user {
            // `who()` is what the machine says; the etcd user is who etcd let write.
            draft.pushed_by = format!("{} as etcd user {user}", draft.pushed_by);
        }
        let doc = serde_json::to_vec(&draft).map_err(Error::Encode)?;
        let current = self.current_key();
        use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
        use rpc::request_op::Request;
        let guard = if seen.mod_revision == 0 {
            (CompareTarget::Version, TargetUnion::Version(0))
        } else {
            (
                CompareTarget::Mod,
                TargetUnion::ModRevision(seen.mod_revision),
            )
        };
        let guard = rpc::Compare {
            result: CompareResult::Equal.into(),
            target: guard.0.into(),
            key: current.clone().into_bytes(),
            target_union: Some(guard.1),
            ..Default::default()
        };
        let put = |key: String, value: Vec<u8>| rpc::RequestOp {
            request: Some(Request::RequestPut(rpc::PutRequest {
                key: key.into_bytes(),
                value,
                ..Default::default()
            })),
        };
        let mut ops = vec![
            put(self.revision_key(next), doc),
            put(current.clone(), next.to_string().into_bytes()),
        ];
        let keep = keep.max(1);
        if next > keep {
            // [revisions/0, revisions/(next - keep + 1)): everything older than the kept ones.
            ops.push(rpc::RequestOp {
                request: Some(Request::RequestDeleteRange(rpc::DeleteRangeRequest {
                    key: self.revision_key(0).into_bytes(),
                    range_end: self.revision_key(next - keep + 1).into_bytes(),
                    ..Default::default()
                })),
            });
        }
        ops.extend(beside.ops);
        let mut compare = vec![guard];
        compare.extend(beside.compare);
        let txn = rpc::TxnRequest {
            compare,
            success: ops,
            failure: vec![],
        };
        let resp = self
            .client
            .txn(txn)
            .await
            .map_err(etcd_error("publishing the revision"))?;
        if !resp.succeeded {
            return Err(Error::Conflict(seen.number));
        }
        Ok(draft)
    }

    /// Every node's registry entry, by id.
    pub async fn nodes(&mut self) -> Result<Vec<registry::Entry>> {
        let from = self.nodes_key();
        let resp = self
            .client
            .range(rpc::RangeRequest {
                serializable: self.serializable,
                ..range(&from, true)
            })
            .await
            .map_err(etcd_error("reading the node registry"))?;
        let mut entries: Vec<registry::Entry> = resp
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        entries.sort_by(|a, b| (&a.region, &a.id).cmp(&(&b.region, &b.id)));
        Ok(entries)
    }
}

/// What a publish holds beside the revision in its transaction ([`Store::publish_beside`]).
#[derive(Debug, Default)]
pub(crate) struct Beside {
    /// More conditions, all of which must hold.
    pub compare: Vec<rpc::Compare>,
    /// More writes.
    pub ops: Vec<rpc::RequestOp>,
}

/// A read of `key`, or with `prefix` of every key that starts with it (a range ending at the
/// key with its last byte increased, as etcd's clients spell a prefix).
fn range(key: &str, prefix: bool) -> rpc::RangeRequest {
    let key = key.as_bytes().to_vec();
    let range_end = if prefix { prefix_end(&key) } else { Vec::new() };
    rpc::RangeRequest {
        key,
        range_end,
        ..Default::default()
    }
}

/// The end of the range of every key that starts with `key`.
pub fn prefix_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    // The last byte below 0xff, increased, and what follows it dropped; none: every key from
    // `key` on ("\0").
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            break;
        }
    }
    if end.is_empty() {
        end.push(0);
    }
    end
}

/// Whether `e` is a failure of etcd's (a leader election under way, a member gone, a
/// timeout): worth trying again, unlike a refusal of gtd's own or a [`refusal`] of etcd's.
pub fn transient<E: Classified + ?Sized>(e: &E) -> bool {
    e.class().is_some_and(Class::transient)
}

/// Whether `e` is etcd's answer during an election ([`Class::Election`]).
pub fn in_election<E: Classified + ?Sized>(e: &E) -> bool {
    e.class() == Some(Class::Election)
}

/// Whether etcd's answer is one that asking again will not change: credentials or a request
/// it refuses (a wrong password, a permission the user lacks, no user at all), or a
/// certificate that one side of the TLS handshake refuses.
pub fn refusal(e: &etcd::Error) -> bool {
    use tonic::Code;
    let tls = |mut source: Option<&(dyn std::error::Error + 'static)>| {
        while let Some(s) = source {
            // tokio-rustls hands rustls's errors up inside an io::Error of kind InvalidData:
            // ours (a certificate we refuse) as the rustls::Error, the peer's alerts as text.
            let io = s
                .downcast_ref::<std::io::Error>()
                .filter(|io| io.kind() == std::io::ErrorKind::InvalidData);
            let text = io.map(ToString::to_string).unwrap_or_default();
            if s.is::<rustls::Error>()
                || io
                    .and_then(|io| io.get_ref())
                    .is_some_and(|i| i.is::<rustls::Error>())
                || text.starts_with("received fatal alert")
                || text.starts_with("invalid peer certificate")
            {
                return true;
            }
            source = s.source();
        }
        false
    };
    match e {
        etcd::Error::GRpcStatus(status) => match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => true,
            // By message: these codes also carry passing states ("not leader", "revision of
            // auth store is old") that asking again gets past.
            Code::InvalidArgument | Code::FailedPrecondition => {
                AUTH_REFUSALS.iter().any(|m| status.message().contains(m))
            }
            _ => tls(std::error::Error::source(status)),
        },
        etcd::Error::TransportError(t) => tls(std::error::Error::source(t)),
        _ => false,
    }
}

/// etcd's answers (InvalidArgument, FailedPrecondition) that no retry changes.
const AUTH_REFUSALS: [&str; 6] = [
    "authentication failed",
    "user name is empty",
    "user name not found",
    "role is not granted",
    "permission is not granted",
    "permission denied",
];

/// etcd's answer to an authentication while its users are off.
const AUTH_OFF: &str = "authentication is not enabled";

/// No member answered with a leader (each member's reason), or every one refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} ({reasons}){}",
    if *class == Class::Refused { "etcd refused gtd" } else { "no etcd member answered with a leader" },
    hint.map(|h| format!(" -- hint: {h}")).unwrap_or_default()
)]
pub struct Unreachable {
    reasons: String,
    /// Refused when every member refused, an election when one answered without a leader,
    /// else an outage (no member answered).
    class: Class,
    /// What to try, when the reasons say it.
    hint: Option<&'static str>,
}

impl Unreachable {
    /// The error of a connection that no member of `access` gave, from each member's reason
    /// and class. Every member refused gtd: a refusal. One answered without a leader: an
    /// election, which asking again gets past. Else none answered: an outage.
    pub(crate) fn of(access: &Access, errors: Vec<(String, Class)>) -> Error {
        let class = if errors.iter().all(|(_, c)| *c == Class::Refused) {
            Class::Refused
        } else if errors.iter().any(|(_, c)| *c == Class::Election) {
            Class::Election
        } else {
            Class::Outage
        };
        let hint = access.hint(errors.iter().map(|(w, _)| w.as_str()));
        let reasons = errors
            .into_iter()
            .map(|(w, _)| w)
            .collect::<Vec<_>>()
            .join("; ");
        Error::Unreachable(Unreachable {
            reasons,
            class,
            hint,
        })
    }

    /// [`Class::Refused`] when every member refused, [`Class::Election`] when one answered
    /// that it knows no leader, else [`Class::Outage`].
    pub fn class(&self) -> Class {
        self.class
    }
}

/// Runs `work` again while it fails with a [`transient`] error, for up to 15 s, pausing 0.25 s
/// then twice as long each time: a command run during a leader election (a few seconds after
/// a member died) waits for the new leader rather than failing. Every step of `gtd push`
/// before its transaction only reads, and the transaction is guarded by the revision read, so
/// running it all again is safe: after a transaction that did commit but whose answer was
/// lost, the next attempt finds the config already published and says so.
pub async fn retrying<T, E, F, Fut>(mut work: F) -> Result<T, E>
where
    E: Classified,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut pause = Duration::from_millis(250);
    loop {
        match work().await {
            Err(e) if transient(&e) && std::time::Instant::now() < deadline => {
                // The last pause ends at the deadline, for one more attempt there.
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                tokio::time::sleep(pause.min(left)).await;
                pause *= 2;
            }
            result => return result,
        }
    }
}

/// `user@host` for a revision's `pushed_by`.
pub fn who() -> String {
    let uid = rustix::process::getuid().as_raw();
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .or_else(|| user_name(uid))
        .unwrap_or_else(|| format!("uid {uid}"));
    format!("{user}@{}", hostname())
}

/// The name `/etc/passwd` gives `uid` (a service or container often has no `$USER`).
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
    })
}

/// This machine's host name.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A revision to publish from a config validated on this machine.
pub fn draft(config: &Config) -> Result<Revision> {
    // As the config check reads them (one text, its failure at FILE:LINE:COL).
    let read = |path: &Path| config::read(path).map_err(Error::Read);
    let name = |path: &Path| {
        path.file_name().map_or_else(
            || "config.toml".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let catalog_file = config.catalog_file.as_deref().ok_or(Error::NoCatalogFile)?;
    Ok(Revision {
        revision: 0,
        pushed_at_ms: now_ms(),
        pushed_by: who(),
        config_name: name(&config.source),
        config: read(&config.source)?,
        catalog_name: name(catalog_file),
        catalog: read(catalog_file)?,
        rollback_of: None,
        message: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd's answer as the client returns it.
    fn status(s: tonic::Status) -> etcd::Error {
        etcd::Error::GRpcStatus(s)
    }

    #[test]
    fn etcd_answers_are_classified_where_gtd_error_is_built() {
        use tonic::Status;
        let cases = [
            (
                Status::permission_denied("etcdserver: permission denied"),
                Class::Refused,
            ),
            (
                Status::unauthenticated("etcdserver: invalid auth token"),
                Class::Refused,
            ),
            (
                Status::invalid_argument(
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                Class::Refused,
            ),
            (
                Status::failed_precondition("etcdserver: permission denied"),
                Class::Refused,
            ),
            // The same codes with a passing state: asking again gets past it.
            (
                Status::failed_precondition("etcdserver: revision of auth store is old"),
                Class::Outage,
            ),
            (
                Status::unavailable("etcdserver: leader changed"),
                Class::Election,
            ),
            (
                Status::unavailable("etcdserver: no leader"),
                Class::Election,
            ),
            (
                Status::unavailable(
                    "etcdserver: request timed out, possibly due to previous leader failure",
                ),
                Class::Election,
            ),
            (
                Status::unavailable("error trying to connect: Connection refused"),
                Class::Outage,
            ),
            (Status::deadline_exceeded("timeout expired"), Class::Outage),
        ];
        for (answer, class) in cases {
            let message = answer.message().to_owned();
            let e = Error::etcd("reading the current revision", status(answer));
            assert_eq!(e.class(), Some(class), "{message}");
            assert_eq!(transient(&e), class != Class::Refused, "{message}");
            assert_eq!(in_election(&e), class == Class::Election, "{message}");
        }
        assert_eq!(Class::of(&etcd::Error::Closed("the watch")), Class::Outage);
    }

    #[test]
    fn only_etcd_failures_have_a_class() {
        let own = Error::Conflict(7);
        assert_eq!(own.class(), None);
        assert!(!transient(&own) && !in_election(&own));
        let unreachable = |class| {
            Error::Unreachable(Unreachable {
                reasons: "http://127.0.0.1:2379: Connection refused".to_owned(),
                class,
                hint: None,
            })
        };
        assert_eq!(unreachable(Class::Refused).class(), Some(Class::Refused));
        assert_eq!(unreachable(Class::Outage).class(), Some(Class::Outage));
        assert!(
            transient(&unreachable(Class::Outage)) && !in_election(&unreachable(Class::Outage))
        );
        assert!(in_election(&unreachable(Class::Election)));
    }

    #[test]
    fn wrappers_ask_the_store_error_they_wrap() {
        let election = || {
            Error::etcd(
                "reading the current revision",
                status(tonic::Status::unavailable("etcdserver: leader changed")),
            )
        };
        assert!(in_election(&push::Error::Store(election())));
        assert!(in_election(&report::Error::Store(election())));
        assert!(!transient(&push::Error::NothingBefore { running: 3 }));
    }

    #[test]
    fn describe_tells_etcd_in_its_own_words_through_a_wrapper_too() {
        let denied = || {
            Error::etcd(
                "reading the current revision",
                status(tonic::Status::permission_denied(
                    "etcdserver: permission denied",
                )),
            )
        };
        let said = "reading the current revision: etcdserver: permission denied";
        assert_eq!(describe(&denied()), said);
        assert_eq!(describe(&push::Error::Store(denied())), said);
    }
}
