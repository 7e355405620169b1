//! The node's log lines leave through a thread of their own, so that a stderr nobody reads
//! cannot stop the node.
//!
//! `tracing`'s writer was stderr itself: every log line was a `write` from the runtime thread
//! that logged it. When stderr is a pipe whose reader stopped reading (a stuck log shipper, a
//! `gtd run 2>&1 | slow-filter`), the pipe fills (64 KiB), the next `write` blocks, and with
//! it the runtime's workers one after the other: the node stopped accepting, answering its
//! admin API and checking, and SIGTERM waited for the pipe. Now a line is handed to a bounded
//! queue, without waiting; a thread writes the queue to stderr, and a line that finds the queue
//! full is dropped and counted. The count is logged (a warning, in the log's format: "N log
//! lines dropped") as soon as stderr takes lines again. When `gtd run` returns, and before a
//! panic's message, what is queued is written first, for at most [`FLUSH_LIMIT`].

use std::io::{self, Write};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

/// Lines queued at most: about a second of a node logging every connection at debug.
const QUEUE: usize = 8192;

/// How long `gtd run` waits at its end for the queued lines to be written.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// Lines dropped since the last report, queued and written since start.
static DROPPED: AtomicU64 = AtomicU64::new(0);
static QUEUED: AtomicU64 = AtomicU64::new(0);
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// The queue's sending end, for `tracing_subscriber::fmt().with_writer(Stderr::start())`.
#[derive(Clone)]
pub(crate) struct Stderr(SyncSender<Vec<u8>>);

impl Stderr {
    /// Starts the writing thread (once) and returns the writer.
    pub(crate) fn start() -> Stderr {
        static SENDER: OnceLock<SyncSender<Vec<u8>>> = OnceLock::new();
        Stderr(
            SENDER
                .get_or_init(|| {
                    let (tx, rx) = sync_channel(QUEUE);
                    std::thread::Builder::new()
                        .name("gtd-log".to_owned())
                        .spawn(move || write_out(&rx))
                        .expect("the log thread starts");
                    // A panic's message (written to stderr directly) after the lines logged
                    // before it.
                    let report = std::panic::take_hook();
                    std::panic::set_hook(Box::new(move |info| {
                        flush();
                        report(info);
                    }));
                    tx
                })
                .clone(),
        )
    }
}

/// The writing thread: each line to stderr, with the count of dropped lines once there are.
fn write_out(rx: &Receiver<Vec<u8>>) {
    let mut err = io::stderr();
    while let Ok(line) = rx.recv() {
        let _ = err.write_all(&line);
        WRITTEN.fetch_add(1, Ordering::Release);
        report_dropped();
    }
}

/// Logs how many lines were dropped since the last report, if any: through the log itself,
/// so that it has the log's format (one JSON object with `--log-format json`). Never blocks:
/// a report that finds the queue full is dropped and counted like any line.
fn report_dropped() {
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            target: "gtd",
            dropped,
            "log lines dropped: stderr was not read as fast as the node wrote"
        );
    }
}

/// One log line, sent on drop.
pub(crate) struct Line<'a> {
    buf: Vec<u8>,
    to: &'a SyncSender<Vec<u8>>,
}

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        // Counted before it is sent, so that `flush` never sees it written and not queued.
        QUEUED.fetch_add(1, Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.to.try_send(std::mem::take(&mut self.buf))
        {
            QUEUED.fetch_sub(1, Ordering::Relaxed);
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Stderr {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            buf: Vec::with_capacity(256),
            to: &self.0,
        }
    }
}

/// Writes what is queued (at most [`FLUSH_LIMIT`]: a stderr that is not read must not keep the
/// process from ending), so that a line printed next comes after them.
pub(crate) fn flush() {
    report_dropped();
    let until = Instant::now() + FLUSH_LIMIT;
    while WRITTEN.load(Ordering::Acquire) < QUEUED.load(Ordering::Relaxed) && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// [`flush`] when dropped: held by `gtd run` for every way it returns.
pub(crate) struct Flush;

impl Drop for Flush {
    fn drop(&mut self) {
        flush();
    }
}
