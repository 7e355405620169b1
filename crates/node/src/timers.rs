//! Timeouts that cost nothing per request or per I/O in the common case.
//!
//! - Inactivity without a clock read per I/O: a connection counts its moves (reads and writes
//!   that carried bytes) and a watchdog compares the count once per period. Used for the
//!   client side of HTTP connections (`idle_timeout`), hyper's endpoint connections in use
//!   (`upstream_timeout`) and upgraded tunnels (`idle_timeout`).
//! - [`Watched`]: a connection's future and its watchdogs (timers, the node's stop), the
//!   watchdogs polled only when they were woken.
//! - [`Deadline`]: one timer per connection for deadlines that move forward request after
//!   request (`upstream_timeout` on gtd's own client, `header_timeout` through [`HeadTimer`]),
//!   registered once instead of once per request.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use metrics::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use gtd_core::sync::lock;

/// The process's fixed point on the monotonic clock, for instants kept in atomics as offsets
/// from it (set by the first call).
pub(crate) fn origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Paces a warning that could otherwise repeat for every connection or request: at most one
/// every 10 s (the first at once), on the monotonic clock.
#[derive(Debug)]
pub(crate) struct Pace {
    /// Seconds since [`Pace::due`] first ran, plus 10, at the last warning (0: none yet).
    warned_at: AtomicU64,
}

impl Pace {
    pub(crate) const fn new() -> Pace {
        Pace {
            warned_at: AtomicU64::new(0),
        }
    }

