//! The dashboard the admin server serves at `/` (docs/design.md §7): one HTML page, its script
//! and its style sheet, embedded in the binary (no external asset, nothing fetched but the
//! node's own `/status`, `/fleet` and `POST /endpoints/...`), so it works offline and on a node
//! that reaches nothing.
//!
//! The page polls `/status` about once a second and draws each listener's groups in priority
//! order: RTT and its source, health, mode (and why), the expected share beside the share
//! observed over the last few polls (from the `served` counters `/status` reports), and every
//! endpoint with its health, last check, active connections and an enable/disable toggle. When
//! a toggle is refused with 401 the page asks for the admin token and keeps it in the tab's
//! `sessionStorage` only. A fleet tab appears when `/fleet` answers 200 (a node with etcd).

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};

/// One of the dashboard's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    /// `GET /`: the page.
    Page,
    /// `GET /dashboard.js`.
    Script,
    /// `GET /dashboard.css`.
    Style,
}

/// Where the page's script may connect and what it may load: only this origin, no inline
/// script or style, no frames, no forms posting elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

impl Asset {
    /// The asset a single path segment names (`""` is `/`).
    pub fn of(segment: &str) -> Option<Asset> {
        match segment {
            "" => Some(Asset::Page),
            "dashboard.js" => Some(Asset::Script),
            "dashboard.css" => Some(Asset::Style),
            _ => None,
        }
    }

    /// The file's text.
    pub fn body(self) -> &'static str {
        match self {
            Asset::Page => include_str!("index.html"),
            Asset::Script => include_str!("dashboard.js"),
            Asset::Style => include_str!("dashboard.css"),
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Asset::Page => "text/html; charset=utf-8",
            Asset::Script => "text/javascript; charset=utf-8",
            Asset::Style => "text/css; charset=utf-8",
        }
    }
}

/// The response carrying `asset`: its type, the policy, and no caching (a node upgraded in
/// place serves its own page at once).
pub(crate) fn reply(asset: Asset) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", asset.content_type())
        .header("content-security-policy", CONTENT_SECURITY_POLICY)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("cache-control", "no-cache")
        .body(Full::new(Bytes::from_static(asset.body().as_bytes())))
        .expect("static response parts")
}

#[cfg(test)]
mod tests {
    use super::Asset;

    #[test]
    fn the_page_loads_only_its_own_files() {
        let page = Asset::Page.body();
        assert!(page.contains(r#"src="dashboard.js""#));
        assert!(page.contains(r#"href="dashboard.css""#));
        // No inline script or style (the policy forbids them) and nothing from elsewhere.
        assert!(!page.contains("<script>") && !page.contains("style="));
        for asset in [Asset::Page, Asset::Script, Asset::Style] {
            let text = asset.body();
            assert!(!text.contains("http://") && !text.contains("https://"));
            assert!(!text.contains("localStorage") && !text.contains("document.cookie"));
        }
    }
}
