//! The admin server (docs/design.md §7): the dashboard (`/`, [`super::dashboard`]), `/status`,
//! `/metrics`, `/healthz`, endpoint enable/disable and `/reload`. Every request's `Host` must
//! name the server and a POST must not come from another origin ([`guard`]); mutating calls
//! need `Authorization: Bearer TOKEN` when `[admin] token` is set.

pub mod guard;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::dashboard::{self, Asset};
use gtd_core::view::{DnsView, NodeView, Status};

type Body = Full<Bytes>;

/// Serves the admin API on `socket` until `stop`.
pub(crate) async fn serve(node: Arc<Inner>, socket: TcpListener, stop: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            () = stop.cancelled() => return,
            r = socket.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    if !super::connect::exhausted(&e) {
                        tracing::warn!(error = %e, "admin accept failed");
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // The address the client reached: a Host naming it names this server.
        let Ok(local) = stream.local_addr() else {
            continue;
        };
        let node = node.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let node = node.clone();
                async move { Ok::<_, Infallible>(handle(&node, req, local.ip()).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = conn => if let Err(e) = r { tracing::debug!(error = %e, "admin connection"); },
                () = stop.cancelled() => {}
            }
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .expect("static response parts")
}

fn json_reply(status: StatusCode, v: &impl serde::Serialize) -> Response<Body> {
    let mut text = serde_json::to_string_pretty(v).expect("JSON of plain values");
    text.push('\n');
    reply(status, "application/json", text)
}

fn authorized(node: &Inner, req: &Request<Incoming>) -> bool {
    let Some(token) = node.snapshot.load().config.admin.token.clone() else {
        return true;
    };
    req.headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme in any case (RFC 9110 11.1), then the token after any spaces.
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .is_some_and(|(_, t)| constant_time_eq(t.trim_start().as_bytes(), token.as_bytes()))
}

/// Compares without an early exit, so response timing does not reveal the token's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What an admin request asks for, from its method and path alone: a pure function of the two
/// (no I/O, no node), so that it can be fuzzed (`fuzz/fuzz_targets/admin_path.rs`). Whether a
/// `POST` carries the token is asked afterwards, of every route but the `GET` ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /` and the dashboard's script and style sheet.
    Dashboard(Asset),
    /// `GET /healthz`.
    Healthz,
    /// `GET /metrics`.
    Metrics,
    /// `GET /status`.
    Status,
    /// `POST /reload`.
    Reload,
    /// `GET /fleet`: the fleet's nodes and revisions, as `gtd fleet --json` (with `--etcd`).
    Fleet,
    /// `GET /events`: the node's last events, newest first (docs/status.md, `Events`).
    Events,
    /// `GET /explain?listener=L&client=IP[&host=H&path=P&key=K]`: why that client goes where
    /// it goes (docs/explain.md).
    Explain,
    /// `POST /endpoints/{listener}/{group}/{address}/enable|disable|drain|undrain`, each
    /// segment percent-decoded.
    Toggle {
        /// The listener's name.
        listener: String,
        /// The group's name.
        group: String,
        /// The endpoint's address as the config writes it.
        address: String,
        /// What to do to it.
        action: Action,
    },
    /// A known path with another method: 405.
    MethodNotAllowed,
    /// Anything else: 404.
    NotFound,
}

pub use crate::toggle::Action;

impl Route {
    /// The route of a request: its path is split at `/` (leading and trailing ones ignored)
    /// and each segment percent-decoded.
    pub fn of(method: &Method, path: &str) -> Route {
        let segments: Vec<String> = path
            .trim_matches('/')
            .split('/')
            .map(percent_decode)
            .collect();
        let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (method, seg.as_slice()) {
            (&Method::GET, [name]) if Asset::of(name).is_some() => {
                Route::Dashboard(Asset::of(name).expect("just matched"))
            }
            (&Method::GET, ["healthz"]) => Route::Healthz,
            (&Method::GET, ["metrics"]) => Route::Metrics,
            (&Method::GET, ["status"]) => Route::Status,
            (&Method::GET, ["fleet"]) => Route::Fleet,
            (&Method::GET, ["events"]) => Route::Events,
            (&Method::GET, ["explain"]) => Route::Explain,
            (&Method::POST, ["reload"]) => Route::Reload,
            (&Method::POST, ["endpoints", listener, group, address, action])
                if Action::of(action).is_some() =>
            {
                Route::Toggle {
                    listener: (*listener).to_owned(),
                    group: (*group).to_owned(),
                    address: (*address).to_owned(),
                    action: Action::of(action).expect("just matched"),
                }
            }
            (_, ["healthz" | "metrics" | "status" | "reload" | "fleet" | "events" | "explain"])
            | (_, ["endpoints", ..]) => Route::MethodNotAllowed,
            _ => Route::NotFound,
        }
    }
}

async fn handle(node: &Arc<Inner>, req: Request<Incoming>, local: IpAddr) -> Response<Body> {
    let judged = {
        let snapshot = node.snapshot.load();
        guard::admit(
            req.method(),
            req.headers(),
            local,
            &snapshot.config.admin.hosts,
        )
    };
    if let Err(refused) = judged {
        return json_reply(refused.status, &json!({"error": refused.message}));
    }
    match Route::of(req.method(), req.uri().path()) {
        // Draining (SIGTERM): a load balancer in front should stop sending new clients here.
        Route::Healthz if node.draining.load(std::sync::atomic::Ordering::Relaxed) => {
            reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "draining\n")
        }
        Route::Healthz => reply(StatusCode::OK, "text/plain", "ok\n"),
        Route::Dashboard(asset) => dashboard::reply(asset),
        Route::Metrics => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            node.registry.render(),
        ),
        Route::Status => json_reply(StatusCode::OK, &status(node)),
        Route::Fleet => fleet(node).await,
        Route::Events => json_reply(StatusCode::OK, &node.registry.events().recent()),
        Route::Explain => explain(node, req.uri().query().unwrap_or("")),
        // Every POST, whatever its path, needs the token first.
        _ if req.method() == Method::POST && !authorized(node, &req) => json_reply(
            StatusCode::UNAUTHORIZED,
            &json!({"error": "this call needs Authorization: Bearer <[admin] token>"}),
        ),
        Route::Reload => match node.reload().await {
            Ok(()) => json_reply(StatusCode::OK, &json!({"result": "ok"})),
            Err(e) => json_reply(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({"result": "error", "error": e.to_string()}),
            ),
        },
        Route::Toggle {
            listener,
            group,
            address,
            action,
        } => match node.toggle(&listener, &group, &address, action) {
            Ok(done) => json_reply(
                StatusCode::OK,
                &json!({"listener": listener, "group": group, "endpoint": address,
                    "enabled": done.enabled, "drained": done.drained}),
            ),
            Err(e) => json_reply(StatusCode::NOT_FOUND, &json!({"error": e.to_string()})),
        },
        Route::MethodNotAllowed => json_reply(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"error": "method not allowed"}),
        ),
        Route::NotFound => json_reply(
            StatusCode::NOT_FOUND,
            &json!({"error": "not found", "routes": ["GET /status", "GET /metrics", "GET /healthz", "GET /fleet",
                "GET /explain?listener=L&client=IP[&host=H&path=P&key=K]", "POST /reload",
                "POST /endpoints/{listener}/{group}/{address}/enable|disable|drain|undrain"]}),
        ),
    }
}

