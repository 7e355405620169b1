//! Who the admin server answers (docs/design.md §7): a pure judgement of a request's `Host`,
//! `Origin` and `Sec-Fetch-Site`, so that a web page can neither read it through DNS
//! rebinding nor drive it across origins.
//!
//! - **Host** must name the server: an IP address the connection arrived on, `localhost` on a
//!   loopback connection, or a name in `[admin] hosts` (any port; no Host at all is a client
//!   that is no browser). A page on `rebind.attacker.example` whose name now resolves to this
//!   host sends that name, and is answered `421`.
//! - **A POST** from a browser says where it comes from: `Sec-Fetch-Site` other than
//!   `same-origin` or `none`, or an `Origin` that is not `http://` and the `Host` it was sent
//!   to, is `403`.
//!   curl and scripts send neither and are judged by the token alone.

use std::net::IpAddr;

use hyper::{HeaderMap, Method, StatusCode};

/// Why a request is refused: the status and the words of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `421` for a Host that does not name this server, `403` for a cross-origin POST.
    pub status: StatusCode,
    /// What an operator reads.
    pub message: String,
}

/// Judges a request to the admin server that arrived on `local` (the connection's own
/// address); `hosts` is `[admin] hosts`.
pub fn admit(
    method: &Method,
    headers: &HeaderMap,
    local: IpAddr,
    hosts: &[String],
) -> Result<(), Refusal> {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let host = text("host");
    if let Some(host) = host
        && !names_this_server(host, local, hosts)
    {
        return Err(Refusal {
            status: StatusCode::MISDIRECTED_REQUEST,
            message: format!(
                "this admin server does not answer to Host {host:?} (a page whose name was \
                 pointed at this address, DNS rebinding, would send it): use its address or \
                 localhost, or list the name in [admin] hosts"
            ),
        });
    }
    if method != Method::POST {
        return Ok(());
    }
    if let Some(site) = text("sec-fetch-site")
        && !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none"))
    {
        return Err(Refusal {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "refused: the browser says this request comes from another page \
                 (Sec-Fetch-Site: {site}); the admin API takes changes from its own dashboard, \
                 curl and scripts"
            ),
        });
    }
    if let Some(origin) = text("origin")
        && !host.is_some_and(|h| same_origin(origin, h))
    {
        return Err(Refusal {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "refused: a page of another origin ({origin}) may not change this node; the \
                 admin API takes changes from its own dashboard, curl and scripts"
            ),
        });
    }
    Ok(())
}

/// The name and port of a Host value (`[::1]:9100` → `::1`, `9100`), the name lower-cased
/// without a trailing dot.
fn split(host: &str) -> (String, Option<&str>) {
    let (name, port) = gtd_core::config::split_host(host);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let name = name.strip_suffix('.').unwrap_or(name);
    (name.to_ascii_lowercase(), port)
}

/// True when `host` names the server reached at `local`.
fn names_this_server(host: &str, local: IpAddr, hosts: &[String]) -> bool {
    let (name, _) = split(host);
    if let Ok(ip) = name.parse::<IpAddr>() {
        return ip.to_canonical() == local.to_canonical();
    }
    (name == "localhost" && local.is_loopback())
        || hosts.iter().any(|h| {
            let h = h.strip_suffix('.').unwrap_or(h);
            h.eq_ignore_ascii_case(&name)
        })
}

/// The scheme of the admin server's own pages: it speaks plain HTTP only.
const SCHEME: &str = "http";

