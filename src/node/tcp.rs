//! TCP listeners: accept, decide, connect (with retries across endpoints and groups), relay.
//! The accept loop serves HTTP and HTTPS listeners too: it admits the connection
//! (`max_connections`) and hands it to [`super::http`].

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::balance::RequestKey;
use crate::config::{Address, Host, Measure, Protocol, ProxyProtocol};

use super::activity::Pace;
use super::relay::{Ended, relay};
use super::route::Router;
use super::state::ListenerRt;
use super::{Inner, proxy_protocol};

/// A stream connection as balancers see it: only the client address is known.
pub(crate) struct StreamKey(pub(crate) IpAddr);

impl RequestKey for StreamKey {
    fn remote_ip(&self) -> IpAddr {
        self.0
    }
}

/// Accepts on `socket` until `stop`; every connection is served by the listener currently
/// configured on this port (looked up per connection, so reloads apply to new connections).
pub(crate) async fn accept_loop(
    node: Arc<Inner>,
    socket: TcpListener,
    port: u16,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            r = socket.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: log (out of open files: at most every 10 s), back off a
                // little, never die.
                if !exhausted(&e) {
                    tracing::warn!(port, error = %e, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(listener) = node.snapshot.load().listener_on(port, false).cloned() else {
            continue; // removed by a reload a moment ago
        };
        let local = stream.local_addr().ok();
        let node2 = node.clone();
        node.tracker.spawn(async move {
            let Some(_active) = Active::admit(&listener, peer) else {
                return;
            };
            match listener.cfg.protocol {
                Protocol::Http | Protocol::Https => {
                    super::http::serve(&node2, &listener, stream, peer).await;
                }
                Protocol::Tcp | Protocol::Udp => {
                    serve(&node2, &listener, stream, peer, local).await;
                }
            }
        });
    }
}

/// Counts an open client connection until dropped.
struct Active<'a>(&'a ListenerRt);

impl<'a> Active<'a> {
    /// Admits a connection while the listener has fewer than `max_connections` open.
    fn admit(l: &'a ListenerRt, peer: SocketAddr) -> Option<Active<'a>> {
        if l.active.fetch_add(1, Ordering::Relaxed) >= l.cfg.max_connections as usize {
            l.active.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(listener = %l.cfg.name, %peer, max = l.cfg.max_connections, "max_connections reached; closing");
            return None;
        }
        l.metrics.connections_active.increment(1.0);
        Some(Active(l))
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.connections_active.decrement(1.0);
    }
}

async fn serve(
    node: &Inner,
    l: &ListenerRt,
    client: TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
) {
    let m = &l.metrics;
    let _ = client.set_nodelay(true);

    let key = StreamKey(peer.ip());
    let started = Instant::now();
    let mut router = Router::new(l, peer.ip());
    let mut attempts = 0_u32;
    let (upstream, attempt) = loop {
        let now = Instant::now();
        if attempts > 0
            && (!l.cfg.retry
                || attempts >= l.cfg.tries
                || now.duration_since(started) >= l.cfg.retry_timeout)
        {
            tracing::debug!(listener = %l.cfg.name, %peer, attempts, "every attempt failed; closing");
            return;
        }
        let Some(attempt) = router.next(&key, now) else {
            if attempts == 0 {
                m.no_route.increment(1);
                tracing::debug!(listener = %l.cfg.name, %peer, "no route; closing");
            }
            return;
        };
        if attempts > 0 {
            m.retries.increment(1);
        }
        attempts += 1;
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
                break (s, attempt);
            }
            // Out of open files: the client is closed, the endpoint not blamed.
            Err(e) if exhausted(&e) => return,
            Err(e) => {
                tracing::debug!(listener = %l.cfg.name, endpoint = %attempt.pick.address(), error = %e, "connect failed");
                group.endpoints[attempt.pick.index()].failures.increment(1);
                l.attempt_failed(attempt.group, &attempt.pick, &e);
            }
        }
    };
    let group = &l.groups[attempt.group];
    group.endpoints[attempt.pick.index()]
        .connections
        .increment(1);
    let mut upstream = upstream;
    let _ = upstream.set_nodelay(true);

    if l.cfg.proxy_protocol == Some(ProxyProtocol::V2) {
        let header = proxy_protocol::v2_header(peer, local.unwrap_or(peer));
        if let Err(e) = upstream.write_all(&header).await {
            tracing::debug!(error = %e, "writing PROXY header failed");
            return;
        }
    }
    let relayed = relay(
        &client,
        &upstream,
        l.cfg.idle_timeout,
        &m.bytes_up,
        &m.bytes_down,
    )
    .await;
    let now = Instant::now();
    match relayed {
        Ok(r) => {
            if r.ended == Ended::Idle {
                tracing::debug!(listener = %l.cfg.name, %peer, "idle timeout");
            }
            if let Some(first) = r.first_byte {
                attempt.pick.record_timing(Measure::FirstByte, first);
            }
            attempt.pick.record_timing(Measure::LastByte, r.last_byte);
            l.attempt_succeeded(attempt.group, &attempt.pick, now);
        }
        Err(e) => {
            tracing::debug!(listener = %l.cfg.name, %peer, error = %e, "relay ended with an error")
        }
    }
}

/// The socket address of an endpoint: its IP, or the first address its name resolves to.
pub(crate) async fn resolve(address: &Address) -> io::Result<SocketAddr> {
    match &address.host {
        Host::Ip(ip) => Ok(SocketAddr::new(*ip, address.port)),
        Host::Name(name) => tokio::net::lookup_host((name.as_str(), address.port))
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{name} has no address"))
            }),
    }
}

/// True when `e` says this node is out of open files or socket memory (EMFILE, ENFILE,
/// ENOBUFS, ENOMEM): not the endpoint's failure, so never counted as a passive one (nginx too
/// answers without marking the server when socket() fails). Warns, at most every 10 s, since
/// under exhaustion it is true for every new connection.
pub(crate) fn exhausted(e: &io::Error) -> bool {
    use rustix::io::Errno;
    static PACE: Pace = Pace::new();
    let out = matches!(
        Errno::from_io_error(e),
        Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM)
    );
    if out && PACE.due() {
        tracing::warn!(
            error = %e,
            "this node is out of open files: new connections wait to be accepted or are \
             closed, UDP flows evict the least recently active, no endpoint is blamed; \
             raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower udp_max_flows"
        );
    }
    out
}

/// Connects to an endpoint within `timeout`, from `source` when set.
pub(crate) async fn connect(
    address: &Address,
    source: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let attempt = async {
        let target = resolve(address).await?;
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = source.filter(|ip| ip.is_ipv4() == target.is_ipv4()) {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        socket.connect(target).await
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")))
}
