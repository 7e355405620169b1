//! Balancing methods (docs/design.md §4): `balance`, its aliases, and the parameters each method takes.

use super::fields::choice;
use crate::config::document::{At, Ctx, Table, as_str, did_you_mean, one_of, quote};
use crate::config::model::*;
use crate::config::syntax;

/// A balancing method before its parameters are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    RoundRobin,
    Hash,
    IpHash,
    LeastConn,
    Random,
    LeastTime,
    Feedback,
}

/// Names accepted for `balance`, Apigee's aliases included.
const METHODS: &[(&str, Method)] = &[
    ("round_robin", Method::RoundRobin),
    ("hash", Method::Hash),
    ("ip_hash", Method::IpHash),
    ("least_conn", Method::LeastConn),
    ("random", Method::Random),
    ("least_time", Method::LeastTime),
    ("feedback", Method::Feedback),
    ("RoundRobin", Method::RoundRobin),
    ("Weighted", Method::RoundRobin),
    ("LeastConnections", Method::LeastConn),
];

/// The group-level keys that are parameters of some method.
const METHOD_PARAMS: &[&str] = &[
    "hash_key",
    "consistent",
    "two",
    "measure",
    "factor",
    "feedback_header",
    "inverse",
];

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::RoundRobin => "round_robin",
            Method::Hash => "hash",
            Method::IpHash => "ip_hash",
            Method::LeastConn => "least_conn",
            Method::Random => "random",
            Method::LeastTime => "least_time",
            Method::Feedback => "feedback",
        }
    }

    /// The group-level parameters the method takes.
    fn params(self) -> &'static [&'static str] {
        match self {
            Method::Hash => &["hash_key", "consistent"],
            Method::Random => &["two"],
            Method::LeastTime => &["measure", "factor"],
            Method::Feedback => &["feedback_header", "inverse", "factor"],
            Method::RoundRobin | Method::IpHash | Method::LeastConn => &[],
        }
    }

    /// Whether endpoints may set this parameter under the method (docs/design.md §4's table).
    pub(super) fn endpoint_param(self, key: &str) -> bool {
        match key {
            "weight" => self != Method::LeastTime,
            "slow_start" | "backup" => {
                !matches!(self, Method::Hash | Method::IpHash | Method::Random)
            }
            _ => true,
        }
    }

    /// Records `balancing method "m" does not support parameter "p"` at the key.
    pub(super) fn reject(self, ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str) {
        if let Some(at) = t.key_at(key) {
            let msg = format!(
                "balancing method {} does not support parameter {}",
                quote(self.name()),
                quote(key)
            );
            ctx.error(at, &t.path, msg);
        }
    }
}

