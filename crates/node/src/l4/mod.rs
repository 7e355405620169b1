//! The layer-4 data planes: TCP connections relayed byte for byte (splice on Linux), UDP
//! flows, and the PROXY protocol header. Nothing here parses the bytes it carries.

pub(crate) mod first_byte;
pub mod proxy_protocol;
pub mod relay;
pub(crate) mod tcp;
pub(crate) mod udp;
pub(crate) mod udp_socket;

use std::net::IpAddr;

use gtd_core::balance::RequestKey;

/// A stream connection as balancers see it: only the client address is known.
pub(crate) struct StreamKey(pub(crate) IpAddr);

impl RequestKey for StreamKey {
    fn remote_ip(&self) -> IpAddr {
        self.0
    }
}

/// Completes when a connection of a listener whose `drain_timeout` is `drain` must be cut: that
/// long after the node's stop began, or at the end of the node's whole drain (the longest
/// listener's), whichever comes first.
pub(crate) async fn drain_ends(node: &super::Inner, drain: std::time::Duration) {
    node.stop.cancelled().await;
    tokio::select! {
        () = tokio::time::sleep(drain) => {}
        () = node.drained.cancelled() => {}
    }
}
