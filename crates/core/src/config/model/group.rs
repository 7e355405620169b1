//! Inside a listener: endpoint groups, their balancing methods and keys, health checks and
//! endpoints (the `[[listener.group]]` tables and what they hold).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::StatusSet;

/// Static rank of a group (1 ranks first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Priority {
    /// The same rank on every node.
    Fixed(u32),
    /// A rank per acceleration region; covers every region of the listener.
    PerRegion(BTreeMap<String, u32>),
}

impl Priority {
    /// The rank on a node of `region`.
    pub fn for_region(&self, region: &str) -> Option<u32> {
        match self {
            Priority::Fixed(p) => Some(*p),
            Priority::PerRegion(m) => m.get(region).copied(),
        }
    }
}

/// One `[[listener.group]]`.
#[derive(Debug, Clone)]
pub struct Group {
    /// Unique within the listener (`[A-Za-z0-9_-]+`).
    pub name: String,
    /// Catalogue region where the endpoints live.
    pub region: String,
    /// Traffic distribution ratio, percent, 0..=100.
    pub ratio: f64,
    /// Static priority, if set (then set on every group of the listener).
    pub priority: Option<Priority>,
    /// Balancing method and its parameters.
    pub balance: Balance,
    /// The group is healthy while at least this many endpoints are usable.
    pub min_healthy: u32,
    /// `capacity` as configured on the group (in the unit of `sim`'s `[demand]`); what the group
    /// carries with some endpoints out is [`Group::capacity_when`].
    pub capacity: Option<f64>,
    /// Active health check, if configured.
    pub health_check: Option<HealthCheck>,
    /// HTTP: prepended to the upstream path.
    pub path_prefix: Option<String>,
    /// HTTP: idle upstream connections kept per endpoint.
    pub keepalive: u32,
    /// HTTP: which requests may take an idle connection another request left.
    pub reuse: Reuse,
    /// TLS towards the endpoints.
    pub tls: Option<UpstreamTls>,
    /// HTTP: outlier detection (on by default); `None` on TCP and UDP listeners.
    pub outlier: Option<Outlier>,
    /// Endpoints in file order.
    pub endpoints: Vec<Endpoint>,
}

/// Which requests of an HTTP group may be sent on an idle keep-alive connection that another
/// request left (docs/design.md §6, Endpoint connections; HAProxy's `http-reuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reuse {
    /// Only a request that may safely be sent again (an idempotent method, a body gtd holds
    /// whole or none) and that is not its client connection's first: a client's first request
    /// always goes on a connection of its own, so bytes an endpoint writes unasked on a
    /// connection it already answered can never reach a client that has yet to be answered
    /// once. HAProxy's default, `http-reuse safe`.
    #[default]
    Safe,
    /// Every request: the fewest endpoint connections (nginx's `keepalive`, HAProxy's
    /// `http-reuse always`).
    Always,
}

impl Reuse {
    /// Its name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Reuse::Safe => "safe",
            Reuse::Always => "always",
        }
    }
}

/// The defaults of a group's keys when unset (docs/design.md §3, 4).
impl Group {
    /// `ratio`, percent.
    pub const DEFAULT_RATIO: f64 = 100.0;
    /// `min_healthy`.
    pub const DEFAULT_MIN_HEALTHY: u32 = 1;
    /// `keepalive` (HTTP).
    pub const DEFAULT_KEEPALIVE: u32 = 32;
}

/// Outlier detection of an HTTP group (docs/design.md §5, [`crate::health::outlier`]): the
/// answers real requests get eject an endpoint its checks still pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outlier {
    /// 5xx answers in a row that eject (0: never).
    pub consecutive_5xx: u32,
    /// Gateway failures (502, 503, 504, no answer) in a row that eject (0: never).
    pub consecutive_gateway_failures: u32,
    /// The first ejection's length; the n-th lasts n times this.
    pub base_ejection_time: Duration,
    /// The longest an ejection lasts.
    pub max_ejection_time: Duration,
    /// At most this percentage of the group's endpoints is ejected at once.
    pub max_ejection_percent: u32,
}

