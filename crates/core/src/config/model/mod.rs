//! The typed, validated configuration: what the rest of gtd reads.
//!
//! Every value here has passed validation (`validate/`): ratios are in range, names are unique,
//! regions exist in the catalogue, methods only carry parameters they support. Code downstream
//! never re-checks these facts.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::ConfigError;
use crate::regions::Catalog;

mod group;
pub use group::*;

/// The catalogue path used when a config has no `catalog = ...`, relative to the config's
/// directory.
pub const DEFAULT_CATALOG: &str = "regions/catalog.toml";

/// Most groups a listener can hold (the group rotation keeps one state bit per group in an
/// atomic word).
pub const MAX_GROUPS: usize = 32;

/// Longest listener or group name, in characters: names are metric labels, log fields and
/// `/status` keys, where a longer one helps nobody.
pub const MAX_NAME: usize = 64;

/// A whole `config.toml`, validated, with the region catalogue it refers to.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file this was read from.
    pub source: PathBuf,
    /// The region catalogue (from `catalog = ...` or `--regions`).
    pub catalog: Catalog,
    /// The file the catalogue was read from (`None` when it was given in memory: a fleet
    /// revision carries its catalogue's text).
    pub catalog_file: Option<PathBuf>,
    /// `[node]`.
    pub node: Node,
    /// `[admin]`.
    pub admin: Admin,
    /// `[dns]`.
    pub dns: Dns,
    /// `[geoip]`: the client-location database, read and opened (`None` without the table).
    pub geoip: Option<GeoIp>,
    /// `[log]`.
    pub log: Log,
    /// `[[listener]]`, in file order.
    pub listeners: Vec<Listener>,
    /// Things in the file that are valid but have no effect (a key of another protocol, as
    /// HAProxy warns about a keyword of another mode), sorted by position; the node logs them
    /// and `gtd check` prints them.
    pub warnings: Vec<ConfigError>,
}

/// `[node]`: settings of the process itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// Bind outbound sockets (to endpoints, health checks) to this address.
    pub source_ip: Option<IpAddr>,
}

/// `[dns]`: how endpoint host names are resolved (docs/design.md §6, DNS).
#[derive(Debug, Clone, PartialEq)]
pub struct Dns {
    /// Name servers to ask; empty: the system's (`/etc/resolv.conf`).
    pub nameservers: Vec<SocketAddr>,
    /// How long one query may take; unset: the system's (resolv.conf `timeout`, else 5 s).
    pub timeout: Option<Duration>,
    /// Queries per lookup, the first included; unset: the system's (resolv.conf
    /// `attempts`, else 2).
    pub attempts: Option<u32>,
    /// Shortest time an answer is kept before the name is asked again (a lower TTL is raised
    /// to it); also the first wait after a failed lookup.
    pub min_ttl: Duration,
    /// Longest time an answer is kept (a higher TTL is lowered to it).
    pub max_ttl: Duration,
}

impl Dns {
    /// `min_ttl`.
    pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(1);
    /// `max_ttl`.
    pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(300);
}

impl Default for Dns {
    fn default() -> Self {
        Dns {
            nameservers: Vec::new(),
            timeout: None,
            attempts: None,
            min_ttl: Self::DEFAULT_MIN_TTL,
            max_ttl: Self::DEFAULT_MAX_TTL,
        }
    }
}

/// `[geoip]`: where clients are (docs/design.md §3.1, §7).
#[derive(Debug, Clone)]
pub struct GeoIp {
    /// The database file, resolved against the config's directory.
    pub database: PathBuf,
    /// Countries that get a label of their own (ISO codes, upper case); the rest are `other`.
    pub countries: Vec<String>,
    /// The database, read whole when the config was loaded (a reload reads it again).
    pub db: std::sync::Arc<crate::geoip::Database>,
}

/// `priority_by`: what orders a listener's groups (docs/design.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PriorityBy {
    /// The node's own ranking: static priority, else measured/catalogue RTT from the node.
    #[default]
    Node,
    /// Great-circle distance from the client's location in the `[geoip]` database to each
    /// group's region; the node's ranking for clients the database does not locate.
    ClientLocation,
}

