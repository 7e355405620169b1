//! Custom forwarding rules of HTTP/HTTPS listeners (docs/design.md §3.5), pure: which `[[listener.route]]`
//! a request takes, so the cascade runs over only that route's groups.
//!
//! Precedence (Alibaba GA's forwarding rules):
//! 1. rules with a host **and** path prefixes;
//! 2. rules with a host only;
//! 3. rules with path prefixes only;
//! 4. rules with a header condition only;
//! 5. the default (every group of the listener).
//!
//! Among rules of one level an exact host beats a wildcard, then the longest matching path
//! prefix wins, then config order (docs/design.md §3.5; a header condition only filters: a canary rule must
//! come before its plain twin, and `gtd check` warns about a rule an earlier one shadows).
//!
//! A request whose host matches some rule (its header condition, if any, met) while no rule
//! matches its path and no host-only rule exists gets 404 (as GA does) instead of the default.
//! A path-only rule is a rule for the path, so it still applies to such a host.
//!
//! Hosts compare case-insensitively with the port stripped (`Example.COM:8080` is
//! `example.com`); `*` matches any run of characters and `?` exactly one. Path prefixes compare
//! byte for byte. Matching allocates nothing.

use crate::config::Route;

/// What a forwarding rule matches, in the config's words (`host …, path …, header …`), as
/// `sim` and `/status` name it.
pub fn describe(rule: &Route) -> String {
    let mut parts = Vec::new();
    if let Some(h) = &rule.host {
        parts.push(format!("host {h}"));
    }
    if !rule.path_prefix.is_empty() {
        parts.push(format!("path {}", rule.path_prefix.join(" ")));
    }
    if let Some(h) = &rule.header {
        parts.push(format!("header {}: {}", h.name, h.value));
    }
    if parts.is_empty() {
        parts.push("any request".to_owned());
    }
    parts.join(", ")
}

/// The outcome of matching one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// No rule applies: the cascade runs over every group.
    Default,
    /// The rule at this index (config order) applies.
    Route(usize),
    /// The host is claimed by some rule but none covers this path: answer 404.
    NotFound,
}

/// The rules of one listener, prepared for matching (patterns lower-cased once).
#[derive(Debug, Clone)]
pub struct Rules {
    rules: Box<[Rule]>,
}

#[derive(Debug, Clone)]
struct Rule {
    host: Option<HostPattern>,
    prefixes: Box<[Box<str>]>,
    header: Option<(Box<str>, Box<str>)>,
}

#[derive(Debug, Clone)]
struct HostPattern {
    pattern: Box<str>,
    wildcard: bool,
}

/// What a rule needs to know about a request.
pub trait RouteRequest {
    /// The request's host (`Host` header or `:authority`), as received (port and case included).
    fn host(&self) -> Option<&str>;
    /// The request path (no query).
    fn path(&self) -> &str;
    /// The first value of a header, by lower-case name.
    fn header(&self, name: &str) -> Option<&str>;
}

/// A request given by its parts (`sim --host --path --header`, tests): headers as
/// (name, value) pairs, names in any case.
#[derive(Debug, Clone, Copy)]
pub struct Parts<'a, S> {
    /// The host, as received.
    pub host: Option<&'a str>,
    /// The path (no query).
    pub path: &'a str,
    /// The header fields.
    pub headers: &'a [(S, S)],
}

