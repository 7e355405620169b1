//! The demo's endpoints: one embedded backend per endpoint address of the config (all on
//! loopback), speaking its listener's protocol, and one acceptor per health-check port a UDP
//! group names. Each answer to a node waits the catalogue RTT between that node's region (known
//! by the node's source address) and the endpoint's group's region, so that the RTTs the
//! nodes measure reproduce the catalogue's geography.
//!
//! Every answer names the endpoint (its address as configured): that is how the load
//! generators tell which group served a decision.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};

use super::{Error, Result};
use gtd_core::config::{Config, HealthCheck, Host, Protocol};

/// Which node (by its source address) is in which region, and the catalogue RTTs.
#[derive(Debug)]
pub(crate) struct Geography {
    regions: BTreeMap<IpAddr, String>,
    config: Arc<Config>,
}

impl Geography {
    pub(crate) fn new(regions: BTreeMap<IpAddr, String>, config: Arc<Config>) -> Geography {
        Geography { regions, config }
    }

    /// How long an answer from an endpoint of a group in `group_region` takes to reach `peer`.
    fn delay(&self, peer: IpAddr, group_region: &str) -> Duration {
        self.regions
            .get(&peer)
            .and_then(|r| self.config.catalog.rtt_ms(r, group_region))
            .map_or(Duration::ZERO, |ms| Duration::from_secs_f64(ms / 1000.0))
    }
}

/// What one backend is.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// The address as configured: what it answers.
    pub(crate) name: String,
    pub(crate) kind: Kind,
    /// The region of the group it belongs to.
    pub(crate) region: String,
    /// "LISTENER/GROUP" of every group it serves (what `--stop` names).
    pub(crate) groups: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// TCP: writes its name and a newline.
    Tcp,
    /// HTTP/1.1: answers its name; a group's health check gets what the check expects.
    Http(Option<Arc<HealthCheck>>),
    /// UDP: answers each datagram with its name.
    Udp,
    /// A TCP port a UDP group's checks use: accepts.
    CheckPort,
}

/// The backends `config` needs, by address. Fails for an endpoint that is not a loopback IP
/// (the demo sends traffic nowhere else) or an address two listeners of different kinds share.
pub(crate) fn plan(config: &Config) -> Result<Vec<Spec>> {
    let mut by_addr: BTreeMap<(bool, SocketAddr), Spec> = BTreeMap::new();
    for l in &config.listeners {
        for g in &l.groups {
            if g.tls.as_ref().is_some_and(|t| t.enabled) {
                return Err(Error::GroupTls {
                    listener: l.name.clone(),
                    group: g.name.clone(),
                });
            }
            for e in &g.endpoints {
                let ip = match &e.address.host {
                    Host::Ip(ip) if ip.is_loopback() => *ip,
                    _ => {
                        return Err(Error::NotLoopback {
                            listener: l.name.clone(),
                            group: g.name.clone(),
                            endpoint: e.address.to_string(),
                        });
                    }
                };
                let kind = match l.protocol {
                    Protocol::Tcp => Kind::Tcp,
                    Protocol::Udp => Kind::Udp,
                    Protocol::Http | Protocol::Https => {
                        Kind::Http(g.health_check.clone().map(Arc::new))
                    }
                };
                let udp = l.protocol == Protocol::Udp;
                let addr = SocketAddr::new(ip, e.address.port);
                add(
                    &mut by_addr,
                    udp,
                    Spec {
                        addr,
                        name: e.address.text.clone(),
                        kind,
                        region: g.region.clone(),
                        groups: vec![format!("{}/{}", l.name, g.name)],
                    },
                )?;
                if let (true, Some(port)) = (udp, g.health_check.as_ref().and_then(|c| c.port)) {
                    add(
                        &mut by_addr,
                        false,
                        Spec {
                            addr: SocketAddr::new(ip, port),
                            name: format!("{}:{port}", e.address.text),
                            kind: Kind::CheckPort,
                            region: g.region.clone(),
                            groups: vec![format!("{}/{}", l.name, g.name)],
                        },
                    )?;
                }
            }
        }
    }
    Ok(by_addr.into_values().collect())
}