/// `[admin]`: the status/metrics/control server.
#[derive(Debug, Clone, PartialEq)]
pub struct Admin {
    /// Where the admin server listens (default 127.0.0.1:9100).
    pub bind: SocketAddr,
    /// Bearer token required for mutating calls, when set.
    pub token: Option<String>,
    /// `allow_without_token`: serve a bind reachable beyond this host without a token (the
    /// operator's explicit choice; refused otherwise).
    pub open: bool,
    /// `hosts`: names the server answers to in `Host` besides its address and `localhost`
    /// (lower-case, without a port).
    pub hosts: Vec<String>,
}

impl Admin {
    /// Whether the admin server on `bind` would let anyone who reaches it reload the config or
    /// toggle endpoints: reachable beyond loopback, no token, and not explicitly allowed.
    pub fn exposed(&self, bind: SocketAddr) -> bool {
        !bind.ip().is_loopback() && self.token.is_none() && !self.open
    }
}

impl Default for Admin {
    fn default() -> Self {
        Admin {
            bind: SocketAddr::from(([127, 0, 0, 1], 9100)),
            token: None,
            open: false,
            hosts: Vec::new(),
        }
    }
}

/// `[log]`: the node's own logs besides the tracing lines on stderr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    /// `access`: the access log, HTTP requests, TCP connections and UDP flows (docs/logs.md).
    pub access: AccessLog,
}

/// Where the access log goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AccessLog {
    /// `"off"` (the default): no access log, and no cost on a request beyond a branch.
    #[default]
    Off,
    /// `"stderr"`, beside the node's other log lines.
    Stderr,
    /// `"stdout"`.
    Stdout,
    /// A file, opened in append mode at start and again at every reload (for logrotate).
    File(AccessFile),
}

/// An access log file and where the config names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessFile {
    /// The file, resolved against the config file's directory.
    pub path: PathBuf,
    /// The config file that names it.
    pub config: PathBuf,
    /// 1-based line of the `access` value.
    pub line: usize,
    /// 1-based column of the `access` value, in characters.
    pub column: usize,
}

impl AccessFile {
    /// An error about the file, at the `access` key that names it (as `gtd check` reports
    /// one): `config.toml:3:10: log: access log file "/var/log/gtd": MESSAGE`.
    pub fn error(&self, message: impl fmt::Display) -> ConfigError {
        ConfigError {
            file: self.config.clone(),
            line: self.line,
            column: self.column,
            path: "log".to_owned(),
            message: format!(
                "access log file {:?} {message}",
                self.path.display().to_string()
            ),
        }
    }
}

/// Listener protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Plain TCP streams.
    Tcp,
    /// UDP datagrams, grouped into flows per client address.
    Udp,
    /// HTTP/1.1 and HTTP/2 (cleartext).
    Http,
    /// HTTP over TLS terminated by gtd.
    Https,
}

impl Protocol {
    /// The name used in config files and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Http => "http",
            Protocol::Https => "https",
        }
    }

    /// True for HTTP and HTTPS.
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Https)
    }

    /// `idle_timeout` when unset: TCP streams 300s, UDP flows 30s, HTTP keep-alive 60s.
    pub fn default_idle_timeout(self) -> Duration {
        Duration::from_secs(match self {
            Protocol::Tcp => 300,
            Protocol::Udp => 30,
            Protocol::Http | Protocol::Https => 60,
        })
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens when the highest-priority group with ratio > 0 is unhealthy (docs/design.md §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailoverMode {
    /// All traffic to the highest-priority healthy group; ratios ignored (the source's rule).
    #[default]
    NextPriority,
    /// Drop unhealthy groups and run the cascade over the rest.
    Recompute,
    /// A partly healthy group keeps `min(1, overprovisioning × healthy fraction)` of what
    /// reaches it and passes the rest down the priority order (docs/design.md §3.3).
    Graceful,
}

impl FailoverMode {
    /// The name used in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverMode::NextPriority => "next-priority",
            FailoverMode::Recompute => "recompute",
            FailoverMode::Graceful => "graceful",
        }
    }
}

