//! Why an attempt of an HTTP request got no response to pass on, as both clients and the
//! bodies report it; the request loop decides from it whether the endpoint is blamed, whether
//! another attempt may follow, and what gtd answers.

use std::io;

/// Why an attempt got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection (refused, unreachable, connect or TLS handshake timeout): nothing was sent.
    Connect,
    /// No response headers within `upstream_timeout`.
    Timeout,
    /// The connection broke after the request started.
    Broken,
    /// The response head is one gtd does not pass on: invalid, or over 64 KiB or 100 fields.
    /// Not counted against the endpoint, nor retried (nginx's default: `invalid_header` is not
    /// in `proxy_next_upstream`).
    BadResponse,
    /// No connection because this node is out of open files: not the endpoint's failure.
    Exhausted,
    /// The client's request body broke off (the client went away mid-upload): not the
    /// endpoint's failure.
    ClientGone,
    /// The client's request body stopped coming for `upstream_timeout` while the endpoint was
    /// waiting for it: not the endpoint's failure.
    ClientStalled,
    /// The request target cannot be made (the group's `path_prefix` joined with the path):
    /// nothing was sent; the client gets 400.
    BadTarget,
}

/// The failure a connect error is: the endpoint's, or this node's lack of open files.
pub(crate) fn connect_failure(e: &io::Error) -> Failure {
    if crate::node::connect::exhausted(e) {
        Failure::Exhausted
    } else {
        Failure::Connect
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::Connect => {
                "no connection (refused, unreachable, connect_timeout or a failed TLS handshake)"
            }
            Failure::Timeout => "no response head within upstream_timeout",
            Failure::Broken => "the connection broke during the request",
            Failure::BadResponse => "a response head that is invalid or too large",
            Failure::Exhausted => "this node is out of open files",
            Failure::ClientGone => "the client's request body broke off",
            Failure::ClientStalled => "the client's request body stalled",
            Failure::BadTarget => "the request target cannot be made",
        })
    }
}
