//! The line of a TCP connection, written when it closes, and of a UDP flow, written when it
//! ends (docs/logs.md "Connections and flows" lists the fields and causes): who, through which
//! listener, group and endpoint, the bytes each way, how long, why it ended and how many
//! attempts it took.
//!
//! A connection or flow keeps its byte counts where its relay already keeps its state (no
//! allocation for them); the [`Stream`] record is built, boxed and sent only when it ends and
//! the log is on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::Record;
use super::line::{Client, Formatter, Millis, Stamp, escaped, push_u64};
use gtd_core::config::Listener;

/// Why a connection or a flow ended: the `cause` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// TCP: the client finished sending first (then the endpoint did too).
    ClientClosed,
    /// TCP: the endpoint finished sending first (then the client did too).
    EndpointClosed,
    /// TCP: nothing moved either way for the listener's `idle_timeout`.
    IdleTimeout,
    /// TCP: a side reset the connection (or broke it otherwise) while bytes were relayed.
    Reset,
    /// Every attempt the budget allowed failed (refused, timed out, silent past
    /// `first_byte_timeout`); `endpoint` is the last one tried.
    ConnectFailed,
    /// No group could take it (every endpoint down, disabled or marked): nothing was tried.
    NoRoute,
    /// The node was out of open files (or socket memory) for its endpoint socket.
    OutOfFiles,
    /// The node's drain at shutdown (SIGTERM) ended with it still open: gtd closed it.
    DrainTimeout,
    /// UDP: the flow sat idle for the listener's `idle_timeout`.
    Expired,
    /// UDP: the flow table was full (`udp_max_flows`, or no open files left) and this flow
    /// was the least recently active.
    Evicted,
    /// UDP: its endpoint could no longer take it (marked or checked unhealthy, set `down` or
    /// disabled, removed by a reload): the flow's next datagram opened a new flow elsewhere.
    Moved,
    /// UDP: a reload removed the listener on its port.
    ListenerRemoved,
}

impl Cause {
    /// The cause as the log writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cause::ClientClosed => "client_closed",
            Cause::EndpointClosed => "endpoint_closed",
            Cause::IdleTimeout => "idle_timeout",
            Cause::Reset => "reset",
            Cause::ConnectFailed => "connect_failed",
            Cause::NoRoute => "no_route",
            Cause::OutOfFiles => "out_of_files",
            Cause::DrainTimeout => "drain_timeout",
            Cause::Expired => "expired",
            Cause::Evicted => "evicted",
            Cause::Moved => "moved",
            Cause::ListenerRemoved => "listener_removed",
        }
    }
}

/// One TCP connection's or UDP flow's line.
pub(crate) struct Stream {
    /// A UDP flow (else a TCP connection).
    pub(crate) udp: bool,
    pub(crate) client: SocketAddr,
    /// Where `[geoip]` puts the client (`None`: no database).
    pub(crate) place: Option<gtd_core::geoip::Place>,
    pub(crate) listener: Arc<Listener>,
    /// The group and endpoint (config indices) it was relayed to, or last tried.
    pub(crate) target: Option<(usize, usize)>,
    /// Attempts after the first.
    pub(crate) retries: u32,
    /// Bytes from the client to the endpoint.
    pub(crate) bytes_in: u64,
    /// Bytes from the endpoint to the client.
    pub(crate) bytes_out: u64,
    /// When the client's connection was accepted, or the flow's first datagram received.
    pub(crate) started: Instant,
    pub(crate) ended: Instant,
    pub(crate) cause: Cause,
}

/// The line's fields, as both formats write them.
#[derive(Serialize)]
struct Fields<'a> {
    timestamp: Stamp,
    #[serde(rename = "type")]
    kind: &'static str,
    client: Client,
    listener: &'a str,
    cause: &'static str,
    group: Option<&'a str>,
    endpoint: Option<&'a str>,
    retries: u32,
    bytes_in: u64,
    bytes_out: u64,
    total_ms: Millis,
    continent: Option<&'static str>,
    country: Option<&'a str>,
}

