//! One client connection as its requests see it ([`Conn`], shared by them), and what an
//! exchange holds until its response body ends: a place on the connection ([`Slot`]) and the
//! descriptor of its endpoint connection ([`Held`]).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gtd_core::sync::lock;
use http::header::HeaderValue;

/// What one connection's requests need to know about it (shared by them: one reference count
/// per request).
pub(super) struct Conn {
    /// The client's address (canonical: an IPv4-mapped IPv6 address as IPv4) and port.
    pub(super) client: SocketAddr,
    /// Where the `[geoip]` database puts the client: looked up once for the connection.
    pub(super) place: Option<gtd_core::geoip::Place>,
    pub(super) port: u16,
    pub(super) https: bool,
    /// The client's address as an X-Forwarded-For value, made once per connection.
    pub(super) xff: HeaderValue,
    /// Where an upgraded request leaves its tunnel, for the connection's task to run once hyper
    /// hands the connection over (one pointer: see [`Conn::upgraded`]).
    tunnel: arc_swap::ArcSwapOption<Mutex<Option<Tunnel>>>,
    /// Requests of this connection waiting for their response headers (an HTTP/2 connection has
    /// several): the connection is not idle meanwhile, however long the endpoint takes.
    pub(super) inflight: AtomicU32,
    /// A request has reached gtd on this connection (see [`run`]).
    pub(super) asked: AtomicBool,
    /// A request of this connection has been sent to an endpoint: the next ones may take an
    /// idle endpoint connection under `reuse = "safe"` (see [`Conn::first_request`]).
    sent: AtomicBool,
    /// The connection speaks HTTP/2 (ALPN said so, or a request came as HTTP/2): the node's
    /// stop sends it a GOAWAY at once.
    pub(super) h2: AtomicBool,
    /// Told of each request that comes while the node drains (see [`run`]).
    pub(super) drain_wake: tokio::sync::Notify,
    /// Told when a request found no HTTP listener on this connection's port any more (a reload
    /// removed it, moved it or changed its protocol): the connection is shut down (see [`run`]).
    pub(super) listener_gone: tokio::sync::Notify,
    /// Requests of this connection holding an endpoint connection (see [`Slot`]).
    upstream: AtomicU16,
    /// Told when one of them ends.
    upstream_freed: tokio::sync::Notify,
    /// The connection's moves (see [`crate::timers::Moving`]), shared with its socket.
    pub(super) moves: Arc<AtomicU64>,
    /// Requests taken from the connection whose response has not ended yet (see [`Exchange`]):
    /// while one is open the connection is not parked.
    pub(super) exchanges: AtomicU16,
    /// The reads count (`timers::reads`) when the last exchange ended: a read since then means
    /// bytes of the next request may sit in hyper's buffer.
    pub(super) ended_at: AtomicU32,
    /// Bytes of response bodies handed to hyper's HTTP/1 server and not yet written to the
    /// socket (cleartext HTTP/1 only: see [`Conn::held_back`]).
    unsent: AtomicU32,
    /// [`HELD`] while a response body is held back until the client takes some of what it was
    /// given; [`SLOWED`] once a write to the client found its socket full (one byte for both:
    /// see `conn_fits_its_size_class`).
    pacing: AtomicU8,
    /// Bytes hyper wrote to the socket that it has not flushed since (see
    /// `server::Parkable`).
    pub(super) unflushed: AtomicBool,
}

impl Conn {
    /// Leaves the relay of an upgraded request for the connection's task.
    pub(super) fn upgrade(&self, relay: Tunnel) {
        self.tunnel.store(Some(Arc::new(Mutex::new(Some(relay)))));
    }

    /// The relay an upgraded request left, if one did. (Not a `Mutex` in `Conn` itself: the
    /// pointer keeps a `Conn` within 240 bytes, so that every connection's `Arc<Conn>` is an
    /// allocation of 256 rather than 320: `conn_fits_its_size_class`.)
    pub(super) fn upgraded(&self) -> Option<Tunnel> {
        let cell = self.tunnel.swap(None)?;
        lock(&cell).take()
    }

    /// A cleartext HTTP/1 connection: its response bodies are paced by [`Conn::held_back`].
    pub(super) fn paced(&self) -> bool {
        !self.https && !self.h2.load(Ordering::Relaxed)
    }