/// The `balance` value: a method name or one of Apigee's aliases.
fn method(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<At<Method>> {
    let v = t.value("balance")?;
    let at = v.span().start;
    let canonical: Vec<&str> = METHODS.iter().take(7).map(|(n, _)| *n).collect();
    let s = as_str(ctx, v, &t.path, "\"balance\"")?;
    if let Some((_, m)) = METHODS.iter().find(|(n, _)| *n == s) {
        return Some(At { v: *m, at });
    }
    let hint = did_you_mean(s, METHODS.iter().map(|(n, _)| *n));
    let msg = format!(
        "unknown balancing method {} (expected {}){hint}",
        quote(s),
        one_of(&canonical)
    );
    ctx.error(at, &t.path, msg);
    None
}

/// `balance` and its parameters; `None` when the method is unknown.
pub(super) fn balance(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    protocol: Option<Protocol>,
) -> Option<(Balance, Method)> {
    let (method, at) = if t.has("balance") {
        let m = method(ctx, t)?;
        (m.v, m.at)
    } else {
        (Method::RoundRobin, t.at)
    };
    for key in METHOD_PARAMS {
        if !method.params().contains(key) {
            method.reject(ctx, t, key);
        }
    }
    let http = protocol.is_none_or(Protocol::is_http);
    let balance = match method {
        Method::RoundRobin => Balance::RoundRobin,
        Method::LeastConn => Balance::LeastConn,
        Method::IpHash => {
            if !http {
                let msg = "balancing method \"ip_hash\" is only for http/https listeners; on tcp/udp use \
                           balance = \"hash\" with hash_key = \"$remote_addr\"";
                ctx.error(at, &t.path, msg);
            }
            Balance::IpHash
        }
        Method::Hash => {
            let key = match t.str(ctx, "hash_key") {
                Some(s) => hash_key(ctx, t, s, http),
                None => {
                    if !t.has("hash_key") {
                        let msg = "balancing method \"hash\" needs a hash_key, like hash_key = \"$remote_addr\"";
                        ctx.error(at, &t.path, msg);
                    }
                    None
                }
            };
            let consistent = t.bool(ctx, "consistent").unwrap_or(false);
            Balance::Hash {
                key: key.unwrap_or(KeyTemplate {
                    text: String::new(),
                    parts: Vec::new(),
                }),
                consistent,
            }
        }
        Method::Random => Balance::Random {
            two: t.bool(ctx, "two").unwrap_or(false),
        },
        Method::LeastTime => {
            let measure = measure(ctx, t, protocol);
            Balance::LeastTime {
                measure,
                factor: factor(ctx, t),
            }
        }
        Method::Feedback => {
            let header = match t.nonempty_str(ctx, "feedback_header") {
                Some(h) if syntax::is_header_name(h.v) => h.v.to_owned(),
                Some(h) => {
                    ctx.error(
                        h.at,
                        &t.path,
                        format!("{} is not a valid header name", quote(h.v)),
                    );
                    String::new()
                }
                None => {
                    if !t.has("feedback_header") {
                        let msg = "balancing method \"feedback\" needs feedback_header, the response header \
                                   carrying each endpoint's value";
                        ctx.error(at, &t.path, msg);
                    }
                    String::new()
                }
            };
            let inverse = t.bool(ctx, "inverse").unwrap_or(false);
            Balance::Feedback {
                header,
                inverse,
                factor: factor(ctx, t),
            }
        }
    };
    Some((balance, method))
}

/// `hash_key`: a template whose variables exist for the listener's protocol.
fn hash_key(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, s: At<&str>, http: bool) -> Option<KeyTemplate> {
    match syntax::parse_key_template(s.v) {
        Ok(key) => {
            if !http && let Some(part) = key.parts.iter().find(|p| p.http_only()) {
                let var = match part {
                    KeyPart::RequestUri => "$request_uri".to_owned(),
                    KeyPart::Header(h) => format!("$http_{}", h.replace('-', "_")),
                    KeyPart::Cookie(c) => format!("$cookie_{c}"),
                    KeyPart::RemoteAddr | KeyPart::Literal(_) => String::new(),
                };
                let msg = format!(
                    "hash_key variable {} is only available on http/https listeners; tcp/udp listeners can use $remote_addr",
                    quote(&var)
                );
                ctx.error(s.at, &t.path, msg);
                return None;
            }
            Some(key)
        }
        Err(why) => {
            ctx.error(
                s.at,
                &t.path,
                format!("invalid hash_key {}: {why}", quote(s.v)),
            );
            None
        }
    }
}

/// `measure` of least_time, checked against the listener's protocol.
fn measure(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, protocol: Option<Protocol>) -> Measure {
    const ALL: &[(&str, Measure)] = &[
        ("header", Measure::Header),
        ("last_byte", Measure::LastByte),
        ("connect", Measure::Connect),
        ("first_byte", Measure::FirstByte),
    ];
    let http = protocol.is_none_or(Protocol::is_http);
    let default = Measure::default_for(http);
    let Some(m) = choice(ctx, t, "measure", ALL) else {
        return default;
    };
    let Some(protocol) = protocol else { return m.v };
    let ok = match m.v {
        Measure::Header => protocol.is_http(),
        Measure::Connect | Measure::FirstByte => !protocol.is_http(),
        Measure::LastByte => true,
    };
    if !ok {
        let name = ALL.iter().find(|(_, v)| *v == m.v).map_or("", |(n, _)| n);
        let msg = if protocol.is_http() {
            format!(
                "measure {} is only for tcp/udp listeners; http/https listeners measure \"header\" or \"last_byte\"",
                quote(name)
            )
        } else {
            format!(
                "measure {} is only for http/https listeners; tcp/udp listeners measure \"connect\", \"first_byte\" or \"last_byte\"",
                quote(name)
            )
        };
        ctx.error(m.at, &t.path, msg);
    }
    m.v
}

/// `factor`: the weight the history keeps per sample, in [0, 1), default 0.9.
fn factor(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> f64 {
    let Some(n) = t.number(ctx, "factor") else {
        return Balance::DEFAULT_FACTOR;
    };
    let (x, written) = n.v;
    if (0.0..1.0).contains(&x) {
        x
    } else {
        ctx.error(
            n.at,
            &t.path,
            format!("factor {written} is out of range 0..1 (at least 0, below 1)"),
        );
        Balance::DEFAULT_FACTOR
    }
}