/// The defaults of the outlier keys of a group (docs/design.md §5), Envoy's but for
/// `max_ejection_percent` (Envoy: 10, which never ejects one endpoint of a group under ten).
impl Outlier {
    /// `consecutive_5xx`.
    pub const DEFAULT_CONSECUTIVE_5XX: u32 = 5;
    /// `consecutive_gateway_failures`.
    pub const DEFAULT_CONSECUTIVE_GATEWAY_FAILURES: u32 = 5;
    /// `base_ejection_time`.
    pub const DEFAULT_BASE_EJECTION_TIME: Duration = Duration::from_secs(30);
    /// `max_ejection_time`.
    pub const DEFAULT_MAX_EJECTION_TIME: Duration = Duration::from_secs(300);
    /// `max_ejection_percent`.
    pub const DEFAULT_MAX_EJECTION_PERCENT: u32 = 50;
}

impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            consecutive_5xx: Self::DEFAULT_CONSECUTIVE_5XX,
            consecutive_gateway_failures: Self::DEFAULT_CONSECUTIVE_GATEWAY_FAILURES,
            base_ejection_time: Self::DEFAULT_BASE_EJECTION_TIME,
            max_ejection_time: Self::DEFAULT_MAX_EJECTION_TIME,
            max_ejection_percent: Self::DEFAULT_MAX_EJECTION_PERCENT,
        }
    }
}

/// The usable part of a group, 0..=1: the weight of its usable endpoints over the weight of
/// all, from (weight, usable) per endpoint. What `failover = "graceful"` grades a group by and
/// what planning scales a group's own `capacity` by (docs/design.md §3.3, §8); 0 for a group
/// of no weight.
pub fn usable_fraction(endpoints: impl Iterator<Item = (u32, bool)>) -> f64 {
    let (mut up, mut all) = (0_u64, 0_u64);
    for (weight, usable) in endpoints {
        all += u64::from(weight);
        if usable {
            up += u64::from(weight);
        }
    }
    if all == 0 {
        0.0
    } else {
        up as f64 / all as f64
    }
}

impl Group {
    /// What the group can carry (planning, docs/design.md §8) when only the endpoints
    /// `usable(i)` says are usable serve: the sum of their `capacity` when every endpoint sets
    /// one (at most the group's own `capacity` when that is set too); else the group's own
    /// `capacity` times the usable part of its weight; else unknown.
    pub fn capacity_when(&self, usable: impl Fn(usize) -> bool) -> Option<f64> {
        let up = |i: &usize| usable(*i);
        let each: Option<Vec<f64>> = self.endpoints.iter().map(|e| e.capacity).collect();
        match (each, self.capacity) {
            (Some(each), own) if !each.is_empty() => {
                // fold from +0: an empty f64 sum is -0.
                let sum = (0..each.len()).filter(up).fold(0.0, |acc, i| acc + each[i]);
                Some(own.map_or(sum, |c| c.min(sum)))
            }
            (_, Some(own)) => Some(
                own * usable_fraction(
                    self.endpoints
                        .iter()
                        .enumerate()
                        .map(|(i, e)| (e.weight, up(&i))),
                ),
            ),
            _ => None,
        }
    }

    /// True when the group has a capacity: its own, or one on every endpoint.
    pub fn has_capacity(&self) -> bool {
        self.capacity_when(|_| true).is_some()
    }
}

