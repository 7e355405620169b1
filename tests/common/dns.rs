//! An authoritative DNS server on 127.0.0.1 (UDP and TCP on one port) that a test starts, changes
//! while it runs and stops by dropping it: names with A/AAAA records, names that stop existing
//! (NXDOMAIN), and a server that goes silent.
//!
//! A custom `RequestHandler` over a `Mutex<HashMap>` rather than hickory-server's in-memory zone
//! store: the store wants a zone origin, a serial and a `Catalog` in front (which refuses names
//! outside its zones), and replacing a name's records from a test means an async write lock on
//! the zone handler; here `set` is one synchronous map insert, and "silent" and the per-name
//! query counters have nowhere to live in a zone store anyway.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_server::Server;
use hickory_server::net::NetError;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Edns, Header, HeaderCounts, Metadata, ResponseCode};
use hickory_server::proto::rr::rdata::SOA;
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use gtd::sync::lock;

/// TTL and minimum of the SOA sent with every negative answer (NXDOMAIN, NODATA). hickory-resolver
/// caches a negative answer for min(SOA TTL, SOA minimum) (RFC 2308 §5); without an SOA it caches
/// it for `negative_min_ttl` (default 0). One second: negative caching that follows the RFC but
/// never holds a test up.
pub(crate) const NEGATIVE_TTL: u32 = 1;

/// A DNS server on loopback; dropping it stops it.
pub(crate) struct DnsServer {
    /// UDP and TCP, both on this 127.0.0.1 port.
    pub(crate) addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    server: Server<Handler>,
}

impl DnsServer {
    /// A server on a free 127.0.0.1 port, UDP and TCP; it knows no names yet.
    pub(crate) async fn start() -> DnsServer {
        let (udp, tcp) = bind_udp_and_tcp().await;
        let addr = udp.local_addr().unwrap();
        let zone = Arc::new(Mutex::new(Zone::default()));
        let mut server = Server::new(Handler { zone: zone.clone() });
        server.register_socket(udp);
        // A TCP connection that sends no query for 10 s is closed; 32 responses may queue on it.
        server.register_listener(tcp, Duration::from_secs(10), 32);
        DnsServer { addr, zone, server }
    }

    /// `name`'s records become `ips` (A for the IPv4 ones, AAAA for the IPv6 ones), with `ttl`.
    /// An empty `ips` leaves the name existing with no address (NODATA for A and AAAA).
    pub(crate) fn set(&self, name: &str, ips: &[IpAddr], ttl: u32) {
        lock(&self.zone).names.insert(
            key(name),
            Entry {
                ips: ips.to_vec(),
                ttl,
            },
        );
    }

    /// `name` no longer exists: every query for it is answered NXDOMAIN.
    pub(crate) fn nxdomain(&self, name: &str) {
        lock(&self.zone).names.remove(&key(name));
    }

    /// While on, every query is dropped unanswered (still counted by [`DnsServer::queries`]).
    pub(crate) fn silence(&self, on: bool) {
        lock(&self.zone).silent = on;
    }

    /// How many queries for `name` (any type, UDP or TCP, answered or not) have come so far.
    pub(crate) fn queries(&self, name: &str) -> u64 {
        let zone = lock(&self.zone);
        zone.queries.get(&key(name)).copied().unwrap_or(0)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        // The listeners stop at the token; dropping `server` (its `JoinSet`) then aborts whatever
        // is still running, in-flight queries and open TCP connections included.
        self.server.shutdown_token().cancel();
    }
}

/// Whether a failed lookup is NXDOMAIN: the name does not exist.
pub(crate) fn is_nxdomain(e: &NetError) -> bool {
    e.is_nx_domain()
}

/// Whether a failed lookup is NODATA: the name exists, with no record of the type asked for (an
/// `lookup_ip` fails so only when neither A nor AAAA exist).
pub(crate) fn is_nodata(e: &NetError) -> bool {
    e.is_no_records_found() && !e.is_nx_domain()
}

/// Whether a failed lookup is a timeout: no answer came (every attempt).
pub(crate) fn is_timeout(e: &NetError) -> bool {
    matches!(e, NetError::Timeout)
}

