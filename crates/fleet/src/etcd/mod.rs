//! gtd's client of etcd's v3 gRPC API: the calls the fleet makes (ranges, puts, transactions,
//! leases and their keep-alive, one watch, a member's status, a user's token), over tonic on
//! one member's channel.
//!
//! The message types and stubs in `generated/` come from `proto/etcd/` (a subset of etcd's own
//! `.proto` files) and are checked in, so that building gtd needs no protobuf compiler;
//! `tests/etcd_proto.rs` regenerates them with protox and fails when they differ
//! (docs/operations.md, "The etcd client").
//!
//! With a user, the client authenticates when it connects and puts the token on every call
//! but `Authenticate`; a call that meets an expired token (etcd's simple tokens expire after
//! 5 minutes by default) gets a new one and is made once more, so a node's session outlives
//! its tokens.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// The code generated from `proto/etcd/`: etcd's packages under their own names, so that
/// the generated cross-references (`super::mvccpb`) hold.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    /// etcd's stored pair and watch event (`mvccpb`).
    pub mod mvccpb {
        include!("generated/mvccpb.rs");
    }
    /// etcd's requests, responses and service stubs (`etcdserverpb`).
    pub mod etcdserverpb {
        include!("generated/etcdserverpb.rs");
    }
}

use pb::etcdserverpb as rpc;
use rpc::auth_client::AuthClient;
use rpc::kv_client::KvClient;
use rpc::lease_client::LeaseClient;
use rpc::maintenance_client::MaintenanceClient;
use rpc::watch_client::WatchClient;

use gtd_core::sync::{lock, read, write};

/// Why a call to etcd failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd (or the gRPC layer on its way) answered with a status.
    #[error("grpc request error: {0}")]
    GRpcStatus(tonic::Status),
    /// The channel could not be set up (a malformed address, a TLS setting tonic refuses).
    #[error("transport error: {0}")]
    TransportError(tonic::transport::Error),
    /// A stream the client needs ended on the client's side.
    #[error("{0}")]
    Closed(&'static str),
}

impl Error {
    /// The error in a few words: the gRPC status's message, or for a transport failure its
    /// innermost cause ("Connection refused"), not tonic's nested debug output.
    pub fn brief(&self) -> String {
        // This error names no source: start from the status's or transport's.
        let (mut words, mut source) = match self {
            Error::GRpcStatus(status) => (
                status.message().to_owned(),
                std::error::Error::source(status),
            ),
            Error::TransportError(t) => (t.to_string(), std::error::Error::source(t)),
            other => (other.to_string(), None),
        };
        while let Some(s) = source {
            words = s.to_string();
            source = s.source();
        }
        words
    }

    /// etcd's "no leader": the member is up but knows no leader (an election, or it is cut off
    /// from the others). A stream opened with `hasleader` is ended with it.
    pub fn is_leaderless(&self) -> bool {
        matches!(self, Error::GRpcStatus(s) if s.message().contains("no leader"))
    }

    /// An answer etcd gives while it elects a leader ("no leader", "leader changed", "request
    /// timed out, possibly due to previous leader failure"): asking again once a leader is
    /// elected gets past it.
    pub fn is_election(&self) -> bool {
        const ELECTION: [&str; 3] = ["no leader", "leader changed", "previous leader failure"];
        matches!(self, Error::GRpcStatus(s) if ELECTION.iter().any(|m| s.message().contains(m)))
    }

    /// etcd's "required revision has been compacted": a watch or compaction asked for history
    /// that a compaction removed.
    pub fn is_compacted(&self) -> bool {
        matches!(self, Error::GRpcStatus(s) if s.message().contains("compacted"))
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Error {
        Error::GRpcStatus(s)
    }
}

impl From<tonic::transport::Error> for Error {
    fn from(e: tonic::transport::Error) -> Error {
        Error::TransportError(e)
    }
}

/// The result of a call to etcd.
pub type Result<T> = std::result::Result<T, Error>;

/// How to reach one member. Its `Debug` leaves the password out.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    connect_timeout: Option<Duration>,
    timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
    require_leader: bool,
    tls: Option<ClientTlsConfig>,
    user: Option<(String, String)>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("keep_alive", &self.keep_alive)
            .field("require_leader", &self.require_leader)
            .field("tls", &self.tls.is_some())
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .finish()
    }
}

