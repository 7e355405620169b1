//! TOML snippets for the configs the tests write: a `[[listener]]` and its `[[listener.group]]`s
//! with their endpoints. The text is what an operator would write, so a test's config reads as
//! one.

use std::net::SocketAddr;

use super::free_port;

/// A `[[listener]]` named `name` on `port`, served from `regions`, with `extra` settings, and
/// then its `groups`. Unless `extra` sets its own, the listener drains for 2 s rather than the
/// default 30 s: a test that ends with a connection or a UDP flow still open would otherwise
/// wait out the whole drain in `shutdown`.
pub(crate) fn listener_on(
    port: u16,
    name: &str,
    protocol: &str,
    regions: &[&str],
    extra: &str,
    groups: &str,
) -> String {
    let drain = if extra.contains("drain_timeout") {
        ""
    } else {
        "drain_timeout = \"2s\"\n"
    };
    format!(
        "[[listener]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\nport = {port}\nregions = {regions:?}\n{drain}{extra}\n{groups}"
    )
}

/// A `[[listener]]` on a free port, served from cn-beijing.
pub(crate) fn listener(name: &str, protocol: &str, extra: &str, groups: &str) -> String {
    let port = free_port(protocol == "udp");
    listener_on(port, name, protocol, &["cn-beijing"], extra, groups)
}

/// What an endpoint says besides its address: a weight (`1`) or its own TOML keys
/// (`"max_fails = 0"`, `""` for none).
pub(crate) trait EndpointKeys {
    /// The keys as TOML lines.
    fn toml(&self) -> String;
}

impl EndpointKeys for i32 {
    fn toml(&self) -> String {
        format!("weight = {self}")
    }
}

impl EndpointKeys for &str {
    fn toml(&self) -> String {
        (*self).to_owned()
    }
}

/// A `[[listener.group]]` with `extra` settings and its endpoints, each with its own keys.
pub(crate) fn group<K: EndpointKeys>(
    name: &str,
    region: &str,
    ratio: f64,
    extra: &str,
    endpoints: &[(SocketAddr, K)],
) -> String {
    let mut s = format!(
        "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = {ratio}\n{extra}\n"
    );
    for (addr, keys) in endpoints {
        s.push_str(&format!(
            "[[listener.group.endpoint]]\naddress = \"{addr}\"\n{}\n",
            keys.toml()
        ));
    }
    s
}
