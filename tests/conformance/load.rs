//! The suite's clients: TCP connections, UDP flows and HTTP requests from many 127.1.x.y
//! addresses, each decision tallied by the group that answered.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::fleet::*;

// ---------------------------------------------------------------------------------------------
// Load

/// Client `k`'s source address: 127.1.x.y (never .0 or .255).
pub(crate) fn client_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (k / 250) as u8, (k % 250 + 1) as u8)
}

/// `n` decisions against `target` (a TCP connection, a UDP flow on a fresh socket, or an HTTP
/// request for `host` and `path` on a fresh connection), decision k from client k's address.
pub(crate) fn drive(proto: &str, target: SocketAddr, n: usize, host: &str, path: &str) -> Tally {
    let mut tally = Tally::default();
    let clients: Vec<usize> = (0..n).collect();
    for answer in drive_from(proto, target, &clients, host, path) {
        match answer {
            Some(name) => *tally.answers.entry(name).or_default() += 1,
            None => tally.failed += 1,
        }
    }
    tally
}

/// One decision from each of `clients` (indices for [`client_ip`]); each one's answer.
pub(crate) fn drive_from(
    proto: &str,
    target: SocketAddr,
    clients: &[usize],
    host: &str,
    path: &str,
) -> Vec<Option<String>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let proto: Arc<str> = proto.into();
    let request: Arc<str> =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into();
    rt.block_on(async move {
        let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let mut set = tokio::task::JoinSet::new();
        for (i, &k) in clients.iter().enumerate() {
            let permit = slots.clone().acquire_owned().await.unwrap();
            let (proto, request) = (proto.clone(), request.clone());
            set.spawn(async move {
                let answer = tokio::time::timeout(
                    Duration::from_secs(10),
                    decide(&proto, target, client_ip(k), &request),
                )
                .await
                .ok()
                .flatten();
                drop(permit);
                (i, answer)
            });
        }
        let mut out = vec![None; clients.len()];
        while let Some(r) = set.join_next().await {
            let (i, answer) = r.unwrap();
            out[i] = answer;
        }
        out
    })
}

/// One decision: the name of the endpoint that answered.
async fn decide(
    proto: &str,
    target: SocketAddr,
    client: Ipv4Addr,
    request: &str,
) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    match proto {
        "udp" => {
            let socket = tokio::net::UdpSocket::bind((client, 0)).await.ok()?;
            socket.send_to(b"conformance", target).await.ok()?;
            let mut buf = [0_u8; 512];
            let (n, _) = socket.recv_from(&mut buf).await.ok()?;
            String::from_utf8(buf[..n].to_vec()).ok()
        }
        _ => {
            let socket = tokio::net::TcpSocket::new_v4().ok()?;
            socket.bind(SocketAddr::new(client.into(), 0)).ok()?;
            let mut s = socket.connect(target).await.ok()?;
            if proto == "tcp" {
                // The endpoint writes its name and a newline.
                let mut line = Vec::new();
                let mut byte = [0_u8; 1];
                while s.read(&mut byte).await.ok()? == 1 && byte[0] != b'\n' {
                    line.push(byte[0]);
                }
                return String::from_utf8(line).ok().filter(|l| !l.is_empty());
            }
            s.write_all(request.as_bytes()).await.ok()?;
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).await.ok()?;
            let text = String::from_utf8(raw).ok()?;
            let (head, body) = text.split_once("\r\n\r\n")?;
            let code: u16 = head.split(' ').nth(1)?.parse().ok()?;
            let chunked = head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked");
            (code == 200).then(|| {
                if chunked {
                    dechunk(body)
                } else {
                    body.to_owned()
                }
            })
        }
    }
}

/// A chunked body's data.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The groups of a listener in a `sim` document's region, by name (for readable asserts).
pub(crate) fn shares(sim: &Value, listener: &str, region: &str) -> BTreeMap<String, f64> {
    sim_split(sim, listener, region, None)
        .1
        .into_iter()
        .map(|(g, _, s)| (g, s))
        .collect()
}