    /// Whether a response body (of a [`Conn::paced`] connection) must wait before it hands
    /// hyper more (and then wakes up when
    /// [`Conn::unwritten`] finds the unsent bytes under [`HOLD`]). Only for a cleartext HTTP/1
    /// connection, whose socket writes go through `server::Parkable` in the same task that
    /// polls the body: hyper's HTTP/1 server takes body frames while its write buffer holds
    /// under 64 KiB (`max_buf_size`, also the request head limit) and copies each into it, so
    /// that a client that reads slowly would otherwise hold 64 KiB and one more frame there.
    pub(super) fn held_back(&self) -> bool {
        if self.unsent.load(Ordering::Relaxed) <= HOLD {
            return false;
        }
        self.pacing.fetch_or(HELD, Ordering::Relaxed);
        true
    }

    /// A write to the client found its socket full: the client reads slower than gtd writes.
    pub(super) fn slowed(&self) {
        self.pacing.fetch_or(SLOWED, Ordering::Relaxed);
    }

    /// Whether a write to the client has found its socket full (see [`Conn::slowed`]).
    pub(super) fn is_slow(&self) -> bool {
        self.pacing.load(Ordering::Relaxed) & SLOWED != 0
    }

    /// Counts `n` bytes of a response body handed to hyper (until the next write says what
    /// is left: [`Conn::unwritten`]).
    pub(super) fn handed(&self, n: usize) {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        // Saturating (fetch_update): a count near 4 GiB must not wrap to a small one.
        let _ = self
            .unsent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_add(n))
            });
    }

    /// After a write to the socket: `left` bytes of what hyper asked to write are still
    /// unwritten. With its write buffer flat (`writev(false)`), hyper always asks to write all
    /// it holds, head and chunk framing included, so this is the exact count, whatever
    /// [`Conn::handed`] estimated since. Wakes the connection's task when a body held back may
    /// go on.
    pub(super) fn unwritten(&self, left: usize, cx: &std::task::Context<'_>) {
        let left = u32::try_from(left).unwrap_or(u32::MAX);
        self.unsent.store(left, Ordering::Relaxed);
        if left <= HOLD
            && self.pacing.load(Ordering::Relaxed) & HELD != 0
            && self.pacing.fetch_and(!HELD, Ordering::Relaxed) & HELD != 0
        {
            cx.waker().wake_by_ref();
        }
    }

    /// The client's address.
    pub(super) fn peer(&self) -> IpAddr {
        self.client.ip()
    }

    /// True for the first request of this connection to be sent to an endpoint, once (an
    /// HTTP/2 connection's streams race for it: one wins). Under `reuse = "safe"` it goes on
    /// an endpoint connection of its own.
    pub(super) fn first_request(&self) -> bool {
        // A load first: every later request costs a read, not a write to a shared line.
        !self.sent.load(Ordering::Relaxed) && !self.sent.swap(true, Ordering::Relaxed)
    }
}

/// The most of a cleartext HTTP/1 response body handed to hyper and not yet written to the
/// client before the next part waits ([`Conn::held_back`]). With one more [`PIECE`] and a
/// response head it stays within 32 KiB, so that hyper's write buffer, which grows by doubling
/// and never shrinks, stops at 32 KiB for a client that reads slowly (docs/performance.md,
/// memory per slow reader).
pub(crate) const HOLD: u32 = 20 * 1024;

/// The largest part of a response body handed to hyper at once (a larger frame read from the
/// endpoint is handed in parts of this size, without copying).
pub(crate) const PIECE: usize = 8 * 1024;

/// [`Conn::pacing`]: a response body is held back.
const HELD: u8 = 1;
/// [`Conn::pacing`]: the client has been found slow.
const SLOWED: u8 = 2;

