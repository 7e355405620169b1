//! Inactivity timeouts without a clock read per I/O: a connection counts its moves (reads and
//! writes that carried bytes) and a watchdog compares the count once per period.
//!
//! Used for the client side of HTTP connections (`idle_timeout`), endpoint connections in use
//! (`upstream_timeout`) and upgraded tunnels (`idle_timeout`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Ends once no byte has moved during a whole `period` (so between one and two periods after
/// the last one) while nothing was `busy` (requests being served count as moving).
pub(crate) async fn quiet(moves: &AtomicU64, period: Duration, busy: Option<&AtomicU32>) {
    let mut seen = moves.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(period).await;
        let now = moves.load(Ordering::Relaxed);
        let serving = busy.is_some_and(|b| b.load(Ordering::Relaxed) > 0);
        if now == seen && !serving {
            return;
        }
        seen = now;
    }
}

/// Counts one request being served in `busy` until dropped.
pub(crate) struct Busy<'a>(&'a AtomicU32);

impl Busy<'_> {
    pub(crate) fn new(busy: &AtomicU32) -> Busy<'_> {
        busy.fetch_add(1, Ordering::Relaxed);
        Busy(busy)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection that counts its moves (reads and writes that carried bytes) for an inactivity
/// timeout, and optionally the bytes read from it. One relaxed atomic add per move: no clock.
pub(crate) struct Moving<T> {
    io: T,
    /// The count of moves, shared with whoever watches it.
    pub(crate) moves: Arc<AtomicU64>,
    read_bytes: Option<Counter>,
}

impl<T> Moving<T> {
    pub(crate) fn new(io: T, read_bytes: Option<Counter>) -> Moving<T> {
        Moving {
            io,
            moves: Arc::default(),
            read_bytes,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Moving<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            this.moves.fetch_add(1, Ordering::Relaxed);
            if let Some(bytes) = &this.read_bytes {
                bytes.increment(n as u64);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Moving<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.moves.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.moves.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
