//! The access log (`[log] access`, docs/logs.md): one line per HTTP request (written when its
//! response is done, [`crate::http::access`]), per TCP connection (at its close) and per
//! UDP flow (at its end) ([`stream`]), in the node's log format (text or JSON, [`line`]), all
//! through one writer to one sink. The data planes send it records; the writer formats them.
//!
//! The data path takes no lock and does no I/O for it. With the log on, a request, connection
//! or flow hands over a boxed [`Record`] of raw facts (numbers, the listener's shared config for
//! the names) through a bounded channel: a `try_send`, atomics only. A full channel drops the
//! line and counts it (`gtd_access_log_dropped_total{reason="queue_full"}`). One writer thread
//! per node formats the lines into a reusable buffer and writes each batch with one write,
//! pausing [`PAUSE`] after one that emptied the queue, so that under load lines gather instead
//! of waking the thread (and costing a request thread the wake-up) line by line; a batch cut at
//! [`BATCH_BYTES`] is followed at once. With the log off the data path tests an `Option` and
//! that is all.
//!
//! The sink (a file, stderr or stdout) is the writer's alone. Start and every reload open the
//! configured one ([`Sink::open`], off the runtime, so a bad path fails them with the file and
//! the `FILE:LINE:COL` of the key) and hand it over with [`AccessLog::install`], which returns
//! once the writer has taken it: a file renamed by logrotate before a SIGHUP is closed, and the
//! next line goes to a new one.

pub(crate) mod line;
pub(crate) mod stream;

use std::fs::File;
use std::io::{self, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use metrics::Counter;
use tokio::sync::{mpsc, oneshot};

use crate::telemetry::{self as m, Registry};
use crate::timers::Pace;
use gtd_core::config;
use gtd_core::sync::lock;

pub use line::LogFormat;

/// One line's facts, as a data plane hands them to the writer (boxed: the line is the only
/// thing the log allocates on the data path).
pub(crate) trait Record: Send {
    /// Appends the line, ending in a newline, to `out` in `f`'s format. `clock` is a (wall,
    /// monotonic) reading of one moment, to date the line from its own monotonic end.
    fn write(&self, f: &mut line::Formatter, out: &mut Vec<u8>, clock: (SystemTime, Instant));
}

/// Lines waiting for the writer at most; more are dropped and counted.
const QUEUE: usize = 8192;

/// How long the writer lets lines gather after writing a batch that emptied the queue.
const PAUSE: Duration = Duration::from_millis(10);

/// A batch is written once its text reaches this size (or the queue is empty).
const BATCH_BYTES: usize = 64 * 1024;

/// How long a reload or the end of a drain waits for the writer to take a new sink or write
/// what is queued.
const HANDOVER: Duration = Duration::from_secs(5);

/// Where the lines go.
pub(crate) enum Sink {
    Stderr,
    Stdout,
    File { file: File, path: PathBuf },
}

/// Why the access log cannot be opened or its writer started.
#[derive(Debug, thiserror::Error)]
pub enum AccessLogError {
    /// The file `access` names (the message is `FILE:LINE:COL: ...`, as `gtd check` says it).
    /// (Boxed: a node's errors stay small on their way up.)
    #[error(transparent)]
    Open(Box<config::ConfigError>),
    /// The writer's task.
    #[error("starting the access log writer: {0}")]
    Writer(io::Error),
}

impl Sink {
    /// Opens the sink `cfg` names (`None`: the log is off). A file is opened in append mode,
    /// created when missing; a failure names it and the `access` key, as `gtd check` would.
    pub(crate) fn open(cfg: &config::AccessLog) -> Result<Option<Sink>, AccessLogError> {
        Ok(Some(match cfg {
            config::AccessLog::Off => return Ok(None),
            config::AccessLog::Stderr => Sink::Stderr,
            config::AccessLog::Stdout => Sink::Stdout,
            config::AccessLog::File(f) => match gtd_core::files::append(&f.path) {
                Ok(file) => Sink::File {
                    file,
                    path: f.path.clone(),
                },
                Err(e) => {
                    let e = f.error(format_args!("cannot be opened: {e}"));
                    return Err(AccessLogError::Open(Box::new(e)));
                }
            },
        }))
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            // The lock keeps the node's other log lines from landing inside a batch.
            Sink::Stderr => io::stderr().lock().write_all(bytes),
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()
            }
            Sink::File { file, .. } => file.write_all(bytes),
        }
    }

    fn name(&self) -> String {
        match self {
            Sink::Stderr => "stderr".to_owned(),
            Sink::Stdout => "stdout".to_owned(),
            Sink::File { path, .. } => path.display().to_string(),
        }
    }
}