/// Balancing method of a group, with its parameters (docs/design.md §4).
#[derive(Debug, Clone, PartialEq)]
pub enum Balance {
    /// Smooth weighted rotation.
    RoundRobin,
    /// Hash of a key template.
    Hash {
        /// The key template.
        key: KeyTemplate,
        /// Ketama ring instead of modulo.
        consistent: bool,
    },
    /// nginx `ip_hash` (HTTP only).
    IpHash,
    /// Fewest active per weight.
    LeastConn,
    /// Weighted random; `two` = power of two choices.
    Random {
        /// Pick two, keep the less loaded.
        two: bool,
    },
    /// Probability inversely proportional to the EWMA of response time.
    LeastTime {
        /// What is timed.
        measure: Measure,
        /// Weight the history keeps per sample (0..1).
        factor: f64,
    },
    /// Share proportional to a value reported by each response.
    Feedback {
        /// Response header carrying the value.
        header: String,
        /// Treat the value as load (lower is better).
        inverse: bool,
        /// Weight the history keeps per sample (0..1).
        factor: f64,
    },
}

impl Balance {
    /// `factor` of `least_time` and `feedback` when unset.
    pub const DEFAULT_FACTOR: f64 = 0.9;

    /// The method's name in config files.
    pub fn name(&self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::Hash { .. } => "hash",
            Balance::IpHash => "ip_hash",
            Balance::LeastConn => "least_conn",
            Balance::Random { .. } => "random",
            Balance::LeastTime { .. } => "least_time",
            Balance::Feedback { .. } => "feedback",
        }
    }
}

/// What `least_time` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// HTTP: time to the response headers (default for HTTP).
    Header,
    /// Time to the last byte of the response.
    LastByte,
    /// Streams: time to connect (default for TCP/UDP).
    Connect,
    /// Streams: time to the first byte from the endpoint.
    FirstByte,
}

impl Measure {
    /// What `least_time` measures when `measure` is unset: `Header` on HTTP listeners, else
    /// `Connect`.
    pub fn default_for(http: bool) -> Measure {
        if http {
            Measure::Header
        } else {
            Measure::Connect
        }
    }
}

/// A hash key template: literals and variables concatenated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    /// The template as written.
    pub text: String,
    /// Its parts in order.
    pub parts: Vec<KeyPart>,
}

/// One piece of a key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// Text copied as is.
    Literal(String),
    /// `$remote_addr`: the client address without port.
    RemoteAddr,
    /// `$request_uri`: path and query as received (HTTP).
    RequestUri,
    /// `$http_NAME`: a request header (HTTP); name lower-cased, `_` for `-`.
    Header(String),
    /// `$cookie_NAME`: a request cookie (HTTP).
    Cookie(String),
}

impl KeyPart {
    /// True for parts that only exist in HTTP requests.
    pub fn http_only(&self) -> bool {
        matches!(
            self,
            KeyPart::RequestUri | KeyPart::Header(_) | KeyPart::Cookie(_)
        )
    }
}

/// `[listener.group.health_check]` (docs/design.md §5), defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    /// Check protocol.
    pub protocol: CheckProtocol,
    /// Port to check; the endpoint's when unset.
    pub port: Option<u16>,
    /// Time between checks (>= 1s).
    pub interval: Duration,
    /// Time allowed for the whole check, never above `interval`: `timeout` when the config sets
    /// it (default min(interval, 30s)), else `connect_timeout + read_timeout` (HTTP, and TCP
    /// with `send` or `expect`) or `connect_timeout` (TCP that only connects). A UDP check
    /// waits this long for the reply.
    pub timeout: Duration,
    /// Time to connect (`timeout` when only that is set).
    pub connect_timeout: Duration,
    /// Time to read the answer after connecting (HTTP, and TCP with `send` or `expect`;
    /// `timeout` when only that is set; equal to `connect_timeout` and unused for TCP checks
    /// that only connect).
    pub read_timeout: Duration,
    /// Consecutive passes to become healthy.
    pub healthy_threshold: u32,
    /// Consecutive failures to become unhealthy.
    pub unhealthy_threshold: u32,
    /// HTTP method.
    pub method: CheckMethod,
    /// HTTP path.
    pub path: String,
    /// Host header; the endpoint's host when unset.
    pub host: Option<String>,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Request body.
    pub body: Option<String>,
    /// Statuses that pass.
    pub expect_status: StatusSet,
    /// Headers the answer must carry, with these values.
    pub expect_headers: BTreeMap<String, String>,
    /// Substring the body must contain.
    pub expect_body: Option<String>,
    /// Add `X-Gtd-Healthcheck-Id`.
    pub id_header: bool,
    /// New endpoints get no traffic until they passed `healthy_threshold` checks.
    pub essential: bool,
    /// An HTTP answer marks at once; thresholds apply only to timeouts.
    pub explicit: bool,
    // L4 checks that talk (docs/design.md §5).
    /// TCP: bytes written once connected; UDP: the datagram sent (escapes decoded).
    pub send: Option<Vec<u8>>,
    /// TCP/UDP: bytes the first answer must contain, within `read_timeout` (TCP: empty means
    /// any byte; UDP: any reply when unset).
    pub expect: Option<Vec<u8>>,
}

