//! Clients that never read (an attacker, or a thousand stalled phones): what the node keeps for
//! them is bounded. HTTP/2 clients that open every stream they may and advertise a window of
//! 2 GiB: hyper's default let each stream queue ~400 KiB for the client; a trial measured 17 MB
//! per such connection, 1.7 GB for 100. HTTP/1.1 clients: hyper's write buffer took up to 128
//! KiB of a body and gtd's reads up to 64 KiB more. The node runs as a child `gtd run`, so that
//! its resident memory is its own.

use crate::common::*;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Connections, and streams on each (the node's `max_concurrent_streams`).
const CONNECTIONS: usize = 6;
const STREAMS: usize = 100;
/// What the node may grow by per such connection. Measured (debug build): ~4.5 MB now, ~17 MB
/// with hyper's default send buffer.
const BOUND_PER_CONNECTION: u64 = 9 << 20;

/// An endpoint whose every answer is an endless chunked body (for at most two minutes).
async fn endless() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0_u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
                if s.write_all(head).await.is_err() {
                    return;
                }
                let mut chunk = b"10000\r\n".to_vec();
                chunk.extend(std::iter::repeat_n(b'x', 0x10000));
                chunk.extend_from_slice(b"\r\n");
                let until = Instant::now() + Duration::from_secs(120);
                while Instant::now() < until && s.write_all(&chunk).await.is_ok() {}
            });
        }
    });
    (addr, task)
}