/// A node's access log: its writer thread, started the first time a config turns the log on
/// and kept from then on (a reload that turns it off closes the sink).
pub(crate) struct AccessLog {
    format: LogFormat,
    registry: Registry,
    handle: Mutex<Option<Handle>>,
}

impl AccessLog {
    /// No writer yet; lines will be written in `format`, drops counted in `registry`.
    pub(crate) fn new(format: LogFormat, registry: &Registry) -> AccessLog {
        AccessLog {
            format,
            registry: registry.clone(),
            handle: Mutex::new(None),
        }
    }

    /// Makes `sink` where lines go from now on (`None`: nowhere, the log is off), once the
    /// writer has taken it (or [`HANDOVER`] passed); the handle requests send their lines
    /// with, `None` when off.
    /// (The handle goes into the snapshot.)
    pub(crate) async fn install(
        &self,
        sink: Option<Sink>,
    ) -> Result<Option<Handle>, AccessLogError> {
        let on = sink.is_some();
        let handle = {
            let mut slot = lock(&self.handle);
            match &*slot {
                Some(h) => h.clone(),
                None if !on => return Ok(None),
                None => {
                    let h = Handle::start(self.format, &self.registry)
                        .map_err(AccessLogError::Writer)?;
                    *slot = Some(h.clone());
                    h
                }
            }
        };
        *lock(&handle.0.shared.next_sink) = Some(sink);
        handle.flush().await;
        Ok(on.then_some(handle))
    }

    /// Waits (at most [`HANDOVER`]) until every line queued so far is written: at the end of a
    /// drain, before the process exits.
    pub(crate) async fn flush(&self) {
        let handle = lock(&self.handle).clone();
        if let Some(h) = handle {
            h.flush().await;
        }
    }
}

/// What requests, connections and flows send their lines with (cheap to clone: one reference
/// count).
#[derive(Clone)]
pub(crate) struct Handle(Arc<Ends>);

/// The channel's sending end, and what the writer shares.
struct Ends {
    tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").finish_non_exhaustive()
    }
}

/// What the writer thread and the handles share.
struct Shared {
    /// A sink to switch to (`Some(None)`: close the one in use), taken by the writer before
    /// its next write.
    next_sink: Mutex<Option<Option<Sink>>>,
    /// Lines dropped because the queue was full; the writer warns about new ones.
    dropped: AtomicU64,
    dropped_full: Counter,
    dropped_write: Counter,
}

enum Msg {
    Line(Box<dyn Record>),
    /// Answered once everything queued before it is written and any new sink taken.
    Flush(oneshot::Sender<()>),
}

impl Handle {
    fn start(format: LogFormat, registry: &Registry) -> io::Result<Handle> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            next_sink: Mutex::new(None),
            dropped: AtomicU64::new(0),
            dropped_full: registry.counter(&m::ACCESS_LOG_DROPPED_TOTAL, &["queue_full"]),
            dropped_write: registry.counter(&m::ACCESS_LOG_DROPPED_TOTAL, &["write_error"]),
        });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("gtd-access-log".to_owned())
            .spawn(move || write_lines(rx, &writer, format))?;
        Ok(Handle(Arc::new(Ends { tx, shared })))
    }

    /// Hands a finished line to the writer, or drops and counts it when the queue is full.
    pub(crate) fn send(&self, entry: Box<dyn Record>) {
        let Ends { tx, shared } = &*self.0;
        if tx.try_send(Msg::Line(entry)).is_err() {
            shared.dropped_full.increment(1);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        let _ = tokio::time::timeout(HANDOVER, async {
            if self.0.tx.send(Msg::Flush(ack)).await.is_ok() {
                let _ = done.await;
            }
        })
        .await;
    }
}

