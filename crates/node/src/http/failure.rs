//! Why an attempt of an HTTP request got no response to pass on, as both clients and the
//! bodies report it; the request loop decides from it whether the endpoint is blamed, whether
//! another attempt may follow, and what gtd answers.

use std::io;

/// Why an attempt got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection (refused, unreachable, connect or TLS handshake timeout, a certificate
    /// refused): nothing was sent.
    Connect(Cause),
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

/// Why a connection to an endpoint could not be made, for the log line that blames it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    Refused,
    Reset,
    Unreachable,
    TimedOut,
    /// The HTTP/1.1 handshake over an open connection failed.
    Handshake,
    TlsUnknownIssuer,
    TlsNameMismatch,
    TlsExpired,
    TlsBadCertificate,
    TlsVersion,
    TlsAlert,
    Tls,
    Other,
}

impl Cause {
    /// The cause of a connect or TLS error.
    pub(crate) fn of(e: &io::Error) -> Cause {
        use rustls::{AlertDescription as A, CertificateError as C, Error as R};
        if let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<R>()) {
            return match tls {
                R::InvalidCertificate(C::UnknownIssuer) => Cause::TlsUnknownIssuer,
                R::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
                    Cause::TlsNameMismatch
                }
                R::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => Cause::TlsExpired,
                R::InvalidCertificate(_) => Cause::TlsBadCertificate,
                R::PeerIncompatible(_) | R::AlertReceived(A::ProtocolVersion) => Cause::TlsVersion,
                R::AlertReceived(_) => Cause::TlsAlert,
                _ => Cause::Tls,
            };
        }
        match e.kind() {
            io::ErrorKind::ConnectionRefused => Cause::Refused,
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => Cause::Reset,
            io::ErrorKind::TimedOut => Cause::TimedOut,
            io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
                Cause::Unreachable
            }
            _ => Cause::Other,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Cause::Refused => "connection refused",
            Cause::Reset => "connection reset",
            Cause::Unreachable => "unreachable",
            Cause::TimedOut => "connect_timeout (TCP or TLS handshake)",
            Cause::Handshake => "the HTTP handshake failed",
            Cause::TlsUnknownIssuer => {
                "TLS: certificate of an unknown issuer (check the group's tls ca)"
            }
            Cause::TlsNameMismatch => "TLS: certificate not valid for the server name (check sni)",
            Cause::TlsExpired => "TLS: certificate expired",
            Cause::TlsBadCertificate => "TLS: certificate refused",
            Cause::TlsVersion => "TLS: no protocol version in common (check min_version)",
            Cause::TlsAlert => "TLS: the endpoint ended the handshake with an alert",
            Cause::Tls => "TLS handshake failed",
            Cause::Other => "connect error",
        }
    }
}

/// The failure a connect error is: the endpoint's (with its cause), or this node's lack of
/// open files.
pub(crate) fn connect_failure(e: &io::Error) -> Failure {
    if crate::connect::exhausted(e) {
        Failure::Exhausted
    } else {
        Failure::Connect(Cause::of(e))
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::Connect(cause) => return write!(f, "no connection: {}", cause.as_str()),
            Failure::Timeout => "no response head within upstream_timeout",
            Failure::Broken => "the connection broke during the request",
            Failure::BadResponse => "a response head that is invalid or too large",
            Failure::Exhausted => "this node is out of open files or local ports",
            Failure::ClientGone => "the client's request body broke off",
            Failure::ClientStalled => "the client's request body stalled",
            Failure::BadTarget => "the request target cannot be made",
        })
    }
}
