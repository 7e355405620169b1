//! One check of one endpoint, as I/O (docs/design.md §5): a TCP connect (with `send` written
//! and `expect` awaited when set), a UDP datagram and its reply, or an HTTP/HTTPS request
//! judged by its status, headers and body. Each returns an [`Outcome`]: the result the verdict
//! machine takes, the label `gtd_health_checks_total` counts it under, a reason for the log and
//! `/status`, and the round trip the listener's `rtt_from` asks for (`connect`: the TCP
//! connect; `check`: to the answer; a UDP check: to the reply either way).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use crate::{connect, tls};
use gtd_core::config::{
    Address, CheckMethod, CheckProtocol, Group, HealthCheck, RttFrom, StatusSet,
};

/// Most of an answer's body read for `expect_body`; the substring must be within it.
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// The interval of the light probe (a TCP connect) that measures the RTT of a group without
/// health checks.
pub(crate) const LIGHT_INTERVAL: Duration = Duration::from_secs(10);

pub(crate) use crate::watch::CheckResult as Result;

/// One check's outcome.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    /// How it ended.
    pub(crate) result: Result,
    /// Why, in a few words ("connection refused", "status 503, expected 200").
    pub(crate) reason: String,
    /// Round trip, when the endpoint answered (TCP: connected), as `rtt_from` asks; only a
    /// passed check's is an RTT sample.
    pub(crate) rtt: Option<Duration>,
}

impl Outcome {
    fn failed(result: Result, reason: impl Into<String>) -> Outcome {
        Outcome {
            result,
            reason: reason.into(),
            rtt: None,
        }
    }
}

/// Why a group's check cannot be prepared (the config check refuses most of these first).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecError {
    /// The TLS config of an `https` check.
    #[error("health_check (https): {0}")]
    Tls(tls::TlsError),
    /// A `path` that is no request target.
    #[error("health_check path {path:?}: {error}")]
    Path {
        path: String,
        error: http::uri::InvalidUri,
    },
    /// A header name of `headers` or `expect_headers` (`key`).
    #[error("health_check {key} {name:?}: {error}")]
    HeaderName {
        key: &'static str,
        name: String,
        error: http::header::InvalidHeaderName,
    },
    /// A header value of `headers`.
    #[error("health_check header {name:?}: {error}")]
    HeaderValue {
        name: String,
        error: http::header::InvalidHeaderValue,
    },
}

/// A group's check, prepared once per config version: what to send, how to judge the answer.
pub(crate) struct Spec {
    /// The check's settings (the light probe's for a group without `health_check`).
    pub(crate) interval: Duration,
    timeout: Duration,
    connect_timeout: Duration,
    read_timeout: Duration,
    port: Option<u16>,
    http: Option<HttpSpec>,
    /// TCP and UDP checks: what to write and what the answer must contain.
    talk: Talk,
    /// A UDP check (a datagram and its reply) rather than a TCP connect.
    udp: bool,
    /// What the RTT sample measures.
    rtt_from: RttFrom,
    /// The group's `health_check`, or `None` for a light probe (RTT only, no verdict).
    pub(crate) check: Option<HealthCheck>,
}

/// The exchange of a tcp or udp check: bytes to write, bytes the answer must contain.
#[derive(Default)]
struct Talk {
    send: Option<Vec<u8>>,
    expect: Option<Vec<u8>>,
}

struct HttpSpec {
    tls: Option<(TlsConnector, Option<String>)>,
    method: http::Method,
    path: http::uri::PathAndQuery,
    host: Option<String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    expect_status: StatusSet,
    expect_headers: Vec<(HeaderName, String)>,
    expect_body: Option<String>,
    /// `id_header`: `LISTENER/REGION/NODE_UUID/`, the time goes after it.
    id: Option<String>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spec")
            .field("interval", &self.interval)
            .field("check", &self.check)
            .finish_non_exhaustive()
    }
}

/// This process's id in `X-Gtd-Healthcheck-Id`: random per start, in UUID form.
fn node_uuid() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut b = [0_u8; 16];
        if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
            // No entropy source: the clock still tells processes apart.
            let t = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            b = (t ^ u128::from(std::process::id()) << 64).to_le_bytes();
        }
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let mut s = String::with_capacity(36);
        for (i, byte) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                s.push('-');
            }
            let _ = write!(s, "{byte:02x}");
        }
        s
    })
}