    /// True when a warning may be logged now (then not again for 10 s).
    pub(crate) fn due(&self) -> bool {
        let now = origin().elapsed().as_secs() + 10;
        let last = self.warned_at.load(Ordering::Relaxed);
        now >= last + 10
            && self
                .warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

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

/// What a write adds to a [`Moving`] count (a read adds 1): any change of the count means
/// something moved, and its low 32 bits count the reads alone (see [`reads`]).
const WRITE: u64 = 1 << 32;

/// The reads in a [`Moving`] count (modulo 2^32: only compared for change).
pub(crate) fn reads(moves: u64) -> u32 {
    moves as u32
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

    /// Counting into `moves`, which someone else holds too.
    pub(crate) fn sharing(io: T, moves: Arc<AtomicU64>) -> Moving<T> {
        Moving {
            io,
            moves,
            read_bytes: None,
        }
    }

    /// The connection inside.
    pub(crate) fn get_ref(&self) -> &T {
        &self.io
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
            this.moves.fetch_add(WRITE, Ordering::Relaxed);
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
            this.moves.fetch_add(WRITE, Ordering::Relaxed);
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

/// Which of [`Watched`]'s two futures ended first.
pub(crate) enum First<A, B> {
    Main(A),
    Watch(B),
}

/// Runs `main` until it ends or `watch` does, like a two-branch `tokio::select!`, but polls
/// `watch` only when `watch` itself was woken (and once at the start). A connection's task is
/// woken a few times per request, each time for `main`; `select!` would also poll the idle
/// timer and the node's stop signal every time (about 1,500 instructions per request,
/// counted with benches/proxy/instructions.sh).
pub(crate) struct Watched<'a, M: ?Sized, W: ?Sized> {
    main: Pin<&'a mut M>,
    watch: Pin<&'a mut W>,
    flag: Arc<WatchFlag>,
    /// Wakes the task through `flag`, marking `watch` as due.
    waker: Waker,
}

/// Whether the watch future was woken, and the task to wake then.
struct WatchFlag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for WatchFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = lock(&self.task);
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

impl<'a, M: Future + ?Sized, W: Future + ?Sized> Watched<'a, M, W> {
    pub(crate) fn new(main: Pin<&'a mut M>, watch: Pin<&'a mut W>) -> Self {
        let flag = Arc::new(WatchFlag {
            woken: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        let waker = Waker::from(Arc::clone(&flag));
        Watched {
            main,
            watch,
            flag,
            waker,
        }
    }
}

impl<M: Future + ?Sized, W: Future + ?Sized> Future for Watched<'_, M, W> {
    type Output = First<M::Output, W::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(v) = this.main.as_mut().poll(cx) {
            return Poll::Ready(First::Main(v));
        }
        {
            let mut task = lock(&this.flag.task);
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if this.flag.woken.swap(false, Ordering::Acquire)
            && let Poll::Ready(v) = this
                .watch
                .as_mut()
                .poll(&mut Context::from_waker(&this.waker))
        {
            return Poll::Ready(First::Watch(v));
        }
        Poll::Pending
    }
}

/// A connection's one timer for a deadline that moves forward from one request to the next.
/// It is registered once and left running: when it fires before the deadline now asked for,
/// it is set again to that one. A request served in time thus costs no timer registration
/// (nor removal); a busy connection re-arms about once per timeout period.
#[derive(Default)]
pub(crate) struct Deadline {
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline {
    /// Ready once `deadline` has passed (the task is woken then, or earlier to check).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        let deadline = tokio::time::Instant::from_std(deadline);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
        while timer.as_mut().poll(cx).is_ready() {
            if tokio::time::Instant::now() >= deadline {
                return Poll::Ready(());
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    }
}

/// hyper's timer for one client connection, for HTTP/1's `header_read_timeout`. hyper asks for
/// a sleep of `header_timeout` each time it starts waiting for a request head, also while a
/// kept-alive connection waits for its next request; every sleep polls the connection's one
/// [`Deadline`].
///
/// The connection's first head must be in within `header_timeout` of the connection (a client
/// that connects and sends nothing is cut off). For later heads the wait before the first byte
/// is keep-alive rest, bounded by `idle_timeout` as nginx's `keepalive_timeout` bounds it; once
/// bytes of the head arrive it gets `header_timeout` more. While the connection rests, the
/// sleep looks at its read count four times per `header_timeout`, so a stalled head is cut
/// between 1 and 1.25 × `header_timeout` after it began (never before), and a resting
/// connection at `idle_timeout`.
#[derive(Clone)]
pub(crate) struct HeadTimer(Arc<HeadState>);

struct HeadState {
    deadline: Mutex<Deadline>,
    /// The connection's [`Moving`] count.
    moves: Arc<AtomicU64>,
    /// `header_timeout`: hyper asks for sleeps of this length.
    header: Duration,
    /// How often a resting connection's read count is looked at: a quarter of `header`.
    look: Duration,
    idle: Duration,
    /// A head has been waited for on this connection before.
    waited: AtomicBool,
}

impl HeadTimer {
    /// The timer of a connection whose request heads are read from now on; `waited` when a
    /// head has been waited for on it before (a parked connection served again).
    pub(crate) fn new(
        moves: Arc<AtomicU64>,
        header: Duration,
        idle: Duration,
        waited: bool,
    ) -> HeadTimer {
        HeadTimer(Arc::new(HeadState {
            deadline: Mutex::default(),
            moves,
            header,
            look: (header / 4).max(Duration::from_millis(1)),
            idle,
            waited: AtomicBool::new(waited),
        }))
    }
}

struct HeadSleep {
    state: Arc<HeadState>,
    deadline: Instant,
    /// For a head after the first while none of it has arrived: the read count when the wait
    /// began and the end of the rest allowed.
    rest: Option<(u32, Instant)>,
}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        let state = &self.0;
        let later = state.waited.swap(true, Ordering::Relaxed);
        // hyper's deadline is its clock reading plus header_timeout: the rest ends idle_timeout
        // after that same reading, without reading the clock again here.
        let began = deadline.checked_sub(state.header).unwrap_or(deadline);
        let rest = later.then(|| {
            (
                reads(state.moves.load(Ordering::Relaxed)),
                began + state.idle,
            )
        });
        Box::pin(HeadSleep {
            state: Arc::clone(state),
            // At rest, the first look comes a quarter period in; an idle_timeout shorter than
            // that ends the rest first.
            deadline: rest.map_or(deadline, |(_, until)| (began + state.look).min(until)),
            rest,
        })
    }
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            {
                let mut timer = lock(&this.state.deadline);
                if timer.poll(cx, this.deadline).is_pending() {
                    return Poll::Pending;
                }
            }
            let Some((then, rest_until)) = this.rest else {
                return Poll::Ready(());
            };
            // tokio's clock (the same as std's outside paused tests), as `Deadline` uses it.
            let now = tokio::time::Instant::now().into_std();
            if reads(this.state.moves.load(Ordering::Relaxed)) == then {
                // Nothing of the next request yet: a kept-alive connection at rest.
                if now >= rest_until {
                    return Poll::Ready(());
                }
                // Looks stay on their grid however late this poll came (a past deadline is
                // ready at once and the loop catches up).
                this.deadline = (this.deadline + this.state.look).min(rest_until);
            } else {
                // The head began within the last quarter period: a whole header_timeout from
                // now, then no more.
                this.rest = None;
                this.deadline = now + this.state.header;
            }
        }
    }
}

impl hyper::rt::Sleep for HeadSleep {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `d` once for `deadline` (a std instant on tokio's clock).
    fn ready(d: &mut Deadline, deadline: tokio::time::Instant) -> bool {
        let waker = std::task::Waker::noop();
        d.poll(&mut Context::from_waker(waker), deadline.into_std())
            .is_ready()
    }

    #[tokio::test]
    async fn the_watch_is_polled_only_when_it_was_woken() {
        let (mut main_polls, mut watch_polls) = (0, 0);
        // A main future that wakes itself nine times, then ends.
        let main = std::future::poll_fn(|cx| {
            main_polls += 1;
            if main_polls < 10 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready("main")
            }
        });
        let watch = std::future::poll_fn(|_| {
            watch_polls += 1;
            Poll::<()>::Pending
        });
        tokio::pin!(main, watch);
        let first = Watched::new(main.as_mut(), watch.as_mut()).await;
        assert!(matches!(first, First::Main("main")));
        assert_eq!(
            (main_polls, watch_polls),
            (10, 1),
            "polled once, at the start"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_fires_ends_the_wait() {
        let main = std::future::pending::<()>();
        let watch = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            "watch"
        };
        tokio::pin!(main, watch);
        let first = Watched::new(main.as_mut(), watch.as_mut()).await;
        assert!(matches!(first, First::Watch("watch")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_is_kept_on_one_timer_moved_forward_when_it_fires_early() {
        let start = tokio::time::Instant::now();
        let mut d = Deadline::default();
        let first = start + Duration::from_secs(1);
        assert!(!ready(&mut d, first));
        // A later deadline leaves the timer where it was...
        tokio::time::advance(Duration::from_millis(500)).await;
        let second = start + Duration::from_millis(1500);
        assert!(!ready(&mut d, second));
        // ...which fires at the first deadline: not yet the second one, so it waits on.
        tokio::time::advance(Duration::from_millis(700)).await;
        assert!(!ready(&mut d, second));
        assert_eq!(d.timer.as_ref().map(|t| t.deadline()), Some(second));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(ready(&mut d, second));
        // An earlier deadline than the timer's moves the timer back.
        let third = tokio::time::Instant::now() + Duration::from_secs(10);
        assert!(!ready(&mut d, third));
        let sooner = tokio::time::Instant::now() + Duration::from_secs(1);
        assert!(!ready(&mut d, sooner));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(ready(&mut d, sooner));
    }

    /// Polls a sleep once.
    fn sleep_ready(sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>) -> bool {
        let waker = std::task::Waker::noop();
        sleep
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn a_resting_connection_gets_idle_timeout_a_started_head_header_timeout() {
        use hyper::rt::Timer as _;
        let moves = Arc::new(AtomicU64::new(0));
        let (header, idle) = (Duration::from_secs(1), Duration::from_secs(5));
        let timer = HeadTimer::new(Arc::clone(&moves), header, idle, false);
        let now = || tokio::time::Instant::now().into_std();
        // Polls `sleep` every 100 ms (as its task would be woken) while `during` runs each
        // step (t in ms since the start); the time it was first ready at.
        let ready_at = async |sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, during: &dyn Fn(u64)| {
            for t in (0..=10_000).step_by(100) {
                during(t);
                if sleep_ready(sleep) {
                    return t;
                }
                tokio::time::advance(Duration::from_millis(100)).await;
            }
            panic!("never ready");
        };

        // The connection's first head: header_timeout from the start, bytes or not.
        let mut first = timer.sleep_until(now() + header);
        let add_read = |t| {
            if t == 300 {
                moves.fetch_add(1, Ordering::Relaxed);
            }
        };
        assert_eq!(ready_at(&mut first, &add_read).await, 1000);

        // A later head, nothing of it arriving: rest until idle_timeout (writes do not count).
        let mut rest = timer.sleep_until(now() + header);
        let writes = |_| {
            moves.fetch_add(WRITE, Ordering::Relaxed);
        };
        assert_eq!(ready_at(&mut rest, &writes).await, 5000);

        // A later head whose first bytes come at 2.5 s and stall: seen at the look at 2.5 s,
        // cut header_timeout later.
        let mut stalled = timer.sleep_until(now() + header);
        let late_read = |t| {
            if t == 2500 {
                moves.fetch_add(1, Ordering::Relaxed);
            }
        };
        assert_eq!(ready_at(&mut stalled, &late_read).await, 3500);
        // Bytes between two looks (at 2.6 s): seen at 2.75 s, cut at 3.75 s — between 1 and
        // 1.25 × header_timeout after they came.
        let mut between = timer.sleep_until(now() + header);
        let odd_read = |t| {
            if t == 2600 {
                moves.fetch_add(1, Ordering::Relaxed);
            }
        };
        let t = ready_at(&mut between, &odd_read).await;
        assert!((3600..=3900).contains(&t), "{t}");

        // An idle_timeout shorter than header_timeout ends the rest first; a timer made for a
        // connection that has waited for a head before (a parked one served again) starts
        // with a rest.
        let short = HeadTimer::new(
            Arc::clone(&moves),
            Duration::from_secs(5),
            Duration::from_secs(1),
            true,
        );
        let mut rest = short.sleep_until(now() + Duration::from_secs(5));
        assert_eq!(ready_at(&mut rest, &|_| ()).await, 1000);
    }
}
