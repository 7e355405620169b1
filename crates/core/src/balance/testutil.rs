//! Builders for unit tests: groups and endpoints constructed directly from the config model.

use std::net::{IpAddr, Ipv4Addr};

use crate::config::{Address, Balance, Endpoint, Group, Host};

/// An endpoint `127.0.0.1:port` with nginx's defaults.
pub(crate) fn ep(port: u16, weight: u32) -> Endpoint {
    Endpoint {
        address: Address {
            text: format!("127.0.0.1:{port}"),
            host: Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
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

/// A group with these endpoints and method.
pub(crate) fn group(balance: Balance, endpoints: Vec<Endpoint>) -> Group {
    Group {
        name: "g".into(),
        region: "r".into(),
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

/// Endpoints on ports 9000.. with these weights.
pub(crate) fn weighted(weights: &[u32]) -> Vec<Endpoint> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &w)| ep(9000 + i as u16, w))
        .collect()
}
