//! What a request's method says about sending it again: read by the retry rule
//! ([`super::retry`]) and by the endpoint clients that decide whether an idle connection may
//! carry it ([`super::client`], [`super::upstream`]), so it lives below all of them.

use http::Method;

/// Methods a request may be sent again with (RFC 9110 9.2.2).
pub(crate) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

#[cfg(test)]
mod tests {
    use super::idempotent;

    #[test]
    fn idempotent_methods_per_rfc_9110() {
        for m in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"] {
            assert!(idempotent(&m.parse().unwrap()), "{m}");
        }
        for m in ["POST", "PATCH", "CONNECT", "PURGE"] {
            assert!(!idempotent(&m.parse().unwrap()), "{m}");
        }
    }
}
