//! The test DNS server (`tests/common/dns.rs`) against the real resolver gtd uses
//! (hickory-resolver): addresses and their TTL, a changed record set seen once the TTL ran out,
//! NXDOMAIN and NODATA told apart, a silent server timing out and answering again, TCP.
//!
//! Waits are bounded and generous; no test asserts how long anything took.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::*;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::lookup::Lookup;
use hickory_resolver::lookup_ip::LookupIp;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError, NoRecords};
use hickory_resolver::proto::rr::{Name, RecordType};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A resolver that asks only `server`, over `connections` (UDP, TCP or both, in that order),
/// never reads /etc/hosts, and caches by the answers' TTLs (hickory's default). `attempts` is
/// hickory's: the tries after the first, each of them `timeout` long.
fn resolver_over(
    server: &DnsServer,
    connections: Vec<ConnectionConfig>,
    timeout: Duration,
    attempts: usize,
) -> TokioResolver {
    let connections = connections
        .into_iter()
        .map(|mut c| {
            c.port = server.addr.port();
            c
        })
        .collect();
    let name_server = NameServerConfig::new(server.addr.ip(), true, connections);
    let config = ResolverConfig::from_name_servers(vec![name_server]);
    let mut options = ResolverOpts::default();
    options.timeout = timeout;
    options.attempts = attempts;
    options.use_hosts_file = ResolveHosts::Never;
    TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
        .with_options(options)
        .build()
        .unwrap()
}

/// [`resolver_over`] UDP then TCP, 5 s timeout, one retry.
fn resolver(server: &DnsServer) -> TokioResolver {
    resolver_over(
        server,
        vec![ConnectionConfig::udp(), ConnectionConfig::tcp()],
        Duration::from_secs(5),
        1,
    )
}

fn sorted(lookup: &LookupIp) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = lookup.iter().collect();
    ips.sort();
    ips
}

/// The addresses of an A or AAAA lookup, sorted.
fn addresses(lookup: &Lookup) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = lookup
        .answers()
        .iter()
        .filter_map(|r| r.data.ip_addr())
        .collect();
    ips.sort();
    ips
}

/// Sleeps until `instant` has passed (a cached answer's `valid_until`).
async fn past(instant: Instant) {
    let wait = instant.saturating_duration_since(Instant::now());
    assert!(wait < Duration::from_secs(60), "valid_until {wait:?} away");
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
}