/// An HTTP/2 frame: length, type, flags, stream, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Opens an HTTP/2 connection to `to` that says it can take 2 GiB, asks `STREAMS` GETs and then
/// reads nothing (its receive buffer kept small, so that the kernel holds little for it).
async fn never_reading(to: std::net::SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(to).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS: INITIAL_WINDOW_SIZE (4) = 2^31 - 1; then the connection's window to match.
    out.extend(frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
    out.extend(frame(0x8, 0, 0, &(0x7fff_ffff_u32 - 65_535).to_be_bytes()));
    // HEADERS, END_STREAM | END_HEADERS: :method GET, :scheme http, :path / (static table
    // 2, 6, 4), :authority x (literal, name index 1, not indexed).
    let block = [0x82, 0x86, 0x84, 0x01, 0x01, b'x'];
    for i in 0..STREAMS as u32 {
        out.extend(frame(0x1, 0x5, 2 * i + 1, &block));
    }
    s.write_all(&out).await.unwrap();
    s
}

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// A node (a child process) with one HTTP listener in front of `endpoint`: the node, its pid
/// and the listener's address, once it accepts.
async fn node_before(
    endpoint: std::net::SocketAddr,
) -> (Child, tempfile::TempDir, u32, std::net::SocketAddr) {
    let (port, admin_port) = (free_port(false), free_port(false));
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    let listeners = listener_on(
        port,
        "web",
        "http",
        &["cn-beijing"],
        "upstream_timeout = \"5m\"",
        &group("g", "cn-beijing", 100.0, "", &[(endpoint, "")]),
    );
    std::fs::write(&cfg, config_text(admin_port, &listeners)).unwrap();
    let node = Child(
        Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = node.0.id();
    let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(to).await.is_err() {
        assert!(Instant::now() < deadline, "the node did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (node, dir, pid, to)
}

/// Waits until node `pid` stops growing (its buffers full, the endpoints waiting on it; a
/// minute at most), and returns what it grew by since `before`.
async fn grown_until_steady(pid: u32, before: u64) -> u64 {
    let (mut last, mut steady_since) = (rss(pid), Instant::now());
    let deadline = Instant::now() + Duration::from_secs(60);
    while steady_since.elapsed() < Duration::from_secs(3) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = rss(pid);
        if now > last + (1 << 20) {
            (last, steady_since) = (now, Instant::now());
        }
    }
    rss(pid).saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_that_never_read_cost_a_bounded_amount_per_stream() {
    let (endpoint, _endpoint) = endless().await;
    let (_node, _dir, pid, to) = node_before(endpoint).await;
    let before = rss(pid);
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(never_reading(to).await);
    }
    let grown = grown_until_steady(pid, before).await;
    println!(
        "{CONNECTIONS} connections × {STREAMS} streams that never read: the node grew {} MiB ({} KiB a stream)",
        grown >> 20,
        (grown >> 10) / (CONNECTIONS * STREAMS) as u64
    );
    assert!(
        grown < CONNECTIONS as u64 * BOUND_PER_CONNECTION,
        "the node grew {} MiB for {CONNECTIONS} connections that never read",
        grown >> 20
    );
    drop(clients);
}

/// HTTP/1.1 clients that read slowly (8 KiB every 50 ms, far slower than the endpoint
/// writes), and what the node may grow by for each: measured as the growth from the first
/// `HTTP1_FIRST` clients to all `HTTP1_CLIENTS`, so that what the node sets up once (a
/// thread's allocator caches, the endpoint pool) does not count. Measured with this test's
/// debug build, whose futures are far larger than a release build's: 149 KiB each, 216 KiB
/// before a response body was paced (hyper's write buffer of up to 128 KiB, gtd's reads of
/// up to 64 KiB). A release build: 54 and 248 KiB (`benches/proxy/slow_readers.sh`).
const HTTP1_FIRST: usize = 30;
const HTTP1_CLIENTS: usize = 90;
const HTTP1_BOUND: u64 = 180 << 10;
/// What every slow reader must have received by the end: more than any socket buffers hold,
/// so a response held back for good (nobody waking it) fails the test.
const HTTP1_PROGRESS: u64 = 1 << 20;

/// A client that asks for the endless body and reads it 8 KiB every 50 ms until `stop`,
/// counting what it got into `got`.
async fn slow_reader(
    to: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    got: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(8192).unwrap();
    let mut s = socket.connect(to).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0_u8; 8192];
    while !stop.load(Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        match tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.fetch_add(n as u64, Relaxed),
            _ => return,
        };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_clients_that_read_slowly_cost_a_bounded_amount_each() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let (endpoint, _endpoint) = endless().await;
    let (_node, _dir, pid, to) = node_before(endpoint).await;
    let stop = Arc::new(AtomicBool::new(false));
    let got: Vec<Arc<AtomicU64>> = (0..HTTP1_CLIENTS).map(|_| Arc::default()).collect();
    let mut readers = tokio::task::JoinSet::new();
    for got in &got[..HTTP1_FIRST] {
        readers.spawn(slow_reader(to, Arc::clone(&stop), Arc::clone(got)));
    }
    // The node's resident size once the first readers are steady.
    let first = grown_until_steady(pid, 0).await;
    for got in &got[HTTP1_FIRST..] {
        readers.spawn(slow_reader(to, Arc::clone(&stop), Arc::clone(got)));
    }
    let more = (HTTP1_CLIENTS - HTTP1_FIRST) as u64;
    let grown = grown_until_steady(pid, first).await;
    println!(
        "{more} more HTTP/1.1 clients that read slowly: the node grew {} KiB ({} KiB each)",
        grown >> 10,
        (grown >> 10) / more
    );
    // Every reader keeps getting its body (a minute at most).
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.iter().any(|g| g.load(Relaxed) < HTTP1_PROGRESS) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Relaxed);
    let least = got.iter().map(|g| g.load(Relaxed)).min().unwrap_or(0);
    assert!(
        least >= HTTP1_PROGRESS,
        "a slow reader got only {least} bytes in a minute: its response stalled"
    );
    assert!(
        grown < more * HTTP1_BOUND,
        "the node grew {} KiB for {more} HTTP/1.1 clients that read slowly",
        grown >> 10
    );
    while readers.join_next().await.is_some() {}
}

/// Idle HTTP/2 connections, each after one request: what the node keeps for each, measured as
/// the growth from the first `IDLE_H2_FIRST` connections to all `IDLE_H2_CLIENTS`. The h2 crate
/// kept a 16 KiB write buffer, an 8 KiB read buffer and a 4 KiB HPACK scratch buffer for as long
/// as a connection lived, and its HPACK tables kept slices of the frames a header arrived in;
/// gtd's copy of it (vendor/h2) takes them when frames move and gives them back when the
/// connection waits. Measured with this test's debug build: 24 125 bytes each with h2 as
/// published, 6 062 with gtd's copy (release builds: 24.5 and 7.1 KB, `benches/proxy/cost.sh`).
const IDLE_H2_FIRST: usize = 50;
const IDLE_H2_CLIENTS: usize = 250;
const IDLE_H2_BOUND: u64 = 12 << 10;

/// An endpoint that answers every request `200 ok`, keeping its connections.
async fn ok_endpoint() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    socket_backend(|mut s| async move {
        let mut head = Vec::new();
        let mut buf = [0_u8; 2048];
        loop {
            while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                head.drain(..end + 4);
                let answer =
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
                if s.write_all(answer).await.is_err() {
                    return;
                }
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
}

/// Opens an h2c connection to `to`, asks one GET whose `:authority` and `user-agent` the
/// server's HPACK table indexes (literals with incremental indexing), reads the whole answer
/// (acknowledging the server's settings) and returns the connection, left open and idle.
async fn one_h2_exchange(to: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(to).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    // :method GET, :scheme http, :path / (static 2, 6, 4); :authority (name 1) and user-agent
    // (name 58) as literals with incremental indexing.
    let mut block = vec![0x82, 0x86, 0x84, 0x41, 9];
    block.extend_from_slice(b"localhost");
    block.extend_from_slice(&[0x40 | 58, 12]);
    block.extend_from_slice(b"idle-h2-test");
    out.extend(frame(0x1, 0x5, 1, &block));
    s.write_all(&out).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Whole frames in `buf`: acknowledge SETTINGS, stop at the end of stream 1.
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let stream = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
            buf.drain(..9 + len);
            if kind == 0x4 && flags & 0x1 == 0 {
                s.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap();
            }
            assert_ne!(kind, 0x7, "the node sent GOAWAY");
            if stream == 1 && (kind == 0x0 || kind == 0x1) && flags & 0x1 != 0 {
                return s;
            }
        }
        let n = tokio::time::timeout_at(deadline.into(), s.read(&mut chunk))
            .await
            .expect("the answer came within a minute")
            .unwrap();
        assert!(n > 0, "the node closed the connection before answering");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_hold_no_frame_buffers() {
    let (endpoint, _endpoint) = ok_endpoint().await;
    let (_node, _dir, pid, to) = node_before(endpoint).await;
    let mut clients = Vec::new();
    for _ in 0..IDLE_H2_FIRST {
        clients.push(one_h2_exchange(to).await);
    }
    let before = grown_until_steady(pid, 0).await;
    for _ in IDLE_H2_FIRST..IDLE_H2_CLIENTS {
        clients.push(one_h2_exchange(to).await);
    }
    let grown = grown_until_steady(pid, before).await;
    let each = grown / (IDLE_H2_CLIENTS - IDLE_H2_FIRST) as u64;
    println!("an idle HTTP/2 connection after one request: {each} bytes");
    assert!(
        each < IDLE_H2_BOUND,
        "each idle HTTP/2 connection holds {each} bytes (bound {IDLE_H2_BOUND})"
    );
    drop(clients);
}
