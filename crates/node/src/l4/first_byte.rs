//! `first_byte_timeout` on TCP listeners (docs/design.md §5): an endpoint that accepts the
//! connection but sends nothing in time is a failed attempt, and the connection is tried on
//! another endpoint, as long as nothing has reached the client yet.
//!
//! The rule for protocols where the client speaks first: while an endpoint has not answered,
//! the client's bytes are forwarded to it and kept (up to [`MAX_KEPT`]; past that the client is
//! not read until the endpoint answers), and the next endpoint gets every kept byte, in order,
//! before anything new, as if it had been the first. A client that finished sending (FIN) is
//! finished for the next endpoint too. Once the endpoint's first byte arrives the relay takes
//! over and the kept bytes are dropped: from then on the client may have seen an answer, so the
//! connection belongs to that endpoint.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use metrics::Counter;
use tokio::net::TcpStream;

use crate::snapshot::ListenerState;
use gtd_core::config::ProxyProtocol;

use super::proxy_protocol;

/// Most client bytes kept for a retry while an endpoint has not answered.
pub(crate) const MAX_KEPT: usize = 64 * 1024;

/// The client's bytes an endpoint was sent before it answered.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    bytes: Vec<u8>,
    /// The client closed its sending side.
    finished: bool,
}

impl Kept {
    /// The client's bytes the endpoint that answered got before the relay began.
    pub(crate) fn sent(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// How the opening of one connected attempt went.
pub(crate) enum Opened {
    /// Ready to relay: the PROXY header is written, and the endpoint answered (or no
    /// `first_byte_timeout` is set); with the time its first byte took when it was waited for
    /// (`least_time`'s `first_byte`: the relay, starting after it, would see it at once).
    Ready(TcpStream, Option<Duration>),
    /// The endpoint sent nothing in time, closed or reset: a failed attempt, retried.
    Silent(String),
    /// The client went away: the connection ends.
    Gone,
    /// The PROXY header could not be written: the connection ends.
    Broken,
}

/// Opens a connected attempt of listener `l`: the PROXY header when configured, then, with
/// `first_byte_timeout`, the kept bytes replayed and the wait for the endpoint's first byte.
pub(crate) async fn open(
    l: &ListenerState,
    client: &TcpStream,
    upstream: TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    kept: &mut Kept,
) -> Opened {
    let _ = upstream.set_nodelay(true);
    if l.cfg.proxy_protocol == Some(ProxyProtocol::V2) {
        let header = proxy_protocol::v2_header(peer, local.unwrap_or(peer));
        if let Err(e) = write_all(&upstream, &header).await {
            tracing::debug!(error = %e, "writing PROXY header failed");
            return Opened::Broken;
        }
    }
    let Some(limit) = l.cfg.first_byte_timeout else {
        return Opened::Ready(upstream, None);
    };
    let start = std::time::Instant::now();
    match wait(client, &upstream, kept, limit, &l.metrics.bytes_up).await {
        Waited::Spoke => Opened::Ready(upstream, Some(start.elapsed())),
        Waited::Silent(why) => Opened::Silent(why),
        Waited::ClientGone => Opened::Gone,
    }
}

enum Waited {
    Spoke,
    Silent(String),
    ClientGone,
}

/// Replays `kept` to `upstream`, then forwards (and keeps) the client's bytes until the
/// endpoint's first byte, its end, or `limit`.
async fn wait(
    client: &TcpStream,
    upstream: &TcpStream,
    kept: &mut Kept,
    limit: Duration,
    up: &Counter,
) -> Waited {
    let deadline = tokio::time::Instant::now() + limit;
    let replay = async {
        write_all(upstream, &kept.bytes).await?;
        if kept.finished {
            let _ = rustix::net::shutdown(upstream, rustix::net::Shutdown::Write);
        }
        Ok::<_, io::Error>(())
    };
    match tokio::time::timeout_at(deadline, replay).await {
        Err(_) => return Waited::Silent(silent(limit)),
        Ok(Err(e)) => return Waited::Silent(format!("writing the client's first bytes: {e}")),
        Ok(Ok(())) => {}
    }
    let mut buf = vec![0_u8; 16 * 1024];
    let mut peeked = [0_u8; 1];
    loop {
        let reading = !kept.finished && kept.bytes.len() < MAX_KEPT;
        tokio::select! {
            p = upstream.peek(&mut peeked) => return match p {
                Ok(0) => Waited::Silent("closed before sending anything".to_owned()),
                Ok(_) => Waited::Spoke,
                Err(e) => Waited::Silent(format!("before sending anything: {e}")),
            },
            r = client.readable(), if reading => {
                if r.is_err() {
                    return Waited::ClientGone;
                }
                let room = MAX_KEPT - kept.bytes.len();
                let n = match client.try_read(&mut buf[..room.min(16 * 1024)]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(_) => return Waited::ClientGone,
                };
                if n == 0 {
                    kept.finished = true;
                    let _ = rustix::net::shutdown(upstream, rustix::net::Shutdown::Write);
                    continue;
                }
                kept.bytes.extend_from_slice(&buf[..n]);
                up.increment(n as u64);
                match tokio::time::timeout_at(deadline, write_all(upstream, &buf[..n])).await {
                    Err(_) => return Waited::Silent(silent(limit)),
                    Ok(Err(e)) => return Waited::Silent(format!("writing the client's bytes: {e}")),
                    Ok(Ok(())) => {}
                }
            },
            () = tokio::time::sleep_until(deadline) => return Waited::Silent(silent(limit)),
        }
    }
}

fn silent(limit: Duration) -> String {
    format!(
        "connected, but sent nothing within first_byte_timeout {}",
        gtd_core::config::format_duration(limit)
    )
}

/// Writes all of `bytes` to a stream shared with the relay (which takes `&TcpStream`).
async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