#[tokio::test]
async fn addresses_and_ttl_from_an_authoritative_answer() {
    let dns = DnsServer::start().await;
    let r = resolver(&dns);
    dns.set(
        "two.gtd.test",
        &[ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1")],
        30,
    );

    let lookup = r.lookup_ip("two.gtd.test").await.unwrap();
    assert_eq!(
        sorted(&lookup),
        [ip("192.0.2.1"), ip("192.0.2.2"), ip("2001:db8::1")]
    );
    // `valid_until` is the lookup's instant plus the smallest record TTL (30 s).
    let left = lookup
        .valid_until()
        .saturating_duration_since(Instant::now());
    assert!(
        left <= Duration::from_secs(30) && left > Duration::from_secs(20),
        "{left:?}"
    );
    assert!(lookup.as_lookup().answers().iter().all(|r| r.ttl == 30));
    // An A and an AAAA query reached the server (more if a UDP retransmit beat an answer).
    assert!(dns.queries("two.gtd.test") >= 2);
    // Within the TTL the cache answers: the server may as well be silent.
    dns.silence(true);
    let again = r.lookup_ip("two.gtd.test").await.unwrap();
    assert_eq!(sorted(&again), sorted(&lookup));
    dns.silence(false);

    // The AA bit, and each family on its own.
    let v4 = r.ipv4_lookup("two.gtd.test.").await.unwrap();
    assert!(v4.message().metadata.authoritative);
    assert_eq!(addresses(&v4), [ip("192.0.2.1"), ip("192.0.2.2")]);
    let v6 = r.ipv6_lookup("two.gtd.test.").await.unwrap();
    assert_eq!(addresses(&v6), [ip("2001:db8::1")]);
    // Names are case-insensitive, and the answer's owner name is spelled as asked. (A `&str` goes
    // through IDNA, which lowercases it; `Name::from_ascii` keeps the case.)
    dns.set("Case.GTD.test.", &[ip("192.0.2.3")], 30);
    let asked = Name::from_ascii("cASE.gtd.TEST.").unwrap();
    let lookup = r.lookup_ip(asked).await.unwrap();
    assert_eq!(sorted(&lookup), [ip("192.0.2.3")]);
    assert_eq!(
        lookup.as_lookup().answers()[0].name.to_ascii(),
        "cASE.gtd.TEST."
    );
    assert!(dns.queries("CASE.GTD.TEST.") >= 2);
}

#[tokio::test]
async fn a_changed_set_is_seen_once_the_ttl_ran_out() {
    let dns = DnsServer::start().await;
    let r = resolver(&dns);
    dns.set("moving.gtd.test", &[ip("192.0.2.10")], 1);
    let first = r.lookup_ip("moving.gtd.test").await.unwrap();
    assert_eq!(sorted(&first), [ip("192.0.2.10")]);
    let asked = dns.queries("moving.gtd.test");

    dns.set(
        "moving.gtd.test",
        &[ip("192.0.2.20"), ip("192.0.2.21"), ip("2001:db8::20")],
        1,
    );
    past(first.valid_until()).await;
    let second = r.lookup_ip("moving.gtd.test").await.unwrap();
    assert_eq!(
        sorted(&second),
        [ip("192.0.2.20"), ip("192.0.2.21"), ip("2001:db8::20")]
    );
    assert!(dns.queries("moving.gtd.test") > asked);
}

#[tokio::test]
async fn nxdomain_and_nodata_told_apart() {
    let dns = DnsServer::start().await;
    let r = resolver(&dns);

    // Never set.
    let e = r.lookup_ip("never.gtd.test").await.unwrap_err();
    assert!(is_nxdomain(&e), "{e:?}");
    assert!(!is_nodata(&e) && !is_timeout(&e));

    // Set, then gone.
    dns.set("gone.gtd.test", &[ip("192.0.2.30")], 1);
    let before = r.lookup_ip("gone.gtd.test").await.unwrap();
    dns.nxdomain("gone.gtd.test");
    past(before.valid_until()).await;
    let e = r.lookup_ip("gone.gtd.test").await.unwrap_err();
    assert!(is_nxdomain(&e), "{e:?}");
    // The negative answer is authoritative: it carries the SOA, whose minimum (1 s) is how long
    // the resolver caches it.
    let NetError::Dns(DnsError::NoRecordsFound(NoRecords {
        soa, negative_ttl, ..
    })) = &e
    else {
        panic!("{e:?}")
    };
    assert!(soa.is_some());
    assert_eq!(*negative_ttl, Some(1));

    // IPv4 only: AAAA is NODATA, and `lookup_ip` still returns the A records.
    dns.set("v4only.gtd.test", &[ip("192.0.2.40")], 30);
    let e = r.ipv6_lookup("v4only.gtd.test.").await.unwrap_err();
    assert!(is_nodata(&e), "{e:?}");
    assert!(!is_nxdomain(&e));
    assert_eq!(
        sorted(&r.lookup_ip("v4only.gtd.test").await.unwrap()),
        [ip("192.0.2.40")]
    );
    // Other types of an existing name are NODATA too.
    let e = r
        .lookup("v4only.gtd.test.", RecordType::MX)
        .await
        .unwrap_err();
    assert!(is_nodata(&e), "{e:?}");

    // A name with no address at all: `lookup_ip` fails NODATA, not NXDOMAIN.
    dns.set("empty.gtd.test", &[], 30);
    let e = r.lookup_ip("empty.gtd.test").await.unwrap_err();
    assert!(is_nodata(&e), "{e:?}");
}

#[tokio::test]
async fn a_silent_server_times_out_then_answers_again() {
    let dns = DnsServer::start().await;
    // One attempt of 1 s: hickory's `attempts` counts the tries after the first, so 0.
    let r = resolver_over(
        &dns,
        vec![ConnectionConfig::udp(), ConnectionConfig::tcp()],
        Duration::from_secs(1),
        0,
    );
    dns.set("quiet.gtd.test", &[ip("192.0.2.50")], 30);
    dns.silence(true);

    let e = tokio::time::timeout(Duration::from_secs(30), r.lookup_ip("quiet.gtd.test"))
        .await
        .expect("the resolver gives up on its own")
        .unwrap_err();
    assert!(is_timeout(&e), "{e:?}");
    assert!(!is_nxdomain(&e) && !is_nodata(&e));
    // The queries came (A and AAAA, each sent up to 3 times over UDP within the timeout); none
    // was answered.
    let asked = dns.queries("quiet.gtd.test");
    assert!(asked >= 2, "{asked}");

    // A timeout is not cached: the next lookup asks again and gets the answer.
    dns.silence(false);
    let lookup = tokio::time::timeout(Duration::from_secs(30), r.lookup_ip("quiet.gtd.test"))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(sorted(&lookup), [ip("192.0.2.50")]);
    assert!(dns.queries("quiet.gtd.test") > asked);
}

#[tokio::test]
async fn tcp_only() {
    let dns = DnsServer::start().await;
    let r = resolver_over(
        &dns,
        vec![ConnectionConfig::tcp()],
        Duration::from_secs(5),
        1,
    );
    dns.set("tcp.gtd.test", &[ip("192.0.2.60"), ip("2001:db8::60")], 30);
    let lookup = r.lookup_ip("tcp.gtd.test").await.unwrap();
    assert_eq!(sorted(&lookup), [ip("192.0.2.60"), ip("2001:db8::60")]);
    let e = r.lookup_ip("nothing.gtd.test").await.unwrap_err();
    assert!(is_nxdomain(&e), "{e:?}");
}

#[tokio::test]
async fn drop_stops_the_server() {
    let dns = DnsServer::start().await;
    let addr = dns.addr;
    drop(dns);
    // The TCP listener is gone (its task aborted): connecting is refused, soon.
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still listening on {addr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