/// The defaults of a health check's keys when unset (docs/design.md §5; `protocol` and `method`: the
/// `Default` of [`CheckProtocol`] and [`CheckMethod`]).
impl HealthCheck {
    /// `interval`.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
    /// `timeout` is `min(interval, this)` when unset.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// `healthy_threshold`.
    pub const DEFAULT_HEALTHY_THRESHOLD: u32 = 2;
    /// `unhealthy_threshold`.
    pub const DEFAULT_UNHEALTHY_THRESHOLD: u32 = 3;
    /// `path` (HTTP).
    pub const DEFAULT_PATH: &str = "/";
    /// `expect_status` (HTTP): this one status.
    pub const DEFAULT_EXPECT_STATUS: u16 = 200;
    /// Most bytes of a TCP or UDP answer read for `expect`: the substring must be within them.
    pub const MAX_EXPECT_READ: usize = 64 * 1024;

    /// True when the check writes or reads bytes after connecting (HTTP, HTTPS, UDP, or TCP
    /// with `send` or `expect`): it has a read phase, so `read_timeout` applies.
    pub fn talks(&self) -> bool {
        self.protocol != CheckProtocol::Tcp || self.send.is_some() || self.expect.is_some()
    }
}

/// Health check protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckProtocol {
    /// A connect; then `send` written and `expect` awaited when set.
    #[default]
    Tcp,
    /// HTTP request.
    Http,
    /// HTTP request over TLS (the group's `tls` settings).
    Https,
    /// A datagram sent, a reply awaited (UDP listeners).
    Udp,
}

/// HTTP method of a health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckMethod {
    /// GET
    #[default]
    Get,
    /// PUT
    Put,
    /// POST
    Post,
    /// DELETE
    Delete,
}

/// TLS towards endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// Speak TLS to the endpoints.
    pub enabled: bool,
    /// Server name sent; the endpoint's host when unset.
    pub sni: Option<String>,
    /// CA bundle (PEM) to verify the endpoints; when unset, the system bundle (`SSL_CERT_FILE`,
    /// else the distribution's file).
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM) for mTLS.
    pub client_cert: Option<PathBuf>,
    /// Client key (PEM) for mTLS.
    pub client_key: Option<PathBuf>,
    /// Skip verification (testing only).
    pub insecure_skip_verify: bool,
    /// Lowest TLS version accepted.
    pub min_version: TlsVersion,
}

/// The defaults of a group's `tls` keys when unset (`min_version`: the `Default` of
/// [`TlsVersion`]).
impl UpstreamTls {
    /// `enabled`: a `tls` table turns TLS on.
    pub const DEFAULT_ENABLED: bool = true;

    /// An empty `tls` table: TLS on, verified against the system's CA bundle, the endpoint's
    /// host as SNI (what https health checks use for a group without one).
    pub fn defaults() -> UpstreamTls {
        UpstreamTls {
            enabled: Self::DEFAULT_ENABLED,
            sni: None,
            ca: None,
            client_cert: None,
            client_key: None,
            insecure_skip_verify: false,
            min_version: TlsVersion::default(),
        }
    }
}

