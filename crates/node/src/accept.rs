//! The accept loop of every TCP-borne listener (TCP, HTTP, HTTPS): admits a connection while
//! the listener has room (`max_connections`, and its part of the open files:
//! [`super::descriptors`]), then hands it to its data plane ([`super::l4`]
//! for TCP, [`super::http`] for HTTP and HTTPS). Transient accept errors are logged and backed
//! off, never fatal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use gtd_core::config::Protocol;

use super::Inner;
use super::connect::exhausted;
use super::snapshot::ListenerState;

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
        let node2 = node.clone();
        // One task type per data plane: a task's allocation is the size of its future, and a
        // TCP relay's is a fraction of an HTTP connection's (both in one future, every idle
        // relay held an HTTP connection's 7 KiB).
        if listener.cfg.protocol.is_http() {
            node.tracker.spawn(async move {
                match admit(&listener, peer) {
                    Ok(held) => super::http::serve(node2, held, stream, peer).await,
                    // The 503 holds the socket for up to a second: a bounded number of them,
                    // so that a flood past max_connections cannot take descriptors that way
                    // instead.
                    Err(Refused::Full) if listener.cfg.protocol == Protocol::Http => {
                        if let Some(_answering) = Answering::start() {
                            super::http::answers::answer_and_close(stream, FULL).await;
                        }
                    }
                    Err(_) => {}
                }
            });
        } else {
            let local = stream.local_addr().ok();
            node.tracker.spawn(async move {
                if let Ok(_held) = admit(&listener, peer) {
                    super::l4::tcp::serve(&node2, &listener, stream, peer, local).await;
                }
            });
        }
    }
}

/// Why a connection was not admitted.
enum Refused {
    /// The listener has `max_connections` open.
    Full,
    /// The listener's part of the open files is taken.
    Files,
}

/// Admits a connection of listener `l`: a place under `max_connections` and its descriptors
/// (the client's, and the endpoint connection a TCP relay opens at once; an HTTP request takes
/// its own, see `http::proxy`). Without descriptors the client is closed: the rest of the node
/// keeps what it needs.
fn admit(l: &Arc<ListenerState>, peer: SocketAddr) -> Result<Admitted, Refused> {
    let active = Active::admit(l, peer).ok_or(Refused::Full)?;
    let needs = if l.cfg.protocol.is_http() { 1 } else { 2 };
    let Some(fds) = l.fds.take(needs) else {
        l.refused_files();
        return Err(Refused::Files);
    };
    Ok(Admitted { active, _fds: fds })
}

/// An admitted connection's place: counted among its listener's open connections, with its
/// descriptors, until dropped. It goes with the connection from task to task (a parked HTTP/1
/// connection moves to a task of its own: `http::serve`).
pub(crate) struct Admitted {
    active: Active,
    _fds: crate::descriptors::Fds,
}

impl Admitted {
    /// The listener the connection was admitted to.
    pub(crate) fn listener(&self) -> &ListenerState {
        &self.active.0
    }
}

/// The answer to an HTTP client refused at `max_connections`, written before the request is
/// read (a server may answer early). HTTPS clients are closed: a handshake is what the limit
/// is there to spare.
static FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
Content-Length: 50\r\nConnection: close\r\nRetry-After: 1\r\n\r\n\
this listener has max_connections open; try again\n";

/// Refused HTTP connections being answered now, across the node.
static ANSWERING: AtomicUsize = AtomicUsize::new(0);
/// Most refused HTTP connections answered at once; past it they are closed bare.
const MAX_ANSWERING: usize = 256;

/// One refused connection being answered (counted in [`ANSWERING`] until dropped).
struct Answering;

impl Answering {
    fn start() -> Option<Answering> {
        if ANSWERING.fetch_add(1, Ordering::Relaxed) >= MAX_ANSWERING {
            ANSWERING.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Answering)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        ANSWERING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts an open client connection until dropped.
struct Active(Arc<ListenerState>);

impl Active {
    /// Admits a connection while the listener has fewer than `max_connections` open.
    /// A refusal is counted, and warned about at most every 10 s (under overload it is every
    /// connection).
    fn admit(l: &Arc<ListenerState>, peer: SocketAddr) -> Option<Active> {
        if l.active.fetch_add(1, Ordering::Relaxed) >= l.cfg.max_connections as usize {
            l.active.fetch_sub(1, Ordering::Relaxed);
            l.metrics.refused_full.increment(1);
            if l.metrics.refused_warning.due() {
                tracing::warn!(
                    listener = %l.cfg.name,
                    %peer,
                    max = l.cfg.max_connections,
                    "max_connections reached: new connections are refused (HTTP ones with 503), \
                     counted in gtd_connections_refused_total; this warning at most every 10 s"
                );
            }
            return None;
        }
        l.metrics.connections_active.increment(1.0);
        Some(Active(Arc::clone(l)))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.connections_active.decrement(1.0);
    }
}
