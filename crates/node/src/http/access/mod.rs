//! The HTTP request's access log line (`[log] access`, docs/logs.md): written when its response
//! is done, through the node's access log writer ([`crate::access`]).
//!
//! With the log on, a request carries a boxed [`Entry`] of raw facts — the path cut to
//! [`line::MAX_PATH`] bytes, numbers, the listener's shared config for the names — filled by the
//! request loop from the same decisions its metrics come from. Once the response body is
//! dropped (it ended, or the client went away) the entry goes to the writer. With the log off a
//! request tests an `Option` and that is all.

pub(crate) mod line;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, Version};

use super::conn::Held;
use super::progress::Progress;
use crate::access::Handle;
use gtd_core::config::Listener;

/// What a request's line says: what the request loop decided, then what its response body sent.
/// Boxed, so that a request with the log off carries one pointer's worth of `None`.
pub(crate) struct Entry {
    client: SocketAddr,
    /// Where `[geoip]` puts the client (`None`: no database).
    place: Option<gtd_core::geoip::Place>,
    method: Method,
    version: Version,
    path: line::Path,
    started: Instant,
    /// When the response ended (set when its [`Line`] is dropped).
    ended: Option<Instant>,
    /// The listener (`None`: a reload removed the one on this port).
    listener: Option<Arc<Listener>>,
    /// The status sent (`None`: the client went away before the response head).
    status: Option<u16>,
    /// The last attempt's group and endpoint (config indices).
    attempt: Option<(usize, usize)>,
    retries: u32,
    /// The request body's progress (its bytes from the client), when it had one.
    upload: Option<Arc<Progress>>,
    /// The time from sending the request to the endpoint to its response head.
    upstream: Option<Duration>,
    /// Response body bytes passed to the client connection.
    sent: u64,
}

/// One request's line on its way, filled as the request loop decides and its response body
/// sends, and handed to the writer when dropped: by the response body once the response is over,
/// or with the request when the client went away before its head. With the log off it holds
/// nothing, and each of its methods is one branch.
///
/// It also carries what the exchange holds until its response body ends (its endpoint
/// connection's descriptor and its connection's slot, [`Held`]), logged or not.
#[derive(Default)]
pub(crate) struct Line(Option<Pending>, Option<Held>);

struct Pending {
    log: Handle,
    entry: Box<Entry>,
}

impl Line {
    /// The line of a request that just reached gtd from `client`, logged through `log`.
    pub(crate) fn begin<B>(
        log: &Handle,
        client: SocketAddr,
        place: Option<gtd_core::geoip::Place>,
        req: &http::Request<B>,
    ) -> Line {
        Line(
            Some(Pending {
                log: log.clone(),
                entry: Box::new(Entry {
                    client,
                    place,
                    method: req.method().clone(),
                    version: req.version(),
                    path: line::Path::of(req.uri().path()),
                    started: Instant::now(),
                    ended: None,
                    listener: None,
                    status: None,
                    attempt: None,
                    retries: 0,
                    upload: None,
                    upstream: None,
                    sent: 0,
                }),
            }),
            None,
        )
    }

    /// The line of a request that is not logged.
    #[inline]
    pub(crate) fn off() -> Line {
        Line(None, None)
    }

    /// Keeps `held` until the response body ends (or the request is dropped).
    #[inline]
    pub(crate) fn hold(&mut self, held: Held) {
        self.1 = Some(held);
    }

    /// True when the line must travel with the response body: it is logged, or holds
    /// something.
    #[inline]
    pub(crate) fn travels(&self) -> bool {
        self.0.is_some() || self.1.is_some()
    }

    /// True when the request is logged.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The listener serving the request.
    #[inline]
    pub(crate) fn listener(&mut self, l: &Arc<Listener>) {
        if let Some(p) = &mut self.0 {
            p.entry.listener = Some(Arc::clone(l));
        }
    }

    /// The request body's progress, which counts its bytes from the client.
    #[inline]
    pub(crate) fn upload(&mut self, progress: Option<Arc<Progress>>) {
        if let Some(p) = &mut self.0 {
            p.entry.upload = progress;
        }
    }

    /// An attempt starts on endpoint `endpoint` of group `group` (config indices); `retry` when
    /// it is not the first.
    #[inline]
    pub(crate) fn attempt(&mut self, group: usize, endpoint: usize, retry: bool) {
        if let Some(p) = &mut self.0 {
            p.entry.attempt = Some((group, endpoint));
            p.entry.retries += u32::from(retry);
        }
    }

    /// The endpoint's response head came this long after the request was sent.
    #[inline]
    pub(crate) fn upstream(&mut self, elapsed: Duration) {
        if let Some(p) = &mut self.0 {
            p.entry.upstream = Some(elapsed);
        }
    }

    /// The response goes to the client with `status` (see [`super::bodies::with_line`]).
    #[inline]
    pub(crate) fn status(&mut self, status: http::StatusCode) {
        if let Some(p) = &mut self.0 {
            p.entry.status = Some(status.as_u16());
        }
    }

    /// `n` more response body bytes went to the client.
    #[inline]
    pub(crate) fn sent(&mut self, n: usize) {
        if let Some(p) = &mut self.0 {
            p.entry.sent += n as u64;
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if let Some(Pending { log, mut entry }) = self.0.take() {
            entry.ended = Some(Instant::now());
            log.send(entry);
        }
    }
}