/// How a client is mapped to a group (docs/design.md §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Affinity {
    /// Smooth weighted rotation over the shares.
    #[default]
    None,
    /// Weighted rendezvous hash of the client address.
    SourceIp,
}

/// One `[[listener]]`.
#[derive(Debug, Clone)]
pub struct Listener {
    /// Unique name (`[A-Za-z0-9_-]+`).
    pub name: String,
    /// Protocol served.
    pub protocol: Protocol,
    /// Port on the node's bind address.
    pub port: u16,
    /// Acceleration regions whose nodes serve this listener (all in the catalogue).
    pub regions: Vec<String>,
    /// Failover rule.
    pub failover: FailoverMode,
    /// `failover = "graceful"`: how much more than its share a whole group can carry (>= 1).
    pub overprovisioning: f64,
    /// `sim` with demand: utilisation above this percent of a capacity is flagged (0 < h <= 100).
    pub headroom: f64,
    /// When every group is down, route as if all were healthy.
    pub fail_open: bool,
    /// Group choice per decision.
    pub affinity: Affinity,
    /// `priority_by`: the node's ranking, or the client's location.
    pub priority_by: PriorityBy,
    /// Time allowed to connect to an endpoint.
    pub connect_timeout: Duration,
    /// Idle timeout (TCP default 300s, UDP flows 30s, HTTP keep-alive).
    pub idle_timeout: Duration,
    /// How long SIGTERM waits for connections to finish.
    pub drain_timeout: Duration,
    /// Concurrent connections accepted.
    pub max_connections: u32,
    /// Connections the kernel may queue before gtd accepts them (TCP, HTTP, HTTPS; the kernel
    /// caps it at `net.core.somaxconn`).
    pub backlog: u32,
    /// PROXY protocol header towards endpoints (TCP).
    pub proxy_protocol: Option<ProxyProtocol>,
    /// HTTP: time to read the request headers.
    pub header_timeout: Duration,
    /// HTTP: time to the upstream response headers.
    pub upstream_timeout: Duration,
    /// Retry a failed attempt elsewhere.
    pub retry: bool,
    /// Attempts in total, first included (>= 1).
    pub tries: u32,
    /// Time budget for all attempts of one request/connection.
    pub retry_timeout: Duration,
    /// Retry non-idempotent HTTP requests after their bytes were sent.
    pub retry_non_idempotent: bool,
    /// HTTP statuses counted as failures.
    pub unhealthy_status: StatusSet,
    /// HTTP sticky cookie.
    pub sticky: Option<Sticky>,
    /// UDP: most flows kept at once.
    pub udp_max_flows: usize,
    /// HTTPS: certificates, chosen by SNI.
    pub tls: Option<ServerTls>,
    /// HTTP/HTTPS custom forwarding rules, in file order.
    pub routes: Vec<Route>,
    /// Endpoint groups, in file order (the tie-break order of priority).
    pub groups: Vec<Group>,
    // Ranking by measured RTT (docs/design.md §3.1) and the first byte of TCP endpoints (§5).
    /// What a probe's RTT sample measures.
    pub rtt_from: RttFrom,
    /// How much faster than the group ranked above a group must measure to pass it.
    pub rank_margin: RankMargin,
    /// How long a new order must be the one the RTTs call for before the node adopts it.
    pub rank_dwell: Duration,
    /// TCP: time allowed for an endpoint's first byte after connecting; `None`: no limit.
    pub first_byte_timeout: Option<Duration>,
    /// How long a group that turns healthy again takes to get its whole share back, linearly
    /// (docs/design.md §3.3); zero (the default): at once.
    pub failback_ramp: Duration,
}

/// What a health check's (or light probe's) RTT sample measures (`rtt_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RttFrom {
    /// The TCP connect: the network's round trip, not the endpoint's work (UDP checks: the
    /// reply, there is no connect).
    #[default]
    Connect,
    /// The whole check, to the answer (HTTP: the response head; TCP with `expect`: the
    /// expected bytes): includes the endpoint's own processing time.
    Check,
}

impl RttFrom {
    /// The name in config files and `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            RttFrom::Connect => "connect",
            RttFrom::Check => "check",
        }
    }
}