impl Spec {
    /// The check of `group` (of `listener`, on a node in `region`), or its light probe when it
    /// has no `health_check` and the listener speaks TCP; `None` for a UDP group without
    /// checks (no TCP port to measure). Fails when the group's TLS files cannot be used.
    pub(crate) fn of(
        listener: &str,
        udp: bool,
        group: &Group,
        region: &str,
        light_timeout: Duration,
        rtt_from: RttFrom,
    ) -> std::result::Result<Option<Spec>, SpecError> {
        let Some(c) = &group.health_check else {
            if udp {
                return Ok(None);
            }
            let timeout = light_timeout.min(LIGHT_INTERVAL);
            return Ok(Some(Spec {
                interval: LIGHT_INTERVAL,
                timeout,
                connect_timeout: timeout,
                read_timeout: timeout,
                port: None,
                http: None,
                talk: Talk::default(),
                udp: false,
                rtt_from: RttFrom::Connect,
                check: None,
            }));
        };
        let http = match c.protocol {
            CheckProtocol::Tcp | CheckProtocol::Udp => None,
            CheckProtocol::Http | CheckProtocol::Https => {
                let tls = if c.protocol == CheckProtocol::Https {
                    let t = group
                        .tls
                        .clone()
                        .unwrap_or_else(gtd_core::config::UpstreamTls::defaults);
                    let config = tls::client_config(&t).map_err(SpecError::Tls)?;
                    Some((TlsConnector::from(config), t.sni.clone()))
                } else {
                    None
                };
                let method = match c.method {
                    CheckMethod::Get => http::Method::GET,
                    CheckMethod::Put => http::Method::PUT,
                    CheckMethod::Post => http::Method::POST,
                    CheckMethod::Delete => http::Method::DELETE,
                };
                let path = http::uri::PathAndQuery::try_from(c.path.as_str()).map_err(|error| {
                    SpecError::Path {
                        path: c.path.clone(),
                        error,
                    }
                })?;
                let headers = c
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        Ok((
                            HeaderName::try_from(k.as_str()).map_err(|error| {
                                SpecError::HeaderName {
                                    key: "header",
                                    name: k.clone(),
                                    error,
                                }
                            })?,
                            HeaderValue::try_from(v.as_str()).map_err(|error| {
                                SpecError::HeaderValue {
                                    name: k.clone(),
                                    error,
                                }
                            })?,
                        ))
                    })
                    .collect::<std::result::Result<Vec<_>, SpecError>>()?;
                let expect_headers = c
                    .expect_headers
                    .iter()
                    .map(|(k, v)| {
                        Ok((
                            HeaderName::try_from(k.as_str()).map_err(|error| {
                                SpecError::HeaderName {
                                    key: "expect_headers",
                                    name: k.clone(),
                                    error,
                                }
                            })?,
                            v.clone(),
                        ))
                    })
                    .collect::<std::result::Result<Vec<_>, SpecError>>()?;
                Some(HttpSpec {
                    tls,
                    method,
                    path,
                    host: c.host.clone(),
                    headers,
                    body: c.body.clone().map(Bytes::from).unwrap_or_default(),
                    expect_status: c.expect_status.clone(),
                    expect_headers,
                    expect_body: c.expect_body.clone(),
                    id: c
                        .id_header
                        .then(|| format!("{listener}/{region}/{}/", node_uuid())),
                })
            }
        };
        Ok(Some(Spec {
            interval: c.interval,
            timeout: c.timeout,
            connect_timeout: c.connect_timeout,
            read_timeout: c.read_timeout,
            port: c.port,
            http,
            talk: Talk {
                send: c.send.clone(),
                expect: c.expect.clone(),
            },
            udp: c.protocol == CheckProtocol::Udp,
            rtt_from,
            check: Some(c.clone()),
        }))
    }

    /// Checks `endpoint` once, from `source` when set; never longer than the check's timeout
    /// (connecting within `connect_timeout`, the answer within `read_timeout`, both within
    /// `timeout`).
    pub(crate) async fn run(&self, endpoint: &Address, source: Option<IpAddr>) -> Outcome {
        let target = match self.port {
            Some(port) => Address {
                text: authority(endpoint, port),
                host: endpoint.host.clone(),
                port,
            },
            None => endpoint.clone(),
        };
        self.attempt(&target, source).await
    }

    async fn attempt(&self, target: &Address, source: Option<IpAddr>) -> Outcome {
        if self.udp {
            return self.datagram(target, source).await;
        }
        // Each phase within its own limit, and the whole within `timeout`.
        let start = Instant::now();
        let connect_limit = self.connect_timeout.min(self.timeout);
        let mut stream = match connect::connect(target, source, connect_limit).await {
            Ok(s) => s,
            Err(e) => return connect_failed(&e, connect_limit),
        };
        let connected = start.elapsed();
        let read_limit = self
            .read_timeout
            .min(self.timeout.saturating_sub(connected));
        let Some(h) = &self.http else {
            if self.talk.send.is_none() && self.talk.expect.is_none() {
                return Outcome {
                    result: Result::Passed,
                    reason: "connected".into(),
                    rtt: Some(connected),
                };
            }
            let mut got = Vec::new();
            let talked =
                tokio::time::timeout(read_limit, self.talk.over(&mut stream, start, &mut got))
                    .await;
            let mut outcome = talked.unwrap_or_else(|_| self.talk.timed_out(read_limit, &got));
            if self.rtt_from == RttFrom::Connect && outcome.rtt.is_some() {
                outcome.rtt = Some(connected);
            }
            return outcome;
        };
        let _ = stream.set_nodelay(true);
        let exchange = async {
            match &h.tls {
                Some((connector, sni)) => {
                    let host = target.host.name();
                    let name = match tls::server_name(sni.as_deref(), &host) {
                        Ok(n) => n,
                        Err(e) => return Outcome::failed(Result::Error, format!("TLS: {e}")),
                    };
                    match connector.connect(name, stream).await {
                        Ok(s) => h.exchange(s, target, start).await,
                        Err(e) => Outcome::failed(Result::Error, format!("TLS handshake: {e}")),
                    }
                }
                None => h.exchange(stream, target, start).await,
            }
        };
        match tokio::time::timeout(read_limit, exchange).await {
            Ok(mut outcome) => {
                if self.rtt_from == RttFrom::Connect && outcome.rtt.is_some() {
                    outcome.rtt = Some(connected);
                }
                outcome
            }
            Err(_) => Outcome::failed(
                Result::Timeout,
                format!("connected, but no answer within {}", secs(read_limit)),
            ),
        }
    }

    /// A UDP check: `send` as one datagram from a connected socket, then the first reply within
    /// `timeout`, which must contain `expect` when set. An ICMP "port unreachable" is a refusal.
    async fn datagram(&self, target: &Address, source: Option<IpAddr>) -> Outcome {
        let start = Instant::now();
        let socket = match connect::connect_udp(target, source).await {
            Ok(s) => s,
            Err(e) if connect::exhausted(&e) => return skipped(&e),
            Err(e) => return Outcome::failed(Result::Error, format!("UDP socket: {e}")),
        };
        let payload = self.talk.send.as_deref().unwrap_or_default();
        let exchange = async {
            socket.send(payload).await?;
            let mut buf = vec![0_u8; HealthCheck::MAX_EXPECT_READ];
            let n = socket.recv(&mut buf).await?;
            buf.truncate(n);
            Ok::<_, std::io::Error>(buf)
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Outcome::failed(
                Result::Timeout,
                format!("no reply within {}", secs(self.timeout)),
            ),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                Outcome::failed(Result::Refused, "port unreachable")
            }
            Ok(Err(e)) => Outcome::failed(Result::Error, format!("UDP: {e}")),
            Ok(Ok(reply)) => match &self.talk.expect {
                Some(want) if !contains(&reply, want) => Outcome::failed(
                    Result::Unexpected,
                    format!("a reply of {} bytes without {}", reply.len(), shown(want)),
                ),
                _ => Outcome {
                    result: Result::Passed,
                    reason: format!("a reply of {} bytes", reply.len()),
                    rtt: Some(start.elapsed()),
                },
            },
        }
    }
}