fn add(by_addr: &mut BTreeMap<(bool, SocketAddr), Spec>, udp: bool, spec: Spec) -> Result<()> {
    match by_addr.get_mut(&(udp, spec.addr)) {
        None => {
            by_addr.insert((udp, spec.addr), spec);
        }
        Some(have) => {
            let same = matches!(
                (&have.kind, &spec.kind),
                (Kind::Tcp, Kind::Tcp)
                    | (Kind::Udp, Kind::Udp)
                    | (Kind::Http(_), Kind::Http(_))
                    | (Kind::CheckPort, Kind::CheckPort)
            );
            if !same {
                return Err(Error::Shared {
                    addr: spec.addr,
                    first: have.groups.join(", "),
                    second: spec.groups.join(", "),
                });
            }
            have.groups.extend(spec.groups);
        }
    }
    Ok(())
}

/// A running backend; stops when dropped.
#[derive(Debug)]
pub(crate) struct Backend(JoinHandle<()>);

impl Drop for Backend {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts `spec`'s backend; fails, naming the address, when it cannot be bound.
pub(crate) async fn start(spec: &Spec, geo: Arc<Geography>) -> Result<Backend> {
    let taken = |error| Error::Taken {
        addr: spec.addr,
        groups: spec.groups.join(", "),
        error,
    };
    let name: Arc<str> = spec.name.as_str().into();
    let region: Arc<str> = spec.region.as_str().into();
    let handle = match &spec.kind {
        Kind::Udp => {
            let socket = Arc::new(UdpSocket::bind(spec.addr).await.map_err(taken)?);
            tokio::spawn(async move {
                let mut buf = vec![0_u8; 64 * 1024];
                let mut replies = JoinSet::new();
                while let Ok((_, peer)) = socket.recv_from(&mut buf).await {
                    let (socket, geo, name, region) =
                        (socket.clone(), geo.clone(), name.clone(), region.clone());
                    replies.spawn(async move {
                        tokio::time::sleep(geo.delay(peer.ip(), &region)).await;
                        let _ = socket.send_to(name.as_bytes(), peer).await;
                    });
                    while replies.try_join_next().is_some() {}
                }
            })
        }
        kind => {
            let listener = TcpListener::bind(spec.addr).await.map_err(taken)?;
            let kind = kind.clone();
            tokio::spawn(async move {
                let mut open = JoinSet::new();
                while let Ok((stream, peer)) = listener.accept().await {
                    let delay = geo.delay(peer.ip(), &region);
                    let (name, kind) = (name.clone(), kind.clone());
                    open.spawn(async move {
                        match kind {
                            Kind::Tcp => {
                                let mut s = stream;
                                tokio::time::sleep(delay).await;
                                if s.write_all(format!("{name}\n").as_bytes()).await.is_ok() {
                                    let mut sink = [0_u8; 4096];
                                    while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
                                }
                            }
                            Kind::Http(check) => {
                                let service = hyper::service::service_fn(move |req| {
                                    answer(req, name.clone(), check.clone(), delay)
                                });
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                            Kind::CheckPort | Kind::Udp => drop(stream),
                        }
                    });
                    while open.try_join_next().is_some() {}
                }
            })
        }
    };
    Ok(Backend(handle))
}

/// An HTTP answer: to the group's check, what it expects; to anything else, the name.
async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    name: Arc<str>,
    check: Option<Arc<HealthCheck>>,
    delay: Duration,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let is_check = check
        .as_ref()
        .is_some_and(|c| req.uri().path() == c.path.split('?').next().unwrap_or("/"));
    // The request body is read whole (a check may send one).
    let _ = req.into_body().collect().await;
    tokio::time::sleep(delay).await;
    let mut r = hyper::Response::builder();
    let body = match check.filter(|_| is_check) {
        Some(c) => {
            let status = c.expect_status.0.first().map_or(200, |s| *s.start());
            r = r.status(status);
            for (k, v) in &c.expect_headers {
                r = r.header(k.as_str(), v.as_str());
            }
            c.expect_body.clone().unwrap_or_else(|| "ok".to_owned())
        }
        None => name.to_string(),
    };
    Ok(r.body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::from_static(b"demo")))))
}