/// Binds UDP on a free 127.0.0.1 port, then TCP on the same port (tried again with another port
/// if something holds that one on TCP). Never a port in 9001–9300, which other tests use.
async fn bind_udp_and_tcp() -> (tokio::net::UdpSocket, tokio::net::TcpListener) {
    for _ in 0..100 {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        if (9001..=9300).contains(&addr.port()) {
            continue;
        }
        if let Ok(tcp) = tokio::net::TcpListener::bind(addr).await {
            return (udp, tcp);
        }
    }
    panic!("no 127.0.0.1 port free on both UDP and TCP");
}

/// A name as the map keys it: ASCII lower case, no trailing dot.
fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

#[derive(Default)]
struct Zone {
    names: HashMap<String, Entry>,
    queries: HashMap<String, u64>,
    silent: bool,
}

struct Entry {
    ips: Vec<IpAddr>,
    ttl: u32,
}

/// What one query gets.
enum Reply {
    /// Nothing (the server is silent).
    Drop,
    /// NXDOMAIN, with the SOA.
    NxDomain,
    /// NOERROR with these answers; none is NODATA, with the SOA.
    Answers(Vec<Record>),
}

struct Handler {
    zone: Arc<Mutex<Zone>>,
}

impl Handler {
    /// Looks the query up (and counts it) under the lock; nothing is awaited while it is held.
    fn reply(&self, name: &Name, query_type: RecordType) -> Reply {
        let mut zone = lock(&self.zone);
        let key = key(&name.to_ascii());
        *zone.queries.entry(key.clone()).or_default() += 1;
        if zone.silent {
            return Reply::Drop;
        }
        let Some(entry) = zone.names.get(&key) else {
            return Reply::NxDomain;
        };
        let answers = entry
            .ips
            .iter()
            .filter_map(|ip| {
                let data = match (ip, query_type) {
                    (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => RData::A((*v4).into()),
                    (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => {
                        RData::AAAA((*v6).into())
                    }
                    _ => return None,
                };
                // The owner name as the query spelled it (0x20 case randomization checks it).
                Some(Record::from_rdata(name.clone(), entry.ttl, data))
            })
            .collect();
        Reply::Answers(answers)
    }
}

/// The server claims the root zone, so that it is authoritative for whatever name a test sets;
/// its SOA goes in the authority section of negative answers.
fn soa() -> Record {
    let soa = SOA::new(
        Name::from_ascii("ns.gtd.test.").unwrap(),
        Name::from_ascii("hostmaster.gtd.test.").unwrap(),
        1,
        3600,
        600,
        86_400,
        NEGATIVE_TTL,
    );
    Record::from_rdata(Name::root(), NEGATIVE_TTL, RData::SOA(soa))
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        // Answer with EDNS if asked with it (the resolver's default), so that UDP answers may
        // exceed 512 bytes.
        let edns = request.edns.as_ref().map(|asked| {
            let mut edns = Edns::new();
            edns.set_max_payload(asked.max_payload().max(512));
            edns
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(edns) = &edns {
            builder.edns(edns);
        }

        let reply = match request.request_info() {
            Ok(info) => self.reply(info.query.original().name(), info.query.query_type()),
            // Not exactly one question.
            Err(_) => {
                let response = builder.error_msg(&request.metadata, ResponseCode::FormErr);
                return send(&mut response_handle, response, metadata).await;
            }
        };
        let soa = soa();
        let (answers, negative) = match reply {
            Reply::Drop => return info(metadata),
            Reply::NxDomain => {
                metadata.response_code = ResponseCode::NXDomain;
                (Vec::new(), true)
            }
            Reply::Answers(answers) => {
                let negative = answers.is_empty();
                (answers, negative)
            }
        };
        metadata.authoritative = true;
        let response = builder.build(
            metadata,
            answers.iter(),
            std::iter::empty(),
            negative.then_some(&soa),
            std::iter::empty(),
        );
        send(&mut response_handle, response, metadata).await
    }
}

async fn send<'a, R: ResponseHandler>(
    handle: &mut R,
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    metadata: Metadata,
) -> ResponseInfo {
    match handle.send_response(response).await {
        Ok(sent) => sent,
        Err(_) => info(metadata),
    }
}

/// The `ResponseInfo` of a response that was not sent.
fn info(metadata: Metadata) -> ResponseInfo {
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}
