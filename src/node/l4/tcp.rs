//! TCP listeners: decide, connect (with retries across endpoints and groups, within the
//! listener's attempt budget), write the PROXY header when asked, wait for the endpoint's
//! first byte under `first_byte_timeout` ([`super::first_byte`]), relay.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::balance::errors::ErrorKind;
use crate::config::Measure;

use super::StreamKey;
use super::first_byte::{Kept, Opened, open};
use super::relay::{Ended, relay};
use crate::node::Inner;
use crate::node::attempt::{Attempts, Budget};
use crate::node::connect::{connect, exhausted};
use crate::node::snapshot::ListenerState;

/// Serves one admitted TCP connection until both sides close (or it idles out).
pub(crate) async fn serve(
    node: &Inner,
    l: &ListenerState,
    client: TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
) {
    let m = &l.metrics;
    let _ = client.set_nodelay(true);

    let key = StreamKey(peer.ip());
    let mut budget = Budget::new(&l.cfg, Instant::now());
    let place = l.locate(peer.ip());
    l.count_client(place.as_ref());
    let mut router = Attempts::for_client(l, None, peer.ip(), place.as_ref());
    // What the client sent to endpoints that have not answered yet (`first_byte_timeout`).
    let mut kept = Kept::default();
    let (upstream, attempt, waited) = loop {
        let now = Instant::now();
        if !budget.allows(now) {
            tracing::debug!(listener = %l.cfg.name, %peer, attempts = budget.made(), "every attempt failed; closing");
            return;
        }
        let Some(attempt) = router.next(&key, now) else {
            if budget.made() == 0 {
                m.no_route.increment(1);
                tracing::debug!(listener = %l.cfg.name, %peer, "no route; closing");
            }
            return;
        };
        if budget.spend() {
            m.retries.increment(1);
        }
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
                match open(l, &client, s, peer, local, &mut kept).await {
                    Opened::Ready(s, waited) => {
                        // Established (and, with first_byte_timeout, the endpoint's first byte
                        // arrived) is the attempt's success (docs/design.md §5): a session may
                        // last for hours, and the endpoint's mark must not wait for it to end.
                        l.attempt_succeeded(attempt.group, &attempt.pick, Instant::now());
                        break (s, attempt, waited);
                    }
                    Opened::Gone => return,
                    Opened::Silent(why) => {
                        tracing::debug!(listener = %l.cfg.name, endpoint = %attempt.pick.address(), %why, "endpoint silent");
                        group.endpoints[attempt.pick.index()].failures.increment(1);
                        attempt.pick.error(ErrorKind::Timeout, Instant::now());
                        l.attempt_failed(attempt.group, &attempt.pick, &why);
                    }
                }
            }
            // Out of open files: the client is closed, the endpoint not blamed.
            Err(e) if exhausted(&e) => return,
            Err(e) => {
                tracing::debug!(listener = %l.cfg.name, endpoint = %attempt.pick.address(), error = %e, "connect failed");
                group.endpoints[attempt.pick.index()].failures.increment(1);
                attempt.pick.error(ErrorKind::Connect, Instant::now());
                l.attempt_failed(attempt.group, &attempt.pick, &e);
            }
        }
    };
    drop(kept);
    let group = &l.groups[attempt.group];
    group.endpoints[attempt.pick.index()]
        .connections
        .increment(1);
    let relayed = relay(
        &client,
        &upstream,
        l.cfg.idle_timeout,
        &m.bytes_up,
        &m.bytes_down,
    )
    .await;
    match relayed {
        Ok(r) => {
            if r.ended == Ended::Idle {
                tracing::debug!(listener = %l.cfg.name, %peer, "idle timeout");
            }
            if let Some(first) = waited.or(r.first_byte) {
                attempt.pick.record_timing(Measure::FirstByte, first);
            }
            attempt.pick.record_timing(Measure::LastByte, r.last_byte);
        }
        Err(e) => {
            tracing::debug!(listener = %l.cfg.name, %peer, error = %e, "relay ended with an error")
        }
    }
}
