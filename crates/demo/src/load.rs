//! The demo's clients: per acceleration region and listener, a generator that makes `rate` new
//! decisions a second against that region's node — a TCP connection, a UDP flow (a fresh
//! socket and one datagram), or an HTTP/HTTPS request on a fresh connection — reads which
//! endpoint answered, and tallies it by group, beside the share the node's plan gave that
//! group at that moment (so that observed and expected compare even across a failover).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use gtd_core::config::{Listener, Protocol};
use gtd_core::sync::lock;

/// Longest a decision may take before it counts as failed.
const DECISION_TIMEOUT: Duration = Duration::from_secs(5);
/// Decisions in flight per generator at most.
const IN_FLIGHT: usize = 256;

/// One (listener, region)'s counts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    /// Decisions answered by an endpoint.
    pub(crate) decisions: u64,
    /// Decisions no endpoint answered (closed, dropped, 5xx from gtd, timeout).
    pub(crate) failed: u64,
    /// Answered decisions per group (config index).
    pub(crate) observed: Vec<u64>,
    /// The plan's share of each group at each answered decision, summed (fractions).
    pub(crate) expected: Vec<f64>,
}

impl Tally {
    pub(crate) fn new(groups: usize) -> Tally {
        Tally {
            observed: vec![0; groups],
            expected: vec![0.0; groups],
            ..Tally::default()
        }
    }

    /// Observed and expected percent per group (config index).
    pub(crate) fn percents(&self) -> Vec<(f64, f64)> {
        let n = self.decisions.max(1) as f64;
        self.observed
            .iter()
            .zip(&self.expected)
            .map(|(&o, &e)| (o as f64 * 100.0 / n, e * 100.0 / n))
            .collect()
    }
}

/// What one generator needs.
pub(crate) struct Generator {
    pub(crate) listener: Listener,
    /// The node's listener address.
    pub(crate) target: SocketAddr,
    /// New decisions per second.
    pub(crate) rate: u32,
    /// The node's current shares, percent per group (config index), kept fresh by the view.
    pub(crate) shares: Arc<ArcSwap<Vec<f64>>>,
    pub(crate) tally: Arc<Mutex<Tally>>,
    /// TLS towards an HTTPS listener (no verification: the demo's own node).
    pub(crate) tls: Option<tokio_rustls::TlsConnector>,
}

impl Generator {
    /// Runs until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let this = Arc::new(self);
        let period = Duration::from_secs_f64(1.0 / f64::from(this.rate.max(1)));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        let mut client: u16 = 0;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue;
            };
            client = client.wrapping_add(1);
            let (this, stop) = (this.clone(), stop.clone());
            tokio::spawn(async move {
                let answer = tokio::select! {
                    () = stop.cancelled() => return,
                    a = tokio::time::timeout(DECISION_TIMEOUT, this.decide(client)) => a,
                };
                let name = answer.ok().flatten();
                this.count(name.as_deref());
                drop(slot);
            });
        }
    }

    fn count(&self, name: Option<&str>) {
        let mut t = lock(&self.tally);
        let group = name.and_then(|n| {
            self.listener
                .groups
                .iter()
                .position(|g| g.endpoints.iter().any(|e| e.address.text == n))
        });
        match group {
            Some(g) => {
                t.decisions += 1;
                t.observed[g] += 1;
                for (e, s) in t.expected.iter_mut().zip(self.shares.load().iter()) {
                    *e += s / 100.0;
                }
            }
            None => t.failed += 1,
        }
    }

    /// One decision; the name of the endpoint that answered.
    async fn decide(&self, client: u16) -> Option<String> {
        match self.listener.protocol {
            Protocol::Tcp => {
                let mut s = connect(self.target, client).await.ok()?;
                let mut line = Vec::new();
                let mut byte = [0_u8; 1];
                while s.read(&mut byte).await.ok()? == 1 && byte[0] != b'\n' {
                    line.push(byte[0]);
                }
                String::from_utf8(line).ok().filter(|l| !l.is_empty())
            }
            Protocol::Udp => {
                let socket = match UdpSocket::bind((client_ip(client), 0)).await {
                    Ok(s) => s,
                    Err(_) => UdpSocket::bind("127.0.0.1:0").await.ok()?,
                };
                socket.send_to(b"demo", self.target).await.ok()?;
                let mut buf = [0_u8; 512];
                let (n, _) = socket.recv_from(&mut buf).await.ok()?;
                String::from_utf8(buf[..n].to_vec()).ok()
            }
            Protocol::Http | Protocol::Https => {
                let tcp = connect(self.target, client).await.ok()?;
                match &self.tls {
                    Some(tls) => {
                        let name =
                            rustls::pki_types::ServerName::IpAddress(self.target.ip().into());
                        let s = tls.connect(name, tcp).await.ok()?;
                        get(s, self.target).await
                    }
                    None => get(tcp, self.target).await,
                }
            }
        }
    }
}

/// Client `n`'s source address: 127.1.x.y, so that a listener with source-ip affinity (and a
/// group hashing on the client address) sees many clients, as it would in production.
fn client_ip(n: u16) -> std::net::Ipv4Addr {
    let [hi, lo] = n.to_be_bytes();
    std::net::Ipv4Addr::new(127, 1, hi, lo)
}

/// A TCP connection to `target` from client `n`'s address (from 127.0.0.1 if that fails).
async fn connect(target: SocketAddr, n: u16) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    if socket
        .bind(SocketAddr::new(client_ip(n).into(), 0))
        .is_err()
    {
        return TcpStream::connect(target).await;
    }
    socket.connect(target).await
}

/// GET / on its own connection; the body when the answer is 200.
async fn get<S>(io: S, target: SocketAddr) -> Option<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .ok()?;
    let drive = tokio::spawn(conn);
    let req = hyper::Request::get("/")
        .header(hyper::header::HOST, target.to_string())
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .ok()?;
    let resp = sender.send_request(req).await.ok()?;
    let ok = resp.status() == hyper::StatusCode::OK;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    drive.abort();
    ok.then(|| String::from_utf8_lossy(&body).into_owned())
}
