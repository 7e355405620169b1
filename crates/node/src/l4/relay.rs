//! Relaying bytes both ways between two TCP connections until both directions are done or
//! the connection sits idle for too long.
//!
//! On Linux the bytes never enter user space: each direction moves them socket → pipe → socket
//! with splice(2) (through rustix: no hand-written unsafe). Elsewhere a buffered copy does the
//! same job. Half-close is honoured: when one side finishes sending, the other side's write
//! half is shut down and the opposite direction carries on.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics::Counter;
use tokio::net::TcpStream;

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Both directions reached end of stream, the client's first.
    ClientClosed,
    /// Both directions reached end of stream, the endpoint's first.
    EndpointClosed,
    /// Nothing moved for the idle timeout.
    Idle,
    /// `stop` fired first (the end of the node's drain).
    Stopped,
    /// Reading or writing a side failed (a reset, most often).
    Broken(io::ErrorKind),
}

/// What a finished relay reports.
#[derive(Debug, Clone, Copy)]
pub struct Relayed {
    /// Why it ended.
    pub ended: Ended,
    /// Bytes relayed from the client to the endpoint.
    pub up: u64,
    /// Bytes relayed from the endpoint to the client.
    pub down: u64,
    /// Time from the start of the relay to the endpoint's first byte, if it sent any.
    pub first_byte: Option<Duration>,
    /// Time from the start of the relay to its end.
    pub last_byte: Duration,
}

/// Last time bytes moved, in ms since `origin`, when the endpoint's first byte arrived, the
/// bytes each way and which side finished first (for the connection's log line: kept here, in
/// the relay's own state, so that it costs no allocation).
struct Activity {
    origin: Instant,
    last_ms: AtomicU64,
    /// Nanoseconds from `origin` to the first downstream byte + 1 (0: none yet).
    first_down_ns: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    /// The side whose end of stream came first: 0 none yet, [`CLIENT`] or [`ENDPOINT`].
    first_eof: AtomicU8,
}

const CLIENT: u8 = 1;
const ENDPOINT: u8 = 2;

impl Activity {
    fn new() -> Activity {
        Activity {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            first_down_ns: AtomicU64::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            first_eof: AtomicU8::new(0),
        }
    }