impl ConnectOptions {
    /// No timeouts, plaintext, no user.
    pub fn new() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// Bound of setting up the connection.
    pub fn with_connect_timeout(mut self, t: Duration) -> ConnectOptions {
        self.connect_timeout = Some(t);
        self
    }

    /// Bound of each call until its answer (or a stream's first headers) arrives.
    pub fn with_timeout(mut self, t: Duration) -> ConnectOptions {
        self.timeout = Some(t);
        self
    }

    /// HTTP/2 pings every `interval`, idle or not; the connection is dropped when one is not
    /// answered within `timeout` (so a member that vanished without a FIN is noticed).
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> ConnectOptions {
        self.keep_alive = Some((interval, timeout));
        self
    }

    /// Asks etcd to refuse calls while the member has no leader (its `hasleader` metadata),
    /// rather than let a watch or a keep-alive hang on a member cut off from the others.
    pub fn with_require_leader(mut self, on: bool) -> ConnectOptions {
        self.require_leader = on;
        self
    }

    /// TLS with these settings (for `https://` members).
    pub fn with_tls(mut self, tls: ClientTlsConfig) -> ConnectOptions {
        self.tls = Some(tls);
        self
    }

    /// Authenticates as `name`.
    pub fn with_user(mut self, name: String, password: String) -> ConnectOptions {
        self.user = Some((name, password));
        self
    }
}

/// What every call but `Authenticate` carries: the user's token, and `hasleader`.
#[derive(Clone)]
struct Stamp {
    token: Arc<RwLock<Option<MetadataValue<Ascii>>>>,
    require_leader: bool,
}

impl tonic::service::Interceptor for Stamp {
    fn call(&mut self, mut request: tonic::Request<()>) -> tonic::Result<tonic::Request<()>> {
        if let Some(token) = read(&self.token).as_ref() {
            request.metadata_mut().insert("token", token.clone());
        }
        if self.require_leader {
            request
                .metadata_mut()
                .insert("hasleader", MetadataValue::from_static("true"));
        }
        Ok(request)
    }
}

type Service = InterceptedService<Channel, Stamp>;

/// A client of one etcd member (cheap to clone: the channel is shared).
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    stamp: Stamp,
    user: Option<Arc<(String, String)>>,
    /// One token renewal at a time: calls that meet an expired token together renew it once.
    renewing: Arc<tokio::sync::Mutex<()>>,
}

/// etcd's answer to a token it no longer knows (expired, or the member restarted).
fn expired(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::Unauthenticated && s.message().contains("invalid auth token")
}

impl Client {
    /// A client of the member at `url` (`http://` or `https://`). The connection is made by
    /// the first call; with a user, that call is `Authenticate`, made here.
    pub async fn connect(url: &str, options: ConnectOptions) -> Result<Client> {
        let mut endpoint = Endpoint::from_shared(url.to_owned())?;
        if url.starts_with("https://") {
            endpoint = endpoint.tls_config(options.tls.clone().unwrap_or_default())?;
        }
        if let Some((interval, timeout)) = options.keep_alive {
            endpoint = endpoint
                .keep_alive_while_idle(true)
                .http2_keep_alive_interval(interval)
                .keep_alive_timeout(timeout);
        }
        if let Some(t) = options.timeout {
            endpoint = endpoint.timeout(t);
        }
        if let Some(t) = options.connect_timeout {
            endpoint = endpoint.connect_timeout(t);
        }
        let client = Client {
            channel: endpoint.connect_lazy(),
            stamp: Stamp {
                token: Arc::default(),
                require_leader: options.require_leader,
            },
            user: options.user.map(Arc::new),
            renewing: Arc::default(),
        };
        if client.user.is_some() {
            client.authenticate().await?;
        }
        Ok(client)
    }