/// One path segment, `%XX` escapes decoded (an endpoint address may be written `[::1]%3A80`);
/// bytes that are not UTF-8 become U+FFFD, and so name nothing.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// `GET /fleet`: what `gtd fleet --json` prints, read from etcd now; 404 on a node that
/// serves a config file. Without etcd's quorum (the read fails as an outage does, or takes
/// longer than a request may), read from the first member that answers from its own store and
/// marked stale, as `gtd fleet` answers; 503 only when no member answers at all.
async fn fleet(node: &Inner) -> Response<Body> {
    let Some(fleet) = node.fleet.as_ref() else {
        return json_reply(
            StatusCode::NOT_FOUND,
            &json!({"error": "this node serves a config file, not a fleet's revisions (gtd run --etcd)"}),
        );
    };
    let read = async {
        let mut store = fleet.store().await?;
        gtd_fleet::report::Fleet::read(&mut store).await
    };
    let why = match tokio::time::timeout(gtd_fleet::REQUEST_TIMEOUT, read).await {
        Ok(Ok(f)) => return json_reply(StatusCode::OK, &f.json()),
        Ok(Err(e)) if !gtd_fleet::transient(&e) => {
            return json_reply(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"error": format!("etcd: {}", gtd_fleet::describe(&e))}),
            );
        }
        Ok(Err(e)) => gtd_fleet::describe(&e),
        Err(_) => "etcd did not answer in time".to_owned(),
    };
    let stale = async {
        let (opts, prefix) = (&fleet.opts.etcd, &fleet.opts.prefix);
        let (mut store, from) = gtd_fleet::Store::connect_stale(opts, prefix, why.clone()).await?;
        let mut f = gtd_fleet::report::Fleet::read(&mut store).await?;
        f.stale = Some(from);
        Ok::<_, gtd_fleet::Error>(f)
    };
    match tokio::time::timeout(gtd_fleet::REQUEST_TIMEOUT, stale).await {
        Ok(Ok(f)) => json_reply(StatusCode::OK, &f.json()),
        Ok(Err(e)) => json_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": format!("etcd: {why}; no member answered from its own store either: {}", gtd_fleet::describe(&e))}),
        ),
        Err(_) => json_reply(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": format!("etcd: {why}; no member answered from its own store in time")}),
        ),
    }
}