impl Talk {
    /// Writes `send`, then reads (into `got`) until the answer contains `expect` (any byte when
    /// it is empty), the endpoint closes, or [`HealthCheck::MAX_EXPECT_READ`] bytes came; the
    /// caller bounds it with the read timeout.
    async fn over(
        &self,
        stream: &mut tokio::net::TcpStream,
        start: Instant,
        got: &mut Vec<u8>,
    ) -> Outcome {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        if let Some(send) = &self.send
            && let Err(e) = stream.write_all(send).await
        {
            return io_failed(&e, "writing");
        }
        let Some(want) = &self.expect else {
            return Outcome {
                result: Result::Passed,
                reason: format!(
                    "connected, sent {} bytes",
                    self.send.as_ref().map_or(0, Vec::len)
                ),
                rtt: Some(start.elapsed()),
            };
        };
        let mut buf = [0_u8; 4096];
        loop {
            let n = match stream.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => return io_failed(&e, "reading"),
            };
            if n == 0 {
                return Outcome::failed(
                    if got.is_empty() {
                        Result::Refused
                    } else {
                        Result::Unexpected
                    },
                    format!("closed after {} bytes without {}", got.len(), shown(want)),
                );
            }
            let keep = n.min(HealthCheck::MAX_EXPECT_READ - got.len());
            got.extend_from_slice(&buf[..keep]);
            if contains(got, want) && !got.is_empty() {
                return Outcome {
                    result: Result::Passed,
                    reason: format!("answered {}", shown(want)),
                    rtt: Some(start.elapsed()),
                };
            }
            if got.len() >= HealthCheck::MAX_EXPECT_READ {
                return Outcome::failed(
                    Result::Unexpected,
                    format!("{} bytes without {}", got.len(), shown(want)),
                );
            }
        }
    }

    /// The read timeout passed during [`Talk::over`], after `got`: an answer without `expect`
    /// is a wrong one; no answer at all, a timeout.
    fn timed_out(&self, limit: Duration, got: &[u8]) -> Outcome {
        if let Some(want) = &self.expect
            && !got.is_empty()
        {
            return Outcome::failed(
                Result::Unexpected,
                format!(
                    "{} bytes without {} within {}",
                    got.len(),
                    shown(want),
                    secs(limit)
                ),
            );
        }
        let what = match &self.expect {
            Some(want) if !want.is_empty() => format!("no {} within {}", shown(want), secs(limit)),
            Some(_) => format!("connected, but no answer within {}", secs(limit)),
            None => format!("connected, but could not send within {}", secs(limit)),
        };
        Outcome::failed(Result::Timeout, what)
    }
}