    /// Asks for a token for the user and keeps it for the calls that follow.
    async fn authenticate(&self) -> Result<()> {
        let Some(user) = &self.user else {
            return Ok(());
        };
        let (name, password) = (user.0.clone(), user.1.clone());
        let answer = AuthClient::new(self.channel.clone())
            .authenticate(rpc::AuthenticateRequest { name, password })
            .await?
            .into_inner();
        let token = answer
            .token
            .parse()
            .map_err(|_| tonic::Status::internal("etcd sent a token that is not ASCII"))?;
        *write(&self.stamp.token) = Some(token);
        Ok(())
    }

    fn service(&self) -> Service {
        InterceptedService::new(self.channel.clone(), self.stamp.clone())
    }

    /// Makes `call`, and once more with a new token when etcd says the token expired.
    async fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(Service) -> Fut,
        Fut: Future<Output = tonic::Result<tonic::Response<T>>>,
    {
        match call(self.service()).await {
            Err(s) if self.user.is_some() && expired(&s) => {
                let stale = read(&self.stamp.token).clone();
                {
                    let _one = self.renewing.lock().await;
                    // Renewed by another call while this one waited: use that token.
                    if *read(&self.stamp.token) == stale {
                        self.authenticate().await?;
                    }
                }
                Ok(call(self.service()).await?.into_inner())
            }
            answer => Ok(answer?.into_inner()),
        }
    }

    /// The member's status (its leader, raft term, database size).
    pub async fn status(&self) -> Result<rpc::StatusResponse> {
        self.call(|s| async move {
            MaintenanceClient::new(s)
                .status(rpc::StatusRequest {})
                .await
        })
        .await
    }

    /// A range read.
    pub async fn range(&self, request: rpc::RangeRequest) -> Result<rpc::RangeResponse> {
        self.call(|s| {
            let r = request.clone();
            async move { KvClient::new(s).range(r).await }
        })
        .await
    }

    /// A put.
    pub async fn put(&self, request: rpc::PutRequest) -> Result<rpc::PutResponse> {
        self.call(|s| {
            let r = request.clone();
            async move { KvClient::new(s).put(r).await }
        })
        .await
    }

    /// A delete of a key or range.
    pub async fn delete_range(
        &self,
        request: rpc::DeleteRangeRequest,
    ) -> Result<rpc::DeleteRangeResponse> {
        self.call(|s| {
            let r = request.clone();
            async move { KvClient::new(s).delete_range(r).await }
        })
        .await
    }

    /// A transaction.
    pub async fn txn(&self, request: rpc::TxnRequest) -> Result<rpc::TxnResponse> {
        self.call(|s| {
            let r = request.clone();
            async move { KvClient::new(s).txn(r).await }
        })
        .await
    }

    /// Drops the history before store revision `revision` (keys' values as of then stay).
    pub async fn compact(&self, revision: i64) -> Result<rpc::CompactionResponse> {
        let request = rpc::CompactionRequest {
            revision,
            physical: false,
        };
        self.call(|s| async move { KvClient::new(s).compact(request).await })
            .await
    }

    /// A lease of `ttl` seconds (etcd chooses its id).
    pub async fn lease_grant(&self, ttl: i64) -> Result<rpc::LeaseGrantResponse> {
        let request = rpc::LeaseGrantRequest { ttl, id: 0 };
        self.call(|s| async move { LeaseClient::new(s).lease_grant(request).await })
            .await
    }

    /// Ends lease `id` now, and with it every key attached to it.
    pub async fn lease_revoke(&self, id: i64) -> Result<rpc::LeaseRevokeResponse> {
        let request = rpc::LeaseRevokeRequest { id };
        self.call(|s| async move { LeaseClient::new(s).lease_revoke(request).await })
            .await
    }

