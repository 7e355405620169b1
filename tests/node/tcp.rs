//! TCP through the node: the split compared with `sim`, retries on a refused endpoint, no-route,
//! half-close, 1 GB relayed intact, the splice pipes growing under bulk both ways, PROXY v2.

use crate::common::*;
use crate::harness::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use gtd::sync::lock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_split_across_groups_and_endpoints_matches_sim() {
    let (a1, h1) = tcp_backend("bj-1").await;
    let (a2, h2) = tcp_backend("bj-2").await;
    let (a3, h3) = tcp_backend("sh-1").await;
    let (a4, h4) = tcp_backend("sh-2").await;
    let _b = Backends(vec![h1, h2, h3, h4]);
    let names: BTreeMap<SocketAddr, &str> =
        [(a1, "bj-1"), (a2, "bj-2"), (a3, "sh-1"), (a4, "sh-2")].into();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[
                group("beijing", "cn-beijing", 50.0, "", &[(a1, 3), (a2, 1)]),
                group("shanghai", "cn-shanghai", 50.0, "", &[(a3, 1), (a4, 1)]),
            ],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let (want_groups, want_endpoints) = sim_expectation(&cfg, "t");
    assert_eq!(want_groups["beijing"], 62.5);

    const N: usize = 5000;
    let counts = Arc::new(std::sync::Mutex::new(BTreeMap::<String, usize>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (counts, next) = (counts.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < N as u64 {
                let name = tcp_name(addr).await.expect("connection through gtd");
                *lock(&counts).entry(name).or_default() += 1;
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let counts = lock(&counts).clone();
    assert_eq!(counts.values().sum::<usize>(), N);
    // Stated tolerance: the rotation and round robin are deterministic, so each observed share
    // is within 0.5 points of sim's expectation (concurrency only reorders decisions).
    for (addr, name) in &names {
        let observed = *counts.get(*name).unwrap_or(&0) as f64 * 100.0 / N as f64;
        let expected = want_endpoints[&addr.to_string()];
        assert!(
            (observed - expected).abs() < 0.5,
            "{name}: observed {observed:.2}% expected {expected:.2}%"
        );
    }
    let bj = (counts["bj-1"] + counts["bj-2"]) as f64 * 100.0 / N as f64;
    assert!((bj - want_groups["beijing"]).abs() < 0.5, "beijing {bj}");
    assert_eq!(
        metric(&node, "gtd_connections_total", &["group=\"beijing\""]) as usize,
        counts["bj-1"] + counts["bj-2"]
    );
    // `/status` says what each endpoint served, the count the dashboard's observed share
    // grows from: here each connection it took.
    let (groups, endpoints) = served_in_status(&node, "t");
    for (addr, name) in &names {
        assert_eq!(endpoints[&addr.to_string()], counts[*name] as u64, "{name}");
    }
    assert_eq!(groups["beijing"], (counts["bj-1"] + counts["bj-2"]) as u64);
    assert_eq!(groups["shanghai"], (counts["sh-1"] + counts["sh-2"]) as u64);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_endpoint_is_retried_elsewhere() {
    let (alive, h) = tcp_backend("alive").await;
    let _b = Backends(vec![h]);
    let refusing = Refusing::new();
    let refused: SocketAddr = refusing.0;
    let (sh, h2) = tcp_backend("shanghai").await;
    let _b2 = Backends(vec![h2]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[
                group(
                    "beijing",
                    "cn-beijing",
                    100.0,
                    "",
                    &[(refused, 1), (alive, 1)],
                ),
                group("shanghai", "cn-shanghai", 100.0, "", &[(sh, 1)]),
            ],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    for _ in 0..20 {
        assert_eq!(tcp_name(addr).await.unwrap(), "alive");
    }
    assert!(
        metric(
            &node,
            "gtd_connect_failures_total",
            &[&format!("endpoint=\"{refused}\"")]
        ) >= 1.0
    );
    assert!(metric(&node, "gtd_retries_total", &[]) >= 1.0);

    // Now the whole group refuses: the retry crosses to the next group.
    let (_, body) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{alive}/disable"),
        None,
    );
    assert!(body.contains("\"enabled\": false"), "{body}");
    // With only the refused endpoint left the group stays "healthy" until marked; the attempt
    // fails over to shanghai either way.
    for _ in 0..5 {
        assert_eq!(tcp_name(addr).await.unwrap(), "shanghai");
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_closes_at_once_and_is_counted() {
    let (a, h) = tcp_backend("only").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(a, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    assert_eq!(tcp_name(addr).await.unwrap(), "only");
    let (status, _) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{a}/disable"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(crate::common::status(&node).listeners[0].mode, "no-route");
    assert!(tcp_name(addr).await.is_err(), "closed without a backend");
    until("no-route counted", || {
        metric(&node, "gtd_no_route_total", &[]) >= 1.0
    })
    .await;
    // Enabled again: traffic flows on the next decision.
    admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{a}/enable"),
        None,
    );
    assert_eq!(tcp_name(addr).await.unwrap(), "only");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_is_honoured() {
    let (a, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(a, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"hello half close").await.unwrap();
    s.shutdown().await.unwrap(); // our write half only
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    // The backend saw our EOF (it only says "bye" after it), yet its answer still reached us.
    assert_eq!(String::from_utf8(got).unwrap(), "echo\nhello half closebye");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gigabyte_is_relayed_intact() {
    // A sink that reads everything, then answers with the byte count and a checksum.
    let sink = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_addr = sink.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (mut s, _) = sink.accept().await.unwrap();
        let mut buf = vec![0_u8; 256 * 1024];
        let (mut total, mut sum) = (0_u64, Checksum::default());
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            sum.update(&buf[..n]);
            total += n as u64;
        }
        s.write_all(format!("{total} {}", sum.finish()).as_bytes())
            .await
            .unwrap();
    });
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(sink_addr, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    const TOTAL: u64 = 1 << 30;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A pattern that differs per offset, so a dropped or repeated chunk changes the checksum.
    let chunk: Vec<u8> = (0..(1 << 20))
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let (mut sent, mut sum) = (0_u64, Checksum::default());
    while sent < TOTAL {
        sum.update(&chunk);
        s.write_all(&chunk).await.unwrap();
        sent += chunk.len() as u64;
    }
    let sum = sum.finish();
    s.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(300), s.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, format!("{TOTAL} {sum}"));
    node.shutdown().await;
}

/// Sizes of the pipes this process holds open (the relay's splice pipes among them).
#[cfg(target_os = "linux")]
fn open_pipe_sizes() -> Vec<usize> {
    use rustix::fs::{Mode, OFlags, open};
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let path = entry.path();
        let is_pipe = std::fs::read_link(&path)
            .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"));
        if !is_pipe {
            continue;
        }
        // Reopening a pipe through /proc gives a new descriptor on the same pipe.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        if let Ok(fd) = open(&path, flags, Mode::empty())
            && let Ok(size) = rustix::pipe::fcntl_getpipe_size(&fd)
        {
            sizes.push(size);
        }
    }
    sizes
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_both_ways_grows_the_splice_pipes_and_stays_intact() {
    // An echo backend: both directions carry a few MiB at once, past the point where the relay
    // grows its pipes (1 MiB moved), and the stream must stay byte-exact around the growth.
    let (a, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &format!(
            "[[listener]]\nname = \"t\"\nprotocol = \"tcp\"\nport = {port}\nregions = [\"cn-beijing\"]\n{}",
            group("beijing", "cn-beijing", 100.0, "", &[(a, 1)]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    // 4 MiB + 13 bytes: not a multiple of any pipe or splice size.
    let data: Vec<u8> = (0..(4 << 20) + 13)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut expected = b"echo\n".to_vec();
    expected.extend_from_slice(&data);
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = vec![0_u8; 64 * 1024];
        // Read the whole echo back while the connection is still open in both directions.
        while got.len() < expected.len() {
            let n = rd.read(&mut buf).await.unwrap();
            assert!(n > 0, "EOF after {} of {} bytes", got.len(), expected.len());
            got.extend_from_slice(&buf[..n]);
        }
        assert!(
            got == expected,
            "the echoed stream differs from what was sent"
        );
        rd
    });
    for piece in data.chunks(100_003) {
        wr.write_all(piece).await.unwrap();
    }
    let mut rd = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .unwrap()
        .unwrap();
    // Both directions have moved more than 1 MiB and the relay is still running.
    let sizes = open_pipe_sizes();
    assert!(
        sizes.iter().any(|&s| s >= 1 << 20),
        "no grown pipe among {sizes:?}"
    );
    // Half-close still works after the growth.
    wr.shutdown().await.unwrap();
    let mut tail = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut tail))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tail, b"bye");
    node.shutdown().await;
}

/// A position-dependent checksum that does not depend on how the stream was cut into reads.
#[derive(Default)]
struct Checksum {
    sum: u64,
    words: u64,
    pending: Vec<u8>,
}

impl Checksum {
    fn update(&mut self, mut data: &[u8]) {
        if !self.pending.is_empty() {
            let take = (8 - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == 8 {
                let w: [u8; 8] = self.pending[..].try_into().unwrap();
                self.word(w);
                self.pending.clear();
            }
        }
        let mut chunks = data.chunks_exact(8);
        for w in &mut chunks {
            self.word(w.try_into().unwrap());
        }
        self.pending.extend_from_slice(chunks.remainder());
    }

    fn word(&mut self, w: [u8; 8]) {
        let pos = self.words;
        self.sum = self
            .sum
            .wrapping_add(u64::from_le_bytes(w).rotate_left((pos % 63) as u32) ^ pos);
        self.words += 1;
    }

    fn finish(mut self) -> u64 {
        let tail = std::mem::take(&mut self.pending);
        let mut w = [0_u8; 8];
        w[..tail.len()].copy_from_slice(&tail);
        self.word(w);
        self.sum
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_v2_tells_the_endpoint_who_the_client_is() {
    // A backend that reads the 28-byte v2 header (IPv4) and answers with the source it names.
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = socket.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (mut s, _) = socket.accept().await.unwrap();
        let mut header = [0_u8; 28];
        s.read_exact(&mut header).await.unwrap();
        assert_eq!(&header[..12], b"\r\n\r\n\0\r\nQUIT\n");
        let ip = std::net::Ipv4Addr::new(header[16], header[17], header[18], header[19]);
        let port = u16::from_be_bytes([header[24], header[25]]);
        s.write_all(format!("{ip}:{port}\n").as_bytes())
            .await
            .unwrap();
    });
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "proxy_protocol = \"v2\"",
            &[group("g", "cn-beijing", 100.0, "", &[(backend, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let me = client.local_addr().unwrap();
    let mut reader = tokio::io::BufReader::new(client);
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line)
        .await
        .unwrap();
    assert_eq!(line.trim(), me.to_string());
    node.shutdown().await;
}
