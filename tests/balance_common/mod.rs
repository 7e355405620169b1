//! Builders shared by the `balance_*` integration tests: config values constructed directly
//! (the loader is not involved), a fixed base instant, requests.
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use gtd::balance::StaticRequest;
use gtd::config::{Address, Balance, Endpoint, Group, Host, KeyPart, KeyTemplate};

/// An endpoint `127.0.0.1:port` with the defaults of docs/design.md §4 (`Endpoint::DEFAULT_*`) and the
/// weight given.
pub fn ep(port: u16, weight: u32) -> Endpoint {
    named(&format!("127.0.0.1:{port}"), weight)
}

/// An endpoint whose address text is `text` (`host:port`).
pub fn named(text: &str, weight: u32) -> Endpoint {
    let (host, port) = text.rsplit_once(':').expect("host:port");
    let port: u16 = port.parse().expect("port");
    let host = match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => Host::Ip(ip),
        Err(_) => Host::Name(host.to_owned()),
    };
    Endpoint {
        address: Address {
            text: text.to_owned(),
            host,
            port,
        },
        weight,
        max_conns: None,
        backup: false,
        down: false,
        drain: false,
        enabled: Endpoint::DEFAULT_ENABLED,
        slow_start: None,
        max_fails: Endpoint::DEFAULT_MAX_FAILS,
        fail_timeout: Endpoint::DEFAULT_FAIL_TIMEOUT,
        capacity: None,
    }
}

/// Endpoints 127.0.0.1:9000, :9001, ... with these weights.
pub fn weighted(weights: &[u32]) -> Vec<Endpoint> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| ep(9000 + i as u16, w))
        .collect()
}

/// A group named "g" with these endpoints and method.
pub fn group(balance: Balance, endpoints: Vec<Endpoint>) -> Group {
    Group {
        name: "g".into(),
        region: "cn-beijing".into(),
        ratio: Group::DEFAULT_RATIO,
        priority: None,
        balance,
        min_healthy: Group::DEFAULT_MIN_HEALTHY,
        capacity: None,
        health_check: None,
        path_prefix: None,
        keepalive: Group::DEFAULT_KEEPALIVE,
        reuse: Default::default(),
        tls: None,
        outlier: None,
        endpoints,
    }
}

/// A key template of these parts.
pub fn key(parts: Vec<KeyPart>) -> KeyTemplate {
    KeyTemplate {
        text: String::new(),
        parts,
    }
}

/// `hash` on `$request_uri`.
pub fn uri_hash(consistent: bool) -> Balance {
    Balance::Hash {
        key: key(vec![KeyPart::RequestUri]),
        consistent,
    }
}

/// A request from 192.0.2.1 with this URI.
pub fn uri(u: &str) -> StaticRequest {
    StaticRequest::from_ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))).with_uri(u)
}

/// A request from `ip`.
pub fn from(ip: &str) -> StaticRequest {
    StaticRequest::from_ip(ip.parse().expect("ip"))
}

/// A request with nothing but a client address.
pub fn anyone() -> StaticRequest {
    from("192.0.2.1")
}

/// `base + secs`.
pub fn at(base: Instant, secs: f64) -> Instant {
    base + Duration::from_secs_f64(secs)
}
