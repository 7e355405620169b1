//! TCP listeners: decide, connect (with retries across endpoints and groups, within the
//! listener's attempt budget), write the PROXY header when asked, wait for the endpoint's
//! first byte under `first_byte_timeout` ([`super::first_byte`]), relay; then the connection's
//! access log line, when the log is on ([`crate::access::stream`]).

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpStream;

use gtd_core::balance::errors::ErrorKind;
use gtd_core::config::Measure;

use super::StreamKey;
use super::first_byte::{Kept, Opened, open};
use super::relay::{Ended, relay};
use crate::Inner;
use crate::access::stream::{Cause, Stream};
use crate::attempt::{Attempts, Budget};
use crate::connect::{connect, exhausted};
use crate::snapshot::ListenerState;

/// How a connection ended, for its log line (kept on the stack: nothing is allocated for it).
struct End {
    cause: Cause,
    /// The group and endpoint relayed to, or last tried.
    target: Option<(usize, usize)>,
    /// Attempts after the first.
    retries: u32,
    up: u64,
    down: u64,
}

impl End {
    fn at(cause: Cause, target: Option<(usize, usize)>, budget: &Budget) -> End {
        End {
            cause,
            target,
            retries: budget.made().saturating_sub(1),
            up: 0,
            down: 0,
        }
    }
}

/// Serves one admitted TCP connection until both sides close (or it idles out, or the node's
/// drain ends), then logs it.
pub(crate) async fn serve(
    node: &Inner,
    l: &ListenerState,
    client: TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
) {
    let started = Instant::now();
    let _ = client.set_nodelay(true);
    let place = l.locate(peer.ip());
    l.count_client(place.as_ref());
    let end = connect_and_relay(node, l, &client, peer, local, place.as_ref()).await;
    drop(client);
    // The log as the running config has it now (a reload may have turned it on or off).
    if let Some(log) = node.snapshot.load().access.as_ref() {
        log.send(Box::new(Stream {
            udp: false,
            client: peer,
            place,
            listener: l.cfg.clone(),
            target: end.target,
            retries: end.retries,
            bytes_in: end.up,
            bytes_out: end.down,
            started,
            ended: Instant::now(),
            cause: end.cause,
        }));
    }
}

async fn connect_and_relay(
    node: &Inner,
    l: &ListenerState,
    client: &TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    place: Option<&gtd_core::geoip::Place>,
) -> End {
    let m = &l.metrics;
    let key = StreamKey(peer.ip());
    let mut budget = Budget::new(&l.cfg, Instant::now());
    let mut router = Attempts::for_client(l, None, peer.ip(), place);
    // What the client sent to endpoints that have not answered yet (`first_byte_timeout`).
    let mut kept = Kept::default();
    // The last endpoint tried.
    let mut tried = None;
    let (upstream, attempt, waited) = loop {
        let now = Instant::now();
        if !budget.allows(now) {
            tracing::debug!(listener = %l.cfg.name, %peer, attempts = budget.made(), "every attempt failed; closing");
            return End::at(Cause::ConnectFailed, tried, &budget);
        }
        let Some(attempt) = router.next(&key, now) else {
            if budget.made() == 0 {
                m.no_route.increment(1);
                tracing::debug!(listener = %l.cfg.name, %peer, "no route; closing");
                return End::at(Cause::NoRoute, None, &budget);
            }
            return End::at(Cause::ConnectFailed, tried, &budget);
        };
        if budget.spend() {
            m.retries.increment(1);
        }
        tried = Some((attempt.group, attempt.pick.index()));
        let group = &l.groups[attempt.group];
        let t0 = Instant::now();
        match connect(
            attempt.pick.address(),
            node.source_ip(),
            l.cfg.connect_timeout,
        )
        .await
        {
            Ok(s) => {
                group.connect_seconds.record(t0.elapsed().as_secs_f64());
                attempt.pick.record_timing(Measure::Connect, t0.elapsed());
                match open(l, client, s, peer, local, &mut kept).await {
                    Opened::Ready(s, waited) => {
                        // Established (and, with first_byte_timeout, the endpoint's first byte
                        // arrived) is the attempt's success (docs/design.md §5): a session may
                        // last for hours, and the endpoint's mark must not wait for it to end.
                        l.attempt_succeeded(attempt.group, &attempt.pick, Instant::now());
                        break (s, attempt, waited);
                    }
                    Opened::Gone => return End::at(Cause::ClientClosed, tried, &budget),
                    Opened::Broken => return End::at(Cause::Reset, tried, &budget),
                    Opened::Silent(why) => {
                        tracing::debug!(listener = %l.cfg.name, endpoint = %attempt.pick.address(), %why, "endpoint silent");
                        group.endpoints[attempt.pick.index()].failures.increment(1);
                        attempt.pick.error(ErrorKind::Timeout, Instant::now());
                        l.attempt_failed(attempt.group, &attempt.pick, &why);
                    }
                }
            }
            // Out of open files: the client is closed, the endpoint not blamed.
            Err(e) if exhausted(&e) => return End::at(Cause::OutOfFiles, tried, &budget),
            Err(e) => {
                tracing::debug!(listener = %l.cfg.name, endpoint = %attempt.pick.address(), error = %e, "connect failed");
                group.endpoints[attempt.pick.index()].failures.increment(1);
                attempt.pick.error(ErrorKind::Connect, Instant::now());
                l.attempt_failed(attempt.group, &attempt.pick, &e);
            }
        }
    };
    // Bytes the endpoint that answered got before the relay (`first_byte_timeout`).
    let mut end = End::at(Cause::ClientClosed, tried, &budget);
    end.up = kept.sent();
    drop(kept);
    let group = &l.groups[attempt.group];
    group.endpoints[attempt.pick.index()]
        .connections
        .increment(1);
    let r = relay(
        client,
        &upstream,
        l.cfg.idle_timeout,
        (&m.bytes_up, &m.bytes_down),
        super::drain_ends(node, l.cfg.drain_timeout),
    )
    .await;
    end.up += r.up;
    end.down = r.down;
    end.cause = match r.ended {
        Ended::ClientClosed => Cause::ClientClosed,
        Ended::EndpointClosed => Cause::EndpointClosed,
        Ended::Idle => {
            tracing::debug!(listener = %l.cfg.name, %peer, "idle timeout");
            Cause::IdleTimeout
        }
        Ended::Stopped => Cause::DrainTimeout,
        Ended::Broken(kind) => {
            tracing::debug!(listener = %l.cfg.name, %peer, error = %kind, "relay ended with an error");
            Cause::Reset
        }
    };
    // The client spoke and the endpoint never said a word (no `first_byte_timeout` to catch
    // it): a hung endpoint's connection, counted as its timeout, as HTTP's upstream_timeout
    // is, so that the error column and `gtd fleet` see a blackhole even when the checks only
    // connect. The node's own drain is not the endpoint's doing.
    if end.up > 0 && r.down == 0 && !matches!(r.ended, Ended::Stopped) {
        attempt.pick.error(ErrorKind::Timeout, Instant::now());
    }
    if matches!(
        r.ended,
        Ended::ClientClosed | Ended::EndpointClosed | Ended::Idle
    ) {
        if let Some(first) = waited.or(r.first_byte) {
            attempt.pick.record_timing(Measure::FirstByte, first);
        }
        attempt.pick.record_timing(Measure::LastByte, r.last_byte);
    }
    end
}