/// Expected bytes for a reason: as text when they are, else escaped.
fn shown(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "an answer".to_owned();
    }
    format!("{:?}", String::from_utf8_lossy(bytes))
}

fn io_failed(e: &std::io::Error, doing: &str) -> Outcome {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted => {
            Outcome::failed(Result::Refused, format!("connection reset while {doing}"))
        }
        _ => Outcome::failed(Result::Error, format!("{doing}: {e}")),
    }
}

impl HttpSpec {
    async fn exchange<S>(&self, io: S, target: &Address, start: Instant) -> Outcome
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await
        {
            Ok(pair) => pair,
            Err(e) => return Outcome::failed(Result::Error, format!("HTTP: {e}")),
        };
        let request = match self.request(target) {
            Ok(r) => r,
            Err(e) => return Outcome::failed(Result::Error, format!("building the request: {e}")),
        };
        let exchange = async {
            let response = sender.send_request(request).await?;
            let rtt = start.elapsed();
            let (parts, body) = response.into_parts();
            let body = if self.expect_body.is_some() {
                let mut limited = http_body_util::Limited::new(body, MAX_BODY);
                let mut bytes = Vec::new();
                // Up to MAX_BODY: a longer body is judged by its beginning.
                loop {
                    match limited.frame().await {
                        Some(Ok(frame)) => {
                            if let Ok(data) = frame.into_data() {
                                bytes.extend_from_slice(&data);
                            }
                        }
                        Some(Err(e)) if e.is::<http_body_util::LengthLimitError>() => break,
                        Some(Err(e)) => return Err(Failure::Body(e.to_string())),
                        None => break,
                    }
                }
                bytes
            } else {
                Vec::new()
            };
            Ok::<_, Failure>((parts, body, rtt))
        };
        tokio::pin!(exchange);
        tokio::pin!(conn);
        let answered = tokio::select! {
            biased;
            r = &mut exchange => r,
            c = &mut conn => match c {
                // The endpoint closed after its answer: it is in the exchange's buffers.
                Ok(()) => exchange.await,
                Err(e) => Err(Failure::Http(e)),
            },
        };
        match answered {
            Ok((parts, body, rtt)) => {
                let mut outcome = self.judge(&parts, &body);
                outcome.rtt = Some(rtt);
                outcome
            }
            Err(Failure::Http(e)) => {
                let reason = format!("HTTP: {e}");
                let refused = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<std::io::Error>())
                    .is_some_and(|io| {
                        matches!(
                            io.kind(),
                            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                        )
                    });
                let result = if refused || e.is_incomplete_message() {
                    Result::Refused
                } else {
                    Result::Error
                };
                Outcome::failed(result, reason)
            }
            Err(Failure::Body(e)) => Outcome::failed(Result::Error, format!("reading body: {e}")),
        }
    }

    fn request(
        &self,
        target: &Address,
    ) -> std::result::Result<http::Request<Full<Bytes>>, http::Error> {
        let mut b = http::Request::builder()
            .method(self.method.clone())
            .uri(self.path.clone());
        let host = self.host.as_deref().unwrap_or(&target.text);
        b = b
            .header(http::header::HOST, host)
            .header(
                http::header::USER_AGENT,
                concat!("gtd-health/", env!("CARGO_PKG_VERSION")),
            )
            .header(http::header::CONNECTION, "close");
        for (k, v) in &self.headers {
            b = b.header(k, v);
        }
        if let Some(prefix) = &self.id {
            let ms = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            b = b.header("x-gtd-healthcheck-id", format!("{prefix}{ms}"));
        }
        b.body(Full::new(self.body.clone()))
    }

    /// Judges an answer: the status, then each expected header, then the body.
    fn judge(&self, parts: &http::response::Parts, body: &[u8]) -> Outcome {
        let status = parts.status.as_u16();
        if !self.expect_status.contains(status) {
            return Outcome::failed(
                Result::Unexpected,
                format!(
                    "status {status}, expected {}",
                    describe(&self.expect_status)
                ),
            );
        }
        for (name, want) in &self.expect_headers {
            match parts.headers.get(name) {
                None => {
                    return Outcome::failed(Result::Unexpected, format!("no {name} header"));
                }
                Some(v) if v.as_bytes() != want.as_bytes() => {
                    return Outcome::failed(
                        Result::Unexpected,
                        format!(
                            "{name}: {:?}, expected {want:?}",
                            String::from_utf8_lossy(v.as_bytes())
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        if let Some(want) = &self.expect_body
            && !contains(body, want.as_bytes())
        {
            return Outcome::failed(
                Result::Unexpected,
                format!("status {status}, but the body does not contain {want:?}"),
            );
        }
        Outcome {
            result: Result::Passed,
            reason: format!("status {status}"),
            rtt: None,
        }
    }
}

enum Failure {
    Http(hyper::Error),
    Body(String),
}

impl From<hyper::Error> for Failure {
    fn from(e: hyper::Error) -> Failure {
        Failure::Http(e)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// `200`, `200-299, 301`: the statuses a check expects, for its failure reason.
fn describe(set: &StatusSet) -> String {
    set.0
        .iter()
        .map(|r| {
            if r.start() == r.end() {
                r.start().to_string()
            } else {
                format!("{}-{}", r.start(), r.end())
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn secs(d: Duration) -> String {
    gtd_core::config::format_duration(d)
}

/// `host:port` for a check on another port than the endpoint's.
fn authority(a: &Address, port: u16) -> String {
    match &a.host {
        gtd_core::config::Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        gtd_core::config::Host::Ip(ip) => format!("{ip}:{port}"),
        gtd_core::config::Host::Name(n) | gtd_core::config::Host::Resolved { name: n, .. } => {
            format!("{n}:{port}")
        }
    }
}

fn connect_failed(e: &std::io::Error, timeout: Duration) -> Outcome {
    use std::io::ErrorKind;
    if connect::exhausted(e) {
        return skipped(e);
    }
    match e.kind() {
        ErrorKind::TimedOut => Outcome::failed(
            Result::Timeout,
            format!("no connection within {}", secs(timeout)),
        ),
        ErrorKind::ConnectionRefused => Outcome::failed(Result::Refused, "connection refused"),
        ErrorKind::ConnectionReset => Outcome::failed(Result::Refused, "connection reset"),
        _ => Outcome::failed(Result::Error, format!("connecting: {e}")),
    }
}

/// A check this node could not run (out of open files, memory or local ports): no verdict.
fn skipped(e: &std::io::Error) -> Outcome {
    Outcome::failed(Result::Skipped, format!("not run, this node is short: {e}"))
}

/// Shared handle on a prepared check.
pub(crate) type Shared = Arc<Spec>;
