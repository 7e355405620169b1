//! The HTTP side of a listener's runtime state: its forwarding rules, sticky cookies, TLS
//! acceptor and hyper's server settings, and each group's way to its endpoints
//! ([`super::upstream::Upstream`]). Built when a snapshot is built, which holds it by type
//! (`ListenerState::http`); this file imports nothing of the snapshot, so the snapshot can.

use http::header::HeaderValue;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use metrics::Counter;
use tokio_rustls::TlsAcceptor;

use gtd_core::config::{Listener, Protocol};
use gtd_core::split::StickyTable;
use gtd_core::split::rules::Rules;

use crate::telemetry::{self as m, Registry, code_classes};
use crate::tls;

/// The HTTP side of a listener's runtime state, built with the snapshot.
pub struct HttpState {
    /// The forwarding rules.
    pub rules: Rules,
    /// Sticky cookies, when `sticky` is set.
    pub sticky: Option<StickyCookies>,
    pub(super) tls: Option<TlsAcceptor>,
    pub(super) server: auto::Builder<TokioExecutor>,
    /// The same HTTP/1 settings for a cleartext connection served by hyper's HTTP/1 server
    /// alone, which can be parked between requests (see `server::serve_h1`).
    pub(super) h1: hyper::server::conn::http1::Builder,
    /// gtd's own answers (404, 502, 503, 504) by code class (1xx..5xx).
    pub(super) own: [Counter; 5],
    pub(super) sticky_hits: Counter,
    /// Connections parked now (`server::serve_h1`).
    pub(super) parked: metrics::Gauge,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("rules", &self.rules)
            .field("sticky", &self.sticky)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// `sticky = { cookie }`: the pure table (values, and what a value names) with the
/// `Set-Cookie` header each endpoint's responses carry.
#[derive(Debug)]
pub struct StickyCookies {
    /// The cookie's values and what they name.
    pub table: StickyTable,
    /// The `Set-Cookie` value per group and endpoint (config order).
    pub(super) set_cookie: Vec<Vec<HeaderValue>>,
}

impl StickyCookies {
    fn build(l: &Listener) -> Option<StickyCookies> {
        let table = StickyTable::of(l)?;
        let secure = if l.protocol == Protocol::Https {
            "; Secure"
        } else {
            ""
        };
        let cookie = &table.cookie;
        let set_cookie = table
            .values()
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|value| {
                        HeaderValue::try_from(format!(
                            "{cookie}={value}; Path=/; HttpOnly; SameSite=Lax{secure}"
                        ))
                        .expect("validated cookie name and hex value")
                    })
                    .collect()
            })
            .collect();
        Some(StickyCookies { table, set_cookie })
    }
}

/// What one HTTP/2 response stream may queue for its client before the node stops reading the
/// endpoint (hyper's default is ~400 KiB): the 64 KiB an HTTP/1 slow reader gets. With 100
/// streams a connection, a client that opens them all, advertises a 2 GiB window and never
/// reads made the node grow 166 KiB a stream; 45 KiB with this (tests/http/h2_readers.rs,
/// docs/performance.md).
const H2_SEND_BUF: usize = 64 * 1024;

/// The largest HTTP/1 request head: hyper's `max_buf_size`, and where the cleartext HTTP/1
/// connection stops reading a head (`server::Parkable`).
pub(super) const MAX_HEAD: usize = 64 * 1024;

impl HttpState {
    /// Builds the HTTP state of listener `l` (certificates are read here).
    pub(crate) fn build(l: &Listener, registry: &Registry) -> Result<HttpState, tls::TlsError> {
        let name = l.name.as_str();
        let tls = match (&l.tls, l.protocol) {
            (Some(t), Protocol::Https) => Some(TlsAcceptor::from(tls::server_config(t)?)),
            (None, Protocol::Https) => return Err(tls::TlsError::NoCertificate),
            _ => None,
        };
        let mut server = auto::Builder::new(TokioExecutor::new());
        server
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(l.header_timeout)
            // At most 100 request headers: hyper's default, left unset because setting it
            // moves each request's parse arrays from the stack to the heap.
            .max_buf_size(64 * 1024)
            // Head and body leave in one flat buffer (one copy of small bodies instead of a
            // queue of buffers for writev): about 4% more requests per second, measured.
            .writev(false);
        let mut h1 = hyper::server::conn::http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(l.header_timeout)
            .max_buf_size(MAX_HEAD)
            .writev(false);
        server
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(100)
            // The same 64 KiB of request headers as HTTP/1.1 (`max_buf_size`): a request that
            // passes on one protocol passes on the other.
            .max_header_list_size(64 * 1024)
            .max_pending_accept_reset_streams(20)
            .max_local_error_reset_streams(1024)
            .initial_stream_window_size(64 * 1024)
            .initial_connection_window_size(1024 * 1024)
            .max_send_buf_size(H2_SEND_BUF);
        Ok(HttpState {
            rules: Rules::new(&l.routes),
            sticky: StickyCookies::build(l),
            tls,
            server,
            h1,
            own: code_classes(registry, &[name, "", ""]),
            sticky_hits: registry.counter(&m::STICKY_HITS_TOTAL, &[name]),
            parked: registry.gauge(&m::HTTP_CONNECTIONS_PARKED, &[name]),
        })
    }
}