/// `GET /explain`: the explanation of the listener and client the query names
/// (docs/explain.md); 400 naming the parameter when one is missing or wrong.
fn explain(node: &Inner, query: &str) -> Response<Body> {
    let bad = |parameter: &str, message: String| {
        json_reply(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("{parameter}: {message}"), "parameter": parameter}),
        )
    };
    let q = match gtd_core::view::explain::Query::parse(query) {
        Ok(q) => q,
        Err(e) => return bad(e.parameter, e.message),
    };
    let snap = node.snapshot.load();
    match super::status::explain(node, &snap, &q, Instant::now()) {
        Ok(x) => json_reply(StatusCode::OK, &x),
        Err(e) => bad(e.parameter, e.message),
    }
}

/// The `/status` document (docs/design.md §7, docs/status.md): the node's facts gathered
/// and handed to [`gtd_core::view`]'s builders.
pub(crate) fn status(node: &Inner) -> Status {
    let snap = node.snapshot.load();
    let names = node.names.table();
    let now = Instant::now();
    let listeners = super::status::listeners(node, &snap, &names, now);
    Status {
        node: NodeView {
            region: node.region.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_s: node.started.elapsed().as_secs(),
            config: snap.config.source.display().to_string(),
        },
        listeners,
        dns: names
            .iter()
            .map(|(name, s)| {
                let view = DnsView::build(
                    s.state(),
                    &s.addrs,
                    s.ttl,
                    s.error.as_deref(),
                    s.checked_at,
                    s.next_in,
                );
                (name.clone(), view)
            })
            .collect(),
        fleet: node
            .fleet
            .as_ref()
            .map(|f| f.status(&super::fleet::node_id(node, f))),
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, Asset, Method, Route, percent_decode};

    #[test]
    fn routes_follow_method_and_decoded_path() {
        assert_eq!(Route::of(&Method::GET, "/healthz/"), Route::Healthz);
        assert_eq!(Route::of(&Method::GET, "//metrics"), Route::Metrics);
        assert_eq!(Route::of(&Method::POST, "/status"), Route::MethodNotAllowed);
        assert_eq!(Route::of(&Method::GET, "/reload"), Route::MethodNotAllowed);
        assert_eq!(
            Route::of(&Method::GET, "/endpoints"),
            Route::MethodNotAllowed
        );
        assert_eq!(Route::of(&Method::POST, "/reload/x"), Route::NotFound);
        assert_eq!(Route::of(&Method::GET, "/"), Route::Dashboard(Asset::Page));
        assert_eq!(
            Route::of(&Method::GET, "/dashboard.js"),
            Route::Dashboard(Asset::Script)
        );
        // Only GET serves the page; other methods on `/` stay 404, as before it existed.
        assert_eq!(Route::of(&Method::POST, "/"), Route::NotFound);
        assert_eq!(Route::of(&Method::GET, "/index.html"), Route::NotFound);
        assert_eq!(
            Route::of(
                &Method::POST,
                "/endpoints/web/bj/%5B%3A%3A1%5D%3A80/disable"
            ),
            Route::Toggle {
                listener: "web".to_owned(),
                group: "bj".to_owned(),
                address: "[::1]:80".to_owned(),
                action: Action::Disable,
            }
        );
        assert_eq!(
            Route::of(&Method::POST, "/endpoints/web/bj/a/undrain"),
            Route::Toggle {
                listener: "web".to_owned(),
                group: "bj".to_owned(),
                address: "a".to_owned(),
                action: Action::Undrain,
            }
        );
        // An action that is neither: a known prefix, so 405 rather than 404.
        assert_eq!(
            Route::of(&Method::POST, "/endpoints/web/bj/a/toggle"),
            Route::MethodNotAllowed
        );
    }

    #[test]
    fn path_segments_are_percent_decoded() {
        assert_eq!(percent_decode("%5B%3A%3A1%5D%3A80"), "[::1]:80");
        assert_eq!(percent_decode("127.0.0.1:9001"), "127.0.0.1:9001");
        // An escape cut short stays as written; bytes that are not UTF-8 name nothing.
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%FF"), "\u{FFFD}");
    }
}