    /// A keep-alive stream for lease `id`: [`LeaseKeeper::keep_alive`] renews it, and each
    /// renewal's answer (its new TTL, 0 once it is gone) arrives on the stream.
    pub async fn lease_keep_alive(
        &self,
        id: i64,
    ) -> Result<(LeaseKeeper, Answers<rpc::LeaseKeepAliveResponse>)> {
        let first = rpc::LeaseKeepAliveRequest { id };
        let (requests, answers) = self
            .open(first, |s, outgoing| async move {
                LeaseClient::new(s).lease_keep_alive(outgoing).await
            })
            .await?;
        Ok((LeaseKeeper { id, requests }, answers))
    }

    /// Watches `key` from store revision `start` (0: from now).
    pub async fn watch(&self, key: &str, start: i64) -> Result<Answers<rpc::WatchResponse>> {
        self.watch_with(rpc::WatchCreateRequest {
            key: key.as_bytes().to_vec(),
            start_revision: start,
            ..Default::default()
        })
        .await
    }

    /// Watches the keys from `key` to `range_end` (excluded; empty: `key` alone) from store
    /// revision `start` (0: from now).
    pub async fn watch_range(
        &self,
        key: &str,
        range_end: Vec<u8>,
        start: i64,
    ) -> Result<Answers<rpc::WatchResponse>> {
        self.watch_with(rpc::WatchCreateRequest {
            key: key.as_bytes().to_vec(),
            range_end,
            start_revision: start,
            ..Default::default()
        })
        .await
    }

    /// A watch as `create` asks (a range of keys, the previous values, filters).
    pub async fn watch_with(
        &self,
        create: rpc::WatchCreateRequest,
    ) -> Result<Answers<rpc::WatchResponse>> {
        let create = rpc::WatchRequest {
            request_union: Some(rpc::watch_request::RequestUnion::CreateRequest(create)),
        };
        let (requests, mut answers) = self
            .open(create, |s, outgoing| async move {
                WatchClient::new(s).watch(outgoing).await
            })
            .await?;
        // The sender lives as long as the stream: etcd ends a watch whose client stops sending.
        answers.requests = Some(Box::new(requests));
        Ok(answers)
    }

    /// Opens a bidirectional stream whose first request is `first` (etcd sends the stream's
    /// headers with its first answer, so the call completes only once a request went out);
    /// what is sent on the returned sender follows it.
    async fn open<Q, A, F, Fut>(&self, first: Q, call: F) -> Result<(mpsc::Sender<Q>, Answers<A>)>
    where
        Q: Clone + Send + 'static,
        F: Fn(Service, tokio_stream::wrappers::ReceiverStream<Q>) -> Fut,
        Fut: Future<Output = tonic::Result<tonic::Response<tonic::Streaming<A>>>>,
    {
        let senders = std::sync::Mutex::new(None);
        let inner = self
            .call(|s| {
                let (tx, rx) = mpsc::channel(4);
                tx.try_send(first.clone())
                    .expect("a new channel has room for one request");
                *lock(&senders) = Some(tx);
                call(s, tokio_stream::wrappers::ReceiverStream::new(rx))
            })
            .await?;
        let tx = senders
            .into_inner()
            .expect("stream sender")
            .expect("the call ran");
        Ok((
            tx,
            Answers {
                inner,
                requests: None,
            },
        ))
    }
}

/// Renews one lease over its keep-alive stream.
pub struct LeaseKeeper {
    id: i64,
    requests: mpsc::Sender<rpc::LeaseKeepAliveRequest>,
}

impl LeaseKeeper {
    /// Sends one renewal; its answer arrives on the lease's [`Answers`].
    pub async fn keep_alive(&mut self) -> Result<()> {
        self.requests
            .send(rpc::LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| Error::Closed("the lease keep-alive stream closed"))
    }
}

/// The answers etcd sends on a stream (a watch's events, a lease's renewals).
pub struct Answers<A> {
    inner: tonic::Streaming<A>,
    /// For a watch: the request side, kept open while the watch lives.
    requests: Option<Box<dyn std::any::Any + Send>>,
}

impl<A> Answers<A> {
    /// The next answer; `None` when etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<A>> {
        Ok(self.inner.message().await?)
    }
}