/// `rank_margin`: a group passes the one ranked above it only when faster by more than
/// max(`floor_ms`, `fraction` × that one's RTT).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankMargin {
    /// Fixed part, ms (>= 0).
    pub floor_ms: f64,
    /// Part relative to the incumbent's RTT (0..1).
    pub fraction: f64,
}

impl RankMargin {
    /// The margin before `rank_margin` was a setting: max(5 ms, 20 %).
    pub const DEFAULT: RankMargin = RankMargin {
        floor_ms: 5.0,
        fraction: 0.2,
    };

    /// The margin, ms, a challenger must beat an incumbent of `incumbent_ms` by.
    pub fn ms(&self, incumbent_ms: f64) -> f64 {
        (incumbent_ms * self.fraction).max(self.floor_ms)
    }
}

impl Default for RankMargin {
    fn default() -> RankMargin {
        RankMargin::DEFAULT
    }
}

/// The defaults of a listener's keys when unset (docs/design.md §2; `idle_timeout`:
/// [`Protocol::default_idle_timeout`]).
impl Listener {
    /// `connect_timeout`.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// `drain_timeout`.
    pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
    /// `max_connections`.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 100_000;
    /// `backlog`: the kernel's own cap on current Linux (`net.core.somaxconn`), where std's
    /// listeners ask for 128.
    pub const DEFAULT_BACKLOG: u32 = 4096;
    /// `header_timeout` (HTTP).
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// `upstream_timeout` (HTTP).
    pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(60);
    /// `retry`.
    pub const DEFAULT_RETRY: bool = true;
    /// `tries`.
    pub const DEFAULT_TRIES: u32 = 3;
    /// `retry_timeout`.
    pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(10);
    /// `udp_max_flows` (UDP).
    pub const DEFAULT_UDP_MAX_FLOWS: usize = 65_536;
    /// `overprovisioning` (`failover = "graceful"`): Envoy's default overprovisioning factor.
    pub const DEFAULT_OVERPROVISIONING: f64 = 1.4;
    /// `headroom`, percent of capacity.
    pub const DEFAULT_HEADROOM: f64 = 80.0;
    /// `rank_dwell`: long enough that ±50 ms of jitter on groups 5 ms apart moves the top rank
    /// at most twice in 10 minutes (docs/design.md §3.1).
    pub const DEFAULT_RANK_DWELL: Duration = Duration::from_secs(120);
    /// `failback_ramp`: zero, the share returns at once.
    pub const DEFAULT_FAILBACK_RAMP: Duration = Duration::ZERO;
    /// The longest `failback_ramp`: a group kept from most of its share for longer than an
    /// hour after it recovered is a config mistake, not caution.
    pub const MAX_FAILBACK_RAMP: Duration = Duration::from_secs(3600);
}

/// PROXY protocol version sent to endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// The binary v2 header.
    V2,
}

/// A set of HTTP status codes given as codes and ranges (`[200, "300-399"]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusSet(pub Vec<RangeInclusive<u16>>);

impl StatusSet {
    /// True when `code` is in the set.
    pub fn contains(&self, code: u16) -> bool {
        self.0.iter().any(|r| r.contains(&code))
    }

    /// True when the set has no codes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `sticky = { cookie = "NAME" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sticky {
    /// Cookie name.
    pub cookie: String,
}

/// Server-side TLS of an HTTPS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// Certificate chains and keys; SNI picks among them, the first is the default.
    pub certs: Vec<CertPair>,
}

/// A PEM certificate chain and its private key (paths resolved against the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPair {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
}

/// One `[[listener.route]]` custom forwarding rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Host pattern (exact, or with `*` / `?`).
    pub host: Option<String>,
    /// Path prefixes; empty means any path.
    pub path_prefix: Vec<String>,
    /// Optional header that must be present with this value.
    pub header: Option<HeaderMatch>,
    /// Names of the listener's groups the cascade runs over.
    pub groups: Vec<String>,
}

/// `header = { name, value }` of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderMatch {
    /// Header name (case-insensitive).
    pub name: String,
    /// Exact value.
    pub value: String,
}