    /// `n` bytes moved, towards the client when `downstream`.
    fn moved(&self, downstream: bool, n: usize) {
        let total = if downstream { &self.down } else { &self.up };
        total.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The sending side (the endpoint when `downstream`) reached end of stream.
    fn eof(&self, downstream: bool) {
        let side = if downstream { ENDPOINT } else { CLIENT };
        let _ = self
            .first_eof
            .compare_exchange(0, side, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn first_down(&self) {
        if self.first_down_ns.load(Ordering::Relaxed) == 0 {
            let ns = self.origin.elapsed().as_nanos() as u64 + 1;
            let _ =
                self.first_down_ns
                    .compare_exchange(0, ns, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn touch(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.origin.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Relays `client` ⇄ `upstream` until both sides are done, it idles for `idle`, a side fails
/// or `stop` completes; counts bytes into `up` (client → upstream) and `down`.
pub async fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    idle: Duration,
    (up, down): (&Counter, &Counter),
    stop: impl Future<Output = ()>,
) -> Relayed {
    let activity = Activity::new();
    let both = async {
        let (a, b) = tokio::join!(
            one_way(client, upstream, up, &activity, false),
            one_way(upstream, client, down, &activity, true)
        );
        a.and(b)
    };
    let watch = async {
        loop {
            let left = idle.saturating_sub(activity.idle_for());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.max(Duration::from_millis(10))).await;
        }
    };
    let ended = tokio::select! {
        r = both => match r {
            Ok(()) if activity.first_eof.load(Ordering::Relaxed) == ENDPOINT => {
                Ended::EndpointClosed
            }
            Ok(()) => Ended::ClientClosed,
            Err(e) => Ended::Broken(e.kind()),
        },
        () = watch => Ended::Idle,
        () = stop => Ended::Stopped,
    };
    let first = activity.first_down_ns.load(Ordering::Relaxed);
    Relayed {
        ended,
        up: activity.up.load(Ordering::Relaxed),
        down: activity.down.load(Ordering::Relaxed),
        first_byte: (first > 0).then(|| Duration::from_nanos(first - 1)),
        last_byte: activity.origin.elapsed(),
    }
}

/// Pipes nobody is using, for spliced directions to borrow while bytes move: a connection
/// holds its two sockets, and pipes only while it transfers (HAProxy pools its pipes too).
/// Without the pool every connection kept two pipes (four descriptors) for its whole life:
/// 500 connections that each echoed a line held 3 000 descriptors, 1 000 with it.
#[cfg(target_os = "linux")]
mod pipes {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::sync::Mutex;

    use gtd_core::sync::lock;

    use rustix::pipe::{PipeFlags, pipe_with};

    /// Most pipes kept for later (each is two descriptors); beyond that they are closed.
    const KEPT: usize = 256;

    static IDLE: Mutex<Vec<(OwnedFd, OwnedFd)>> = Mutex::new(Vec::new());

    /// An empty pipe (read end, write end): a kept one, else a new one.
    pub(super) fn borrow() -> io::Result<(OwnedFd, OwnedFd)> {
        let kept = lock(&IDLE).pop();
        match kept {
            Some(pipe) => Ok(pipe),
            None => Ok(pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?),
        }
    }

    /// Gives back an empty pipe of the default size.
    pub(super) fn give_back(pipe: (OwnedFd, OwnedFd)) {
        let mut idle = lock(&IDLE);
        if idle.len() < KEPT {
            idle.push(pipe);
        }
    }
}

#[cfg(target_os = "linux")]
async fn one_way(
    src: &TcpStream,
    dst: &TcpStream,
    counter: &Counter,
    activity: &Activity,
    downstream: bool,
) -> io::Result<()> {
    use rustix::pipe::{SpliceFlags, splice};
    use tokio::io::Interest;

    /// Bytes moved per splice call at first: the default pipe capacity.
    const CHUNK: usize = 64 * 1024;
    /// Once a direction has moved this much it is a bulk transfer, and its pipe grows to
    /// `BULK_PIPE` (the default `/proc/sys/fs/pipe-max-size`): each splice then moves up to
    /// 1 MiB instead of 64 KiB. On loopback that gives about 1.4x the single-stream throughput
    /// at less CPU. Short connections keep the default pipe, because pipe pages count against
    /// the user's `pipe-user-pages-soft` quota. If the kernel refuses, the pipe stays as it is.
    /// A grown pipe stays with its direction (it is not given back to the pool).
    const BULK_AFTER: u64 = 1 << 20;
    const BULK_PIPE: usize = 1 << 20;
    let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
    let (mut chunk, mut moved, mut grown) = (CHUNK, 0_u64, false);
    // Borrowed while bytes move; empty whenever the loop comes round.
    let mut pipe: Option<(OwnedFd, OwnedFd)> = None;
    loop {
        if pipe.is_none() {
            src.readable().await?;
            // Out of open files (a pipe is two), the bytes go through user space instead, as
            // HAProxy falls back from splicing when it has no pipe: the connection is served
            // either way.
            match pipes::borrow() {
                Ok(p) => pipe = Some(p),
                Err(_) => return copy(src, dst, counter, activity, downstream).await,
            }
        }
        let (pipe_r, pipe_w) = pipe.as_ref().expect("a pipe");
        // Socket → pipe. The pipe is empty here, so EAGAIN can only mean "socket not readable".
        let n = match src.try_io(Interest::READABLE, || {
            Ok(splice(src, None, pipe_w, None, chunk, flags)?)
        }) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Nothing to move: the pipe goes back while the socket is quiet.
                if grown {
                    src.readable().await?;
                } else if let Some(p) = pipe.take() {
                    pipes::give_back(p);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            activity.eof(downstream);
            let _ = rustix::net::shutdown(dst, rustix::net::Shutdown::Write);
            if !grown && let Some(p) = pipe.take() {
                pipes::give_back(p);
            }
            return Ok(());
        }
        activity.touch();
        if downstream {
            activity.first_down();
        }
        // Pipe → socket, until the pipe is empty again.
        let mut left = n;
        while left > 0 {
            let m = dst
                .async_io(Interest::WRITABLE, || {
                    Ok(splice(pipe_r, None, dst, None, left, flags)?)
                })
                .await?;
            left -= m;
        }
        counter.increment(n as u64);
        activity.moved(downstream, n);
        activity.touch();
        moved += n as u64;
        if !grown && moved >= BULK_AFTER {
            grown = true;
            if let Ok(size) = rustix::pipe::fcntl_setpipe_size(pipe_w, BULK_PIPE) {
                chunk = size;
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
use copy as one_way;

/// One direction through a buffer in user space.
async fn copy(
    src: &TcpStream,
    dst: &TcpStream,
    counter: &Counter,
    activity: &Activity,
    downstream: bool,
) -> io::Result<()> {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        src.readable().await?;
        let n = match src.try_read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            activity.eof(downstream);
            let _ = rustix::net::shutdown(dst, rustix::net::Shutdown::Write);
            return Ok(());
        }
        activity.touch();
        if downstream {
            activity.first_down();
        }
        let mut off = 0;
        while off < n {
            dst.writable().await?;
            match dst.try_write(&buf[off..n]) {
                Ok(m) => off += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        counter.increment(n as u64);
        activity.moved(downstream, n);
        activity.touch();
    }
}
