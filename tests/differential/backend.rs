//! The recording endpoint: one port per proxy, each recording every request that arrives there
//! (normalised, in order) and answering each with a fixed `200 ok`. Bytes that do not make a
//! whole request by the end of a case are recorded as well (`wire::unfinished`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::wire::{Parsed, parse_request, unfinished};

use gtd::sync::lock;

#[derive(Default)]
struct Log {
    /// Whole requests, in arrival order.
    requests: Vec<String>,
    /// What each open connection holds that is not a whole request yet.
    pending: HashMap<u64, Vec<u8>>,
}

/// One port of the endpoint.
pub(crate) struct Recorder {
    pub(crate) addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    task: JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    pub(crate) async fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Log::default()));
        let ids = Arc::new(AtomicU64::new(0));
        let task = {
            let log = log.clone();
            tokio::spawn(async move {
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let Ok((s, _)) = listener.accept().await else {
                        continue;
                    };
                    let id = ids.fetch_add(1, Ordering::Relaxed);
                    connections.spawn(serve(s, id, log.clone()));
                    while connections.try_join_next().is_some() {}
                }
            })
        };
        Recorder { addr, log, task }
    }

    /// What arrived since the last call (whole requests, then what is pending on each
    /// connection, unfinished); pending bytes are forgotten, so the next case starts clean.
    pub(crate) fn take(&self) -> Vec<String> {
        let mut log = lock(&self.log);
        let mut out = std::mem::take(&mut log.requests);
        let mut ids: Vec<u64> = log.pending.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let bytes = log.pending.get_mut(&id).unwrap();
            if !bytes.is_empty() {
                out.push(unfinished(bytes));
                bytes.clear();
            }
        }
        out
    }
}

/// One connection from a proxy: records and answers each request; a request that is not HTTP
/// is recorded as unparsable and the connection closed.
async fn serve(mut s: tokio::net::TcpStream, id: u64, log: Arc<Mutex<Log>>) {
    let mut chunk = vec![0_u8; 65536];
    let mut continued = false;
    loop {
        let n = s.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            let mut log = lock(&log);
            if let Some(rest) = log.pending.remove(&id)
                && !rest.is_empty()
            {
                log.requests.push(unfinished(&rest));
            }
            return;
        }
        let mut answers = Vec::new();
        let mut close = false;
        {
            let mut log = lock(&log);
            let Log { requests, pending } = &mut *log;
            let buf = pending.entry(id).or_default();
            buf.extend_from_slice(&chunk[..n]);
            loop {
                match parse_request(buf) {
                    Parsed::Incomplete { expects_continue } => {
                        if expects_continue && !continued {
                            continued = true;
                            answers.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                        }
                        break;
                    }
                    Parsed::Request {
                        text,
                        len,
                        close: last,
                        head,
                    } => {
                        requests.push(text);
                        buf.drain(..len);
                        continued = false;
                        answers.extend_from_slice(if head {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n".as_slice()
                        } else {
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".as_slice()
                        });
                        if last {
                            close = true;
                            break;
                        }
                    }
                    Parsed::Invalid => {
                        requests.push(unfinished(buf));
                        buf.clear();
                        close = true;
                        break;
                    }
                }
            }
            if close {
                pending.remove(&id);
            }
        }
        if !answers.is_empty() && s.write_all(&answers).await.is_err() {
            close = true;
        }
        if close {
            let _ = s.shutdown().await;
            return;
        }
    }
}