impl<S: AsRef<str>> RouteRequest for Parts<'_, S> {
    fn host(&self) -> Option<&str> {
        self.host
    }

    fn path(&self) -> &str {
        self.path
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// Rank of a match within its level: exact host, prefix length, then earlier rules (higher is
/// better).
type Rank = (bool, usize, std::cmp::Reverse<usize>);

impl Rules {
    /// Prepares the listener's `[[listener.route]]` rules.
    pub fn new(routes: &[Route]) -> Rules {
        let rules = routes
            .iter()
            .map(|r| Rule {
                host: r.host.as_ref().map(|h| HostPattern {
                    pattern: h.to_ascii_lowercase().into(),
                    wildcard: h.contains(['*', '?']),
                }),
                prefixes: r.path_prefix.iter().map(|p| p.as_str().into()).collect(),
                header: r
                    .header
                    .as_ref()
                    .map(|h| (h.name.to_ascii_lowercase().into(), h.value.as_str().into())),
            })
            .collect();
        Rules { rules }
    }

    /// True when the listener has no rules (every request takes the default).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// The rule `request` takes. Allocation-free.
    pub fn find(&self, request: &impl RouteRequest) -> Match {
        if self.rules.is_empty() {
            return Match::Default;
        }
        let host = request.host().map(strip_port);
        let path = request.path();
        let mut host_path: Option<(Rank, usize)> = None;
        let mut host_only: Option<(Rank, usize)> = None;
        let mut path_only: Option<(Rank, usize)> = None;
        let mut header_only: Option<(Rank, usize)> = None;
        let mut host_claimed = false;
        for (i, rule) in self.rules.iter().enumerate() {
            if let Some((name, value)) = &rule.header
                && request.header(name) != Some(&**value)
            {
                continue;
            }
            let exact = match (&rule.host, host) {
                (Some(p), Some(h)) => {
                    if !p.matches(h) {
                        continue;
                    }
                    host_claimed = true;
                    !p.wildcard
                }
                (Some(_), None) => continue,
                (None, _) => false,
            };
            let prefix = if rule.prefixes.is_empty() {
                Some(0)
            } else {
                rule.prefixes
                    .iter()
                    .filter(|p| path.starts_with(&***p))
                    .map(|p| p.len())
                    .max()
            };
            let Some(prefix) = prefix else { continue };
            let rank = (exact, prefix, std::cmp::Reverse(i));
            let slot = match (rule.host.is_some(), !rule.prefixes.is_empty()) {
                (true, true) => &mut host_path,
                (true, false) => &mut host_only,
                (false, true) => &mut path_only,
                (false, false) => &mut header_only,
            };
            if slot.is_none_or(|(best, _)| rank > best) {
                *slot = Some((rank, i));
            }
        }
        match host_path.or(host_only).or(path_only).or(header_only) {
            Some((_, i)) => Match::Route(i),
            None if host_claimed => Match::NotFound,
            None => Match::Default,
        }
    }
}

impl HostPattern {
    fn matches(&self, host: &str) -> bool {
        if self.wildcard {
            glob(self.pattern.as_bytes(), host.as_bytes())
        } else {
            self.pattern.eq_ignore_ascii_case(host)
        }
    }
}

/// The host without its port and without a trailing dot: `[::1]:80` → `[::1]`,
/// `example.com.:8080` → `example.com`.
fn strip_port(host: &str) -> &str {
    let host = if host.starts_with('[') {
        host.find(']').map_or(host, |end| &host[..=end])
    } else {
        match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        }
    };
    host.strip_suffix('.').unwrap_or(host)
}