impl Record for Stream {
    fn write(&self, f: &mut Formatter, out: &mut Vec<u8>, clock: (SystemTime, Instant)) {
        let target = self.target.and_then(|(g, i)| {
            let group = self.listener.groups.get(g)?;
            Some((group.name.as_str(), group.endpoints.get(i)?.address.id()))
        });
        let fields = Fields {
            timestamp: f.dated(self.ended, clock),
            kind: if self.udp { "udp" } else { "tcp" },
            client: Client::of(self.client),
            listener: &self.listener.name,
            cause: self.cause.as_str(),
            group: target.as_ref().map(|t| t.0),
            endpoint: target.as_ref().map(|t| &*t.1),
            retries: self.retries,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            total_ms: Millis(self.ended.saturating_duration_since(self.started)),
            continent: self.place.map(|p| p.continent.as_str()),
            country: self.place.as_ref().and_then(|p| p.country_str()),
        };
        f.line(out, &fields, text);
    }
}

/// The text line: the client, listener and type in the places an HTTP line has the client,
/// listener and method, so the two kinds are told apart by their fourth field.
fn text(out: &mut Vec<u8>, f: &Fields<'_>) {
    out.extend_from_slice(&f.timestamp.0);
    out.push(b' ');
    out.extend_from_slice(f.client.as_str().as_bytes());
    for field in [f.listener, f.kind, f.cause] {
        out.push(b' ');
        escaped(out, field);
    }
    for field in [f.group, f.endpoint] {
        out.push(b' ');
        escaped(out, field.unwrap_or("-"));
    }
    for n in [u64::from(f.retries), f.bytes_in, f.bytes_out] {
        out.push(b' ');
        push_u64(out, n);
    }
    out.push(b' ');
    f.total_ms.push(out);
    for field in [f.continent, f.country] {
        out.push(b' ');
        escaped(out, field.unwrap_or("-"));
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::access::line::LogFormat;

    fn listener() -> Arc<Listener> {
        let text = "[[listener]]\nname = \"t\"\nprotocol = \"tcp\"\nport = 9000\n\
                    regions = [\"cn-beijing\"]\n[[listener.group]]\nname = \"bj\"\n\
                    region = \"cn-beijing\"\n[[listener.group.endpoint]]\naddress = \"10.0.0.1:80\"\n";
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let catalog = gtd_core::config::load_catalog(&root.join("regions/catalog.toml")).unwrap();
        let cfg = gtd_core::config::parse(text, std::path::Path::new("t.toml"), &catalog).unwrap();
        Arc::new(cfg.listeners[0].clone())
    }

    /// Both formats of one connection's line, field by field.
    #[test]
    fn a_connection_is_one_line_in_each_format() {
        let started = Instant::now();
        let line = Stream {
            udp: false,
            client: "192.0.2.7:51234".parse().unwrap(),
            place: None,
            listener: listener(),
            target: Some((0, 0)),
            retries: 1,
            bytes_in: 5,
            bytes_out: 12,
            started,
            ended: started + Duration::from_micros(12_345),
            cause: Cause::EndpointClosed,
        };
        let clock = (UNIX_EPOCH + Duration::from_secs(1_748_766_600), line.ended);
        let write = |format| {
            let mut out = Vec::new();
            line.write(&mut Formatter::new(format), &mut out, clock);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            write(LogFormat::Text),
            "2025-06-01T08:30:00.000Z 192.0.2.7:51234 t tcp endpoint_closed bj 10.0.0.1:80 1 5 12 \
             12.345 - -\n"
        );
        assert_eq!(
            write(LogFormat::Json),
            "{\"timestamp\":\"2025-06-01T08:30:00.000Z\",\"type\":\"tcp\",\
             \"client\":\"192.0.2.7:51234\",\"listener\":\"t\",\"cause\":\"endpoint_closed\",\
             \"group\":\"bj\",\"endpoint\":\"10.0.0.1:80\",\"retries\":1,\"bytes_in\":5,\
             \"bytes_out\":12,\"total_ms\":12.345,\"continent\":null,\"country\":null}\n"
        );
    }
}