/// The writer thread: lines in batches, each formatted into one buffer and written at once.
fn write_lines(mut rx: mpsc::Receiver<Msg>, shared: &Shared, format: LogFormat) {
    let mut sink: Option<Sink> = None;
    let mut text: Vec<u8> = Vec::with_capacity(BATCH_BYTES + 4096);
    let mut acks = Vec::new();
    let mut reported = 0;
    let mut lines_of = line::Formatter::new(format);
    static WRITE_FAILED: Pace = Pace::new();
    static DROPPED: Pace = Pace::new();
    while let Some(first) = rx.blocking_recv() {
        // One clock read per batch dates every line in it (each entry knows when it ended on
        // the monotonic clock).
        let clock = (SystemTime::now(), Instant::now());
        let mut lines = 0_u64;
        // Whether the queue was found empty (else the batch was cut at BATCH_BYTES, and the
        // next one follows at once).
        let mut drained = false;
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Line(entry) => {
                    entry.write(&mut lines_of, &mut text, clock);
                    lines += 1;
                }
                Msg::Flush(ack) => acks.push(ack),
            }
            if text.len() < BATCH_BYTES {
                next = rx.try_recv().ok();
                drained = next.is_none();
            }
        }
        if let Some(new) = lock(&shared.next_sink).take() {
            sink = new;
        }
        if !text.is_empty()
            && let Some(s) = sink.as_mut()
            && let Err(e) = s.write(&text)
        {
            shared.dropped_write.increment(lines);
            if WRITE_FAILED.due() {
                tracing::warn!(file = %s.name(), error = %e, lines, "access log lines lost: the write failed");
            }
        }
        text.clear();
        text.shrink_to(BATCH_BYTES + 4096);
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
        let dropped = shared.dropped.load(Ordering::Relaxed);
        if dropped > reported && DROPPED.due() {
            tracing::warn!(
                dropped = dropped - reported,
                "access log lines dropped: the writer fell behind (gtd_access_log_dropped_total)"
            );
            reported = dropped;
        }
        if lines > 0 && drained {
            std::thread::sleep(PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    impl Record for Nothing {
        fn write(&self, _: &mut line::Formatter, _: &mut Vec<u8>, _: (SystemTime, Instant)) {}
    }

    /// A writer that has not drained its queue: the lines past it are dropped and counted, the
    /// request never waits.
    #[test]
    fn a_full_queue_drops_and_counts_lines() {
        let registry = Registry::new();
        let (tx, rx) = mpsc::channel(2);
        let shared = Arc::new(Shared {
            next_sink: Mutex::new(None),
            dropped: AtomicU64::new(0),
            dropped_full: registry.counter(&m::ACCESS_LOG_DROPPED_TOTAL, &["queue_full"]),
            dropped_write: registry.counter(&m::ACCESS_LOG_DROPPED_TOTAL, &["write_error"]),
        });
        let log = Handle(Arc::new(Ends { tx, shared }));
        for _ in 0..5 {
            log.send(Box::new(Nothing));
        }
        assert_eq!(log.0.shared.dropped.load(Ordering::Relaxed), 3);
        let text = registry.render();
        assert!(
            text.contains("gtd_access_log_dropped_total{reason=\"queue_full\"} 3"),
            "{text}"
        );
        drop(rx);
    }

    /// A file the node cannot open (here a directory, which `gtd check` would have refused
    /// first) fails the start or reload at the `access` key.
    #[test]
    fn a_file_that_does_not_open_is_named_at_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config::AccessLog::File(config::AccessFile {
            path: dir.path().to_owned(),
            config: "gtd.toml".into(),
            line: 7,
            column: 10,
        });
        let e = Sink::open(&cfg)
            .err()
            .expect("a directory does not open")
            .to_string();
        let want = format!(
            "gtd.toml:7:10: log: access log file {:?} cannot be opened: ",
            dir.path().display().to_string()
        );
        assert!(e.starts_with(&want), "{e}");
    }
}
