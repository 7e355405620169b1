//! HTTP and HTTPS listeners: hyper serves HTTP/1.1 and HTTP/2 (h2c prior knowledge on
//! cleartext, ALPN on TLS); every request gets its own decision and is proxied to an endpoint.
//!
//! One request, in order:
//! 1. the listener is looked up in the current snapshot (so a reload applies to the next request
//!    of a keep-alive connection too);
//! 2. the forwarding rules pick a route (or 404), see [`gtd_core::split::rules`];
//! 3. a valid sticky cookie names a (group, endpoint) that is eligible and may serve: the first
//!    attempt goes there;
//! 4. otherwise, and for every retry, [`crate::attempt::Attempts`] walks the route's
//!    cascade: the chosen group's balancer, the group's other usable endpoints, then the
//!    highest-priority eligible group not yet tried;
//! 5. connect errors, timeouts and `unhealthy_status` answers are passive failures
//!    ([`gtd_core::balance::Pick::failure`]); a retry happens while `retry`, `tries` and
//!    `retry_timeout` allow, the body can be sent again (there is none, or no byte of it left),
//!    and the method is idempotent, nothing was sent (connect error) or `retry_non_idempotent`
//!    (the rule, as a value decided after each attempt: [`retry`]);
//!    A client whose request body breaks off or stops coming for `upstream_timeout` (while the
//!    endpoint waits for it) fails no endpoint: the request ends there with 400 or 408;
//! 6. the last attempt's unhealthy answer goes back as is; no answer at all gives 502 (504 when
//!    the last attempt timed out); no route gives 503.
//!
//! Request headers towards the endpoint: hop-by-hop headers removed (Connection and the headers
//! it names, Keep-Alive, Proxy-*, TE bar its `trailers` (gtd forwards trailer fields both ways),
//! Transfer-Encoding, Upgrade; Expect too, since gtd answers `100 Continue` itself),
//! `X-Forwarded-For` appended (one line, comma-separated, as nginx's
//! `$proxy_add_x_forwarded_for`), `X-Forwarded-Proto` and `X-Forwarded-Host` set; the client's
//! Host is passed through (from `:authority` for HTTP/2 clients). Hash keys (`$http_NAME`,
//! `$cookie_NAME`) read the request as it is forwarded. Endpoints are spoken to in HTTP/1.1.
//!
//! Upgrades (WebSocket and any other `Upgrade` protocol, HTTP/1.1 clients): a request with
//! `Connection: upgrade` keeps its `Upgrade` header on the way to the endpoint; when the endpoint
//! answers `101 Switching Protocols`, gtd answers the client the same and then relays bytes both
//! ways between the two connections until both sides close or nothing moves for the listener's
//! `idle_timeout`. The tunnel counts as the client connection's (`max_connections`, drain) and
//! holds its endpoint pick (`least_conn` counts it) until it ends. Any other answer goes back as
//! an ordinary response.

pub(crate) mod access;
pub(crate) mod answers;
pub mod bodies;
pub mod client;
mod conn;
pub(crate) mod failure;
pub mod h1;
mod headers;
mod methods;
pub(crate) mod pool;
mod progress;
mod proxy;
pub(crate) mod retry;
mod server;
mod state;
pub mod upstream;

pub use server::PARK_AFTER;
pub(crate) use server::serve;
pub use state::{HttpState, StickyCookies};