/// The relay of an upgraded connection.
pub(super) type Tunnel = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Conn {
    pub(super) fn new(
        client: SocketAddr,
        place: Option<gtd_core::geoip::Place>,
        port: u16,
        https: bool,
        moves: Arc<AtomicU64>,
    ) -> Conn {
        let peer = client.ip().to_canonical();
        // Copied into a buffer of its own length: a `String`'s spare room would make the
        // header's bytes a shared buffer, a second allocation for every connection.
        let xff = HeaderValue::from_maybe_shared(bytes::Bytes::copy_from_slice(
            peer.to_string().as_bytes(),
        ))
        .expect("an address is a header value");
        Conn {
            client: SocketAddr::new(peer, client.port()),
            place,
            port,
            https,
            xff,
            tunnel: arc_swap::ArcSwapOption::empty(),
            inflight: AtomicU32::new(0),
            asked: AtomicBool::new(false),
            sent: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            drain_wake: tokio::sync::Notify::new(),
            listener_gone: tokio::sync::Notify::new(),
            upstream: AtomicU16::new(0),
            upstream_freed: tokio::sync::Notify::new(),
            moves,
            exchanges: AtomicU16::new(0),
            ended_at: AtomicU32::new(0),
            unsent: AtomicU32::new(0),
            pacing: AtomicU8::new(0),
            unflushed: AtomicBool::new(false),
        }
    }
}

/// One request of a connection, from the moment hyper hands it over until its response has
/// ended (the response body is dropped, or the request's future is, when the client left):
/// counted in [`Conn::exchanges`], so that an HTTP/1 connection is parked only between
/// exchanges.
pub(crate) struct Exchange(Arc<Conn>);

impl Exchange {
    pub(super) fn start(conn: &Arc<Conn>) -> Exchange {
        conn.exchanges.fetch_add(1, Ordering::Relaxed);
        // Each response's body is held back on its own count (an earlier one's bytes that
        // hyper dropped unwritten, as a client's going would, must not hold this one back),
        // and its reads start at their usual size: a client found slow once (a full socket is
        // common over a real network) does not make every later response's reads small.
        conn.unsent.store(0, Ordering::Relaxed);
        conn.pacing.store(0, Ordering::Relaxed);
        Exchange(Arc::clone(conn))
    }
}

impl Exchange {
    /// The connection the request came on.
    pub(super) fn conn(&self) -> &Conn {
        &self.0
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let c = &self.0;
        c.ended_at.store(
            crate::timers::reads(c.moves.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        c.exchanges.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Most requests of one client connection that hold an endpoint connection at once: an HTTP/2
/// client's further streams wait for one of them to end (an HTTP/1.1 connection has one request
/// at a time). Without it, 100 streams whose bodies never come hold 100 endpoint connections.
pub(crate) const UPSTREAM_PER_CONNECTION: u16 = 32;

/// One of a connection's [`UPSTREAM_PER_CONNECTION`] places, held until dropped.
pub(crate) struct Slot(Arc<Conn>);

impl Slot {
    /// A place on `conn`, waiting up to `wait` for one to free; `None` then.
    pub(super) async fn take(conn: &Arc<Conn>, wait: Duration) -> Option<Slot> {
        let mut by = None;
        loop {
            if conn.upstream.fetch_add(1, Ordering::Relaxed) < UPSTREAM_PER_CONNECTION {
                return Some(Slot(Arc::clone(conn)));
            }
            conn.upstream.fetch_sub(1, Ordering::Relaxed);
            // The clock is read only when there is a wait.
            let by = *by.get_or_insert_with(|| tokio::time::Instant::now() + wait);
            // A place freed between the two lines above left its notification stored.
            tokio::time::timeout_at(by, conn.upstream_freed.notified())
                .await
                .ok()?;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.upstream.fetch_sub(1, Ordering::Relaxed);
        self.0.upstream_freed.notify_one();
    }
}

/// What an exchange holds until its response body ends: its place on the client connection
/// and the descriptor of its endpoint connection.
pub(crate) struct Held {
    _slot: Option<Slot>,
    _fds: crate::descriptors::Fds,
}

impl Held {
    pub(super) fn new(slot: Option<Slot>, fds: crate::descriptors::Fds) -> Held {
        Held {
            _slot: slot,
            _fds: fds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every client connection holds its `Arc<Conn>` for as long as it lives, parked or not
    /// (docs/performance.md, the cost of a connection): with the `Arc`'s two counts it is an
    /// allocation of 256 bytes, the next size class up being 320.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn conn_fits_its_size_class() {
        assert!(
            std::mem::size_of::<Conn>() + 16 <= 256,
            "{}",
            std::mem::size_of::<Conn>()
        );
    }
}