/// Wildcard match, ASCII case-insensitive: `*` any run (also empty), `?` one byte. The pattern
/// is lower case already. Iterative with one backtrack point: O(len(p) * len(s)) at worst.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si].to_ascii_lowercase()) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// `NAME:VALUE` of a request header (`--header`): the name checked, both trimmed.
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected NAME:VALUE"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{s:?}: the header name is empty"));
    }
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!(
            "{name:?}: not a header name (letters, digits and !#$%&'*+-.^_`|~, no spaces)"
        ));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HeaderMatch;

    type Req<'a> = Parts<'a, &'a str>;

    fn route(host: Option<&str>, paths: &[&str], header: Option<(&str, &str)>) -> Route {
        Route {
            host: host.map(str::to_owned),
            path_prefix: paths.iter().map(|p| (*p).to_owned()).collect(),
            header: header.map(|(n, v)| HeaderMatch {
                name: n.into(),
                value: v.into(),
            }),
            groups: vec!["g".into()],
        }
    }

    fn find(rules: &Rules, host: &str, path: &str) -> Match {
        rules.find(&Req {
            host: Some(host),
            path,
            headers: &[],
        })
    }

    #[test]
    fn glob_wildcards() {
        assert!(glob(b"*.example.com", b"api.example.com"));
        assert!(glob(b"*.example.com", b"A.B.EXAMPLE.com"));
        assert!(!glob(b"*.example.com", b"example.com"));
        assert!(glob(b"api-?.example.com", b"api-1.example.com"));
        assert!(!glob(b"api-?.example.com", b"api-12.example.com"));
        assert!(glob(b"*", b""));
        assert!(glob(b"a*b*c", b"axxbyyc"));
        assert!(!glob(b"a*b*c", b"axxbyy"));
        assert!(glob(b"**x", b"abcx"));
    }

    #[test]
    fn ports_case_and_trailing_dots_are_ignored() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com."), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        let rules = Rules::new(&[route(Some("Example.com"), &[], None)]);
        assert_eq!(find(&rules, "EXAMPLE.COM:8080", "/"), Match::Route(0));
        let rules = Rules::new(&[route(Some("[::1]"), &[], None)]);
        assert_eq!(find(&rules, "[::1]:8080", "/"), Match::Route(0));
        assert_eq!(find(&rules, "[::1]", "/"), Match::Route(0));
    }

    #[test]
    fn precedence_host_path_then_host_then_path_then_default() {
        let rules = Rules::new(&[
            route(None, &["/api/"], None),                  // 0 path only
            route(Some("a.example.com"), &[], None),        // 1 host only
            route(Some("a.example.com"), &["/api/"], None), // 2 host + path
            route(Some("b.example.com"), &["/v2/"], None),  // 3 host + path, no host-only twin
        ]);
        assert_eq!(find(&rules, "a.example.com", "/api/x"), Match::Route(2));
        assert_eq!(find(&rules, "a.example.com", "/other"), Match::Route(1));
        assert_eq!(find(&rules, "c.example.com", "/api/x"), Match::Route(0));
        assert_eq!(find(&rules, "c.example.com", "/other"), Match::Default);
        assert_eq!(find(&rules, "b.example.com", "/v2/x"), Match::Route(3));
        // b's host is claimed by a rule and has no host-only rule: a path-only rule for its path
        // still applies; a path no rule covers is 404, not the default.
        assert_eq!(find(&rules, "b.example.com", "/api/x"), Match::Route(0));
        assert_eq!(find(&rules, "b.example.com", "/"), Match::NotFound);
    }

    #[test]
    fn exact_host_beats_wildcard_then_longest_prefix_then_order() {
        let rules = Rules::new(&[
            route(Some("*.example.com"), &["/api/v1/"], None), // 0
            route(Some("api.example.com"), &["/api/"], None),  // 1
            route(Some("*.example.com"), &["/api/"], None),    // 2
            route(Some("*.example.com"), &["/api/"], None),    // 3 (never: 2 is earlier)
            route(Some("*.example.com"), &[], None),           // 4
        ]);
        // Exact host wins even with a shorter prefix.
        assert_eq!(
            find(&rules, "api.example.com", "/api/v1/x"),
            Match::Route(1)
        );
        // Among wildcards the longest prefix wins.
        assert_eq!(
            find(&rules, "www.example.com", "/api/v1/x"),
            Match::Route(0)
        );
        // Equal: config order.
        assert_eq!(find(&rules, "www.example.com", "/api/v2/"), Match::Route(2));
        assert_eq!(find(&rules, "www.example.com", "/"), Match::Route(4));
        // The exact host has no host-only rule, but the wildcard's host-only rule covers it.
        assert_eq!(find(&rules, "api.example.com", "/"), Match::Route(4));
    }

    #[test]
    fn longest_of_several_prefixes_counts() {
        let rules = Rules::new(&[
            route(None, &["/a/", "/a/b/c/"], None),
            route(None, &["/a/b/"], None),
        ]);
        assert_eq!(find(&rules, "x", "/a/b/c/d"), Match::Route(0));
        assert_eq!(find(&rules, "x", "/a/b/x"), Match::Route(1));
        assert_eq!(find(&rules, "x", "/a/x"), Match::Route(0));
    }

    #[test]
    fn headers_filter_and_ties_go_by_config_order() {
        let rules = Rules::new(&[
            route(Some("a.example.com"), &["/"], Some(("X-Canary", "1"))),
            route(Some("a.example.com"), &["/"], None),
            route(Some("a.example.com"), &["/"], Some(("X-Beta", "1"))), // shadowed by 1
            route(None, &[], Some(("x-beta", "yes"))),
        ]);
        let req = |headers| Req {
            host: Some("a.example.com"),
            path: "/x",
            headers,
        };
        assert_eq!(rules.find(&req(&[])), Match::Route(1));
        assert_eq!(rules.find(&req(&[("x-canary", "1")])), Match::Route(0));
        assert_eq!(rules.find(&req(&[("x-canary", "2")])), Match::Route(1));
        assert_eq!(rules.find(&req(&[("x-beta", "1")])), Match::Route(1));
        let other = Req {
            host: Some("z.example.com"),
            path: "/",
            headers: &[("x-beta", "yes")],
        };
        assert_eq!(rules.find(&other), Match::Route(3));
        // A header-only rule covers every path, so a claimed host with it is not 404.
        let claimed = Req {
            host: Some("a.example.com"),
            path: "/",
            headers: &[("x-beta", "yes")],
        };
        let rules = Rules::new(&[
            route(Some("a.example.com"), &["/api/"], None),
            route(None, &[], Some(("x-beta", "yes"))),
        ]);
        assert_eq!(rules.find(&claimed), Match::Route(1));
        assert_eq!(find(&rules, "a.example.com", "/"), Match::NotFound);
    }

    #[test]
    fn a_host_rule_whose_header_is_absent_does_not_claim_the_host() {
        let rules = Rules::new(&[route(Some("a.example.com"), &[], Some(("x-canary", "1")))]);
        assert_eq!(find(&rules, "a.example.com", "/"), Match::Default);
    }

    #[test]
    fn no_host_and_no_rules() {
        let rules = Rules::new(&[route(Some("a.example.com"), &[], None)]);
        let req = Req {
            host: None,
            path: "/",
            headers: &[],
        };
        assert_eq!(rules.find(&req), Match::Default);
        assert_eq!(Rules::new(&[]).find(&req), Match::Default);
    }
}
