//! gtd's own answers to HTTP clients, in one place (as sozu keeps its `answers`): the status,
//! the short text body and the counter each one is counted in (`gtd_requests_total` with empty
//! group and endpoint labels).

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::bodies::DownBody;
use super::failure::Failure;
use super::retry::Last;
use super::state::HttpState;
use crate::snapshot::ListenerState;

pub(super) fn class(status: StatusCode) -> usize {
    usize::from(status.as_u16() / 100).clamp(1, 5) - 1
}

pub(super) fn bare(status: StatusCode, text: &'static str) -> Response<DownBody> {
    let mut r = Response::new(DownBody::own(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The answer to a plaintext HTTP request on an HTTPS listener.
pub(super) const PLAIN_TO_HTTPS: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Content-Length: 60\r\nConnection: close\r\n\r\n\
this port speaks HTTPS: the plain HTTP request was not read\n";

pub(super) fn own(http: &HttpState, status: StatusCode, text: &'static str) -> Response<DownBody> {
    http.own[class(status)].increment(1);
    bare(status, text)
}

/// gtd's own answer when no attempt gave one to pass on.
pub(super) fn failed(http: &HttpState, l: &ListenerState, last: Last) -> Response<DownBody> {
    match last {
        Last::Nothing => {
            l.metrics.no_route.increment(1);
            own(
                http,
                StatusCode::SERVICE_UNAVAILABLE,
                "no healthy endpoint can take this request\n",
            )
        }
        Last::Failed(Failure::Timeout) => own(
            http,
            StatusCode::GATEWAY_TIMEOUT,
            "the endpoint did not answer in time\n",
        ),
        Last::Failed(Failure::Exhausted) => own(
            http,
            StatusCode::SERVICE_UNAVAILABLE,
            "this node cannot open a connection now\n",
        ),
        // Most likely nobody reads this one. The connection closes after either (the rest of
        // the body will not be read): the answer says so.
        Last::Failed(Failure::ClientGone) => closing(own(
            http,
            StatusCode::BAD_REQUEST,
            "the request body broke off\n",
        )),
        Last::Failed(Failure::ClientStalled) => closing(own(
            http,
            StatusCode::REQUEST_TIMEOUT,
            "the request body stopped coming\n",
        )),
        Last::Failed(Failure::BadTarget) => {
            own(http, StatusCode::BAD_REQUEST, "bad request path\n")
        }
        Last::Failed(Failure::BadResponse) => own(
            http,
            StatusCode::BAD_GATEWAY,
            "the endpoint's response head was invalid or too large\n",
        ),
        Last::Failed(_) => own(
            http,
            StatusCode::BAD_GATEWAY,
            "no endpoint could be reached\n",
        ),
    }
}

/// `response` with `Connection: close` (hyper leaves it out of HTTP/2 answers).
pub(super) fn closing(mut response: Response<DownBody>) -> Response<DownBody> {
    static CLOSE: HeaderValue = HeaderValue::from_static("close");
    response
        .headers_mut()
        .insert(header::CONNECTION, CLOSE.clone());
    response
}

/// Writes `answer` (a whole HTTP/1.1 response, `Connection: close`) on a connection whose
/// request gtd will not read, then drains what the client sent for a moment (at most 64 KiB,
/// 1 s) so that closing does not reset the answer away before the client reads it.
pub(crate) async fn answer_and_close(mut stream: TcpStream, answer: &[u8]) {
    if stream.write_all(answer).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    // On the heap, taken only here: a 4 KiB array would live in the future, and so in the
    // task of every HTTP connection (whose future may come here), idle or not.
    let mut sink = vec![0_u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(n) if n > 0 => left = left.saturating_sub(n),
                _ => break,
            }
        }
    })
    .await;
}