/// True when `origin` (`scheme://host[:port]`) is the origin `host` was sent to: the admin
/// server's scheme, the same name and the same port, a missing port being the scheme's own.
/// An origin is all three (RFC 6454): a page served over https from the same name and port is
/// another page (another server, or one in front of this one), not the dashboard.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        // `null` (a sandboxed frame, a file) and anything else is no origin of this server.
        return false;
    };
    if !scheme.eq_ignore_ascii_case(SCHEME) {
        return false;
    }
    let default = "80";
    let (o_name, o_port) = split(authority);
    let (h_name, h_port) = split(host);
    o_name == h_name && o_port.unwrap_or(default) == h_port.unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as (name, value).
    type Header<'a> = (&'a str, &'a str);

    fn judge(method: Method, headers: &[Header], local: &str) -> Option<u16> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let hosts = ["gtd-1.internal".to_owned()];
        admit(&method, &map, local.parse().unwrap(), &hosts)
            .err()
            .map(|r| r.status.as_u16())
    }

    #[test]
    fn hosts_that_name_the_server() {
        let get = Method::GET;
        let cases: &[(&str, &str, Option<u16>)] = &[
            ("127.0.0.1:9100", "127.0.0.1", None),
            ("127.0.0.1", "127.0.0.1", None),
            ("localhost:9100", "127.0.0.1", None),
            ("LOCALHOST.", "127.0.0.1", None),
            ("[::1]:9100", "::1", None),
            ("127.0.0.1:9100", "::ffff:127.0.0.1", None),
            ("gtd-1.internal:9100", "10.0.0.5", None),
            ("10.0.0.5:9100", "10.0.0.5", None),
            // localhost names loopback only; another address is another server.
            ("localhost:9100", "10.0.0.5", Some(421)),
            ("127.0.0.2:9100", "127.0.0.1", Some(421)),
            ("rebind.attacker.example", "127.0.0.1", Some(421)),
            ("rebind.attacker.example:9100", "127.0.0.1", Some(421)),
            ("localhost.attacker.example", "127.0.0.1", Some(421)),
        ];
        for (host, local, expected) in cases {
            assert_eq!(
                judge(get.clone(), &[("host", host)], local),
                *expected,
                "{host} on {local}"
            );
            // The same Host refused for a GET is refused for a POST.
            if expected.is_some() {
                assert_eq!(judge(Method::POST, &[("host", host)], local), *expected);
            }
        }
        // No Host: no browser.
        assert_eq!(judge(get, &[], "127.0.0.1"), None);
    }

    #[test]
    fn posts_from_other_origins_are_refused() {
        let host = ("host", "127.0.0.1:9100");
        let cases: &[(&[Header], Option<u16>)] = &[
            // curl, scripts
            (&[host], None),
            // the dashboard itself
            (
                &[
                    host,
                    ("origin", "http://127.0.0.1:9100"),
                    ("sec-fetch-site", "same-origin"),
                ],
                None,
            ),
            (
                &[("host", "localhost"), ("origin", "http://localhost:80")],
                None,
            ),
            (&[host, ("sec-fetch-site", "none")], None),
            (
                &[
                    host,
                    ("origin", "http://evil.example"),
                    ("sec-fetch-site", "cross-site"),
                ],
                Some(403),
            ),
            (&[host, ("sec-fetch-site", "cross-site")], Some(403)),
            (&[host, ("sec-fetch-site", "same-site")], Some(403)),
            // Another port of the same address is another origin.
            (&[host, ("origin", "http://127.0.0.1:8000")], Some(403)),
            // So is another scheme: the admin server's pages are http.
            (&[host, ("origin", "https://127.0.0.1:9100")], Some(403)),
            (
                &[("host", "localhost:443"), ("origin", "https://localhost")],
                Some(403),
            ),
            (&[host, ("origin", "HTTP://127.0.0.1:9100")], None),
            (&[host, ("origin", "null")], Some(403)),
            (&[("origin", "http://127.0.0.1:9100")], Some(403)),
        ];
        for (headers, expected) in cases {
            assert_eq!(
                judge(Method::POST, headers, "127.0.0.1"),
                *expected,
                "{headers:?}"
            );
        }
        // A GET is read-only: only its Host is judged.
        assert_eq!(
            judge(
                Method::GET,
                &[host, ("sec-fetch-site", "cross-site")],
                "127.0.0.1"
            ),
            None
        );
    }
}
