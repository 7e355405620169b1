//! The admin API's routing (`crates/node/src/admin.rs` `Route::of`): any method and request target
//! (path and query, as hyper parses them into a URI) gives a route without panicking, and:
//! - only `GET` reads (the dashboard, `/healthz`, `/metrics`, `/status`) and only `POST`
//!   changes (`/reload`, `/endpoints/...`);
//! - slashes around the path do not change the route, nor does the query;
//! - an endpoint's listener, group and address, whatever characters they hold, percent-encoded
//!   into `/endpoints/{listener}/{group}/{address}/enable|disable|drain|undrain` come back
//!   exactly.

#![no_main]

use arbitrary::Arbitrary;
use gtd::node::admin::{Action, Route};
use http::{Method, Uri};
use libfuzzer_sys::fuzz_target;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

#[derive(Arbitrary, Debug)]
struct Input {
    /// A method's bytes (most are not a valid method), or one of the usual ones.
    method: Result<Vec<u8>, u8>,
    /// A request target as it comes on the request line.
    target: Vec<u8>,
    /// An endpoint to enable, disable, drain or undrain, and a query to append.
    listener: String,
    group: String,
    address: String,
    action: u8,
    query: String,
}

const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
];

fuzz_target!(|input: Input| {
    let method = match &input.method {
        Ok(bytes) => match Method::from_bytes(bytes) {
            Ok(m) => m,
            Err(_) => return,
        },
        Err(i) => METHODS[usize::from(*i) % METHODS.len()].clone(),
    };

    if let Ok(uri) = Uri::try_from(input.target.as_slice()) {
        let path = uri.path();
        let route = Route::of(&method, path);
        match &route {
            Route::Dashboard(_)
            | Route::Healthz
            | Route::Metrics
            | Route::Status
            | Route::Fleet
            | Route::Events
            | Route::Explain => {
                assert_eq!(method, Method::GET)
            }
            Route::Reload | Route::Toggle { .. } => assert_eq!(method, Method::POST),
            Route::MethodNotAllowed | Route::NotFound => {}
        }
        assert_eq!(Route::of(&method, &format!("/{path}/")), route, "{path:?}");
    }

    // Names percent-encoded on the way in come back as they were.
    let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
    const ACTIONS: [Action; 4] = [
        Action::Enable,
        Action::Disable,
        Action::Drain,
        Action::Undrain,
    ];
    let action = ACTIONS[usize::from(input.action) % ACTIONS.len()];
    let mut target = format!(
        "/endpoints/{}/{}/{}/{}",
        enc(&input.listener),
        enc(&input.group),
        enc(&input.address),
        action.as_str()
    );
    if !input.query.is_empty() {
        target.push('?');
        target.push_str(&enc(&input.query));
    }
    let uri = Uri::try_from(target.as_str()).unwrap_or_else(|e| panic!("{target:?}: {e}"));
    let expected = Route::Toggle {
        listener: input.listener.clone(),
        group: input.group.clone(),
        address: input.address.clone(),
        action,
    };
    assert_eq!(Route::of(&Method::POST, uri.path()), expected, "{target:?}");
    if method != Method::POST {
        assert_eq!(Route::of(&method, uri.path()), Route::MethodNotAllowed);
    }
});