/// A TLS protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum TlsVersion {
    /// TLS 1.2
    #[default]
    V1_2,
    /// TLS 1.3
    V1_3,
}

/// An endpoint's `host:port` as configured.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    /// The text as written in the config (the endpoint's name for hashing and the admin API).
    pub text: String,
    /// The host part.
    pub host: Host,
    /// The port.
    pub port: u16,
}

impl Address {
    /// What names this one target in metrics, logs and `/status`: the text as written, and
    /// for one address of a resolved name, `NAME:PORT@IP` (a name has as many targets as it
    /// has addresses, all with the same text).
    pub fn id(&self) -> std::borrow::Cow<'_, str> {
        match &self.host {
            Host::Resolved { ip, .. } => format!("{}@{ip}", self.text).into(),
            _ => self.text.as_str().into(),
        }
    }

    /// One address `ip` of this name: the same text (the name's identity for hashing, the
    /// admin API and the Host header), connecting to `ip`.
    pub fn resolved(&self, ip: IpAddr) -> Address {
        let name = match &self.host {
            Host::Name(n) | Host::Resolved { name: n, .. } => n.clone(),
            Host::Ip(_) => return self.clone(),
        };
        Address {
            text: self.text.clone(),
            host: Host::Resolved { name, ip },
            port: self.port,
        }
    }

    /// The IP to connect to: the literal one, or the resolved one; None for a name not
    /// resolved (never connected to).
    pub fn ip(&self) -> Option<IpAddr> {
        match &self.host {
            Host::Ip(ip) | Host::Resolved { ip, .. } => Some(*ip),
            Host::Name(_) => None,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Resolved { ip, .. } => write!(f, "{}@{ip}", self.text),
            _ => f.write_str(&self.text),
        }
    }
}

/// Host part of an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A literal IP address.
    Ip(IpAddr),
    /// A DNS name, resolved (and re-resolved) at run time.
    Name(String),
    /// One address a name resolved to: what the node connects to. Never read from a file; the
    /// node expands each name into one such target per address (`node::dns`).
    Resolved {
        /// The name as configured.
        name: String,
        /// One of its addresses.
        ip: IpAddr,
    },
}

impl Host {
    /// The name (configured or resolved), or the IP as text: what TLS's SNI and a `Host`
    /// header carry.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Host::Ip(ip) => ip.to_string().into(),
            Host::Name(n) | Host::Resolved { name: n, .. } => n.as_str().into(),
        }
    }
}

/// One `[[listener.group.endpoint]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Where it is.
    pub address: Address,
    /// Relative weight (>= 1, default 1).
    pub weight: u32,
    /// Most concurrent connections/requests; unlimited when unset (`max_conns = 0` too).
    pub max_conns: Option<u32>,
    /// Used only when no primary can serve.
    pub backup: bool,
    /// Out of rotation; keeps its place in hash mappings.
    pub down: bool,
    /// No new traffic; existing flows finish.
    pub drain: bool,
    /// Administratively enabled.
    pub enabled: bool,
    /// Ramp weight from near zero to full over this time after recovery.
    pub slow_start: Option<Duration>,
    /// Failed attempts within `fail_timeout` that mark it unavailable; 0 disables.
    pub max_fails: u32,
    /// Window for counting failures and time it stays marked.
    pub fail_timeout: Duration,
    /// What the endpoint can carry, in the unit of `sim`'s `[demand]` (> 0); planning only.
    pub capacity: Option<f64>,
}

/// The defaults of an endpoint's keys when unset (docs/design.md §4, nginx's).
impl Endpoint {
    /// `weight`.
    pub const DEFAULT_WEIGHT: u32 = 1;
    /// `enabled`.
    pub const DEFAULT_ENABLED: bool = true;
    /// `max_fails`.
    pub const DEFAULT_MAX_FAILS: u32 = 1;
    /// `fail_timeout`.
    pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);
}
