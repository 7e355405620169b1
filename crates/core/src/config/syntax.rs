//! Syntax of the string values that have one: endpoint addresses, host names and patterns,
//! hash key templates, status codes and ranges, header and cookie names.
//!
//! Pure functions: each returns the parsed value or a reason in words; the validator adds the
//! position and the path of names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

use super::document::{did_you_mean, quote};
use super::model::{Address, Host, KeyPart, KeyTemplate};

/// Parses an endpoint address: `host:port`, where host is an IPv4 address, an IPv6 address in
/// brackets, or a DNS name; port is 1..=65535.
pub(crate) fn parse_address(s: &str) -> Result<Address, String> {
    const EXAMPLE: &str =
        "write host:port, like \"10.0.0.1:80\", \"[2001:db8::1]:80\" or \"api.example.com:443\"";
    if s.is_empty() {
        return Err(format!("it is empty; {EXAMPLE}"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return Err("missing \"]\" after the IPv6 address".to_owned());
        };
        let ip: Ipv6Addr = ip
            .parse()
            .map_err(|_| format!("{} is not a valid IPv6 address", quote(ip)))?;
        let Some(port) = after.strip_prefix(':') else {
            return Err(format!("it has no port; write it as \"[{ip}]:PORT\""));
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        match s.matches(':').count() {
            0 => return Err(format!("it has no port; {EXAMPLE}")),
            1 => {
                let (host, port) = s.split_once(':').unwrap_or((s, ""));
                (parse_host(host)?, port)
            }
            _ => return Err(unbracketed_ipv6(s)),
        }
    };
    let port = parse_port(port)?;
    Ok(Address {
        text: s.to_owned(),
        host,
        port,
    })
}

/// The message for an IPv6 address written without brackets, with the fix when it is clear.
fn unbracketed_ipv6(s: &str) -> String {
    if let Some((ip, port)) = s.rsplit_once(':')
        && ip.parse::<Ipv6Addr>().is_ok()
        && parse_port(port).is_ok()
    {
        return format!("IPv6 addresses must be in brackets: write \"[{ip}]:{port}\"");
    }
    if s.parse::<Ipv6Addr>().is_ok() {
        return format!("IPv6 addresses must be in brackets and need a port, like \"[{s}]:80\"");
    }
    "IPv6 addresses must be in brackets, like \"[2001:db8::1]:80\"".to_owned()
}

/// A port number 1..=65535 written in decimal.
fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() {
        return Err("the port is missing after \":\"".to_owned());
    }
    if !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port {} is not a number", quote(p)));
    }
    match p.parse::<u32>() {
        Ok(n @ 1..=65535) => Ok(n as u16),
        _ => Err(format!("port {p} is out of range 1..=65535")),
    }
}

/// A host: an IPv4 address or a DNS name (IPv6 needs brackets and is handled by the caller).
fn parse_host(h: &str) -> Result<Host, String> {
    if h.is_empty() {
        return Err("the host is missing before \":\"".to_owned());
    }
    if let Ok(ip) = h.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    if h.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{} is not a valid IPv4 address", quote(h)));
    }
    if !is_host_name(h) {
        return Err(format!(
            "{} is not a valid host name (letters, digits and \"-\" in dot-separated labels of up to 63 characters)",
            quote(h)
        ));
    }
    Ok(Host::Name(h.to_owned()))
}

/// True for a DNS name: dot-separated labels of 1..=63 letters, digits, `-` or `_`, not
/// starting or ending with `-`; at most 253 characters; one trailing dot allowed. (`_` is not a
/// host name character, but service names use it and resolvers accept it.)
pub(crate) fn is_host_name(h: &str) -> bool {
    let h = h.strip_suffix('.').unwrap_or(h);
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// True for a route host pattern: a host name in which `*` stands for any run of characters and
/// `?` for one.
pub(crate) fn is_host_pattern(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 253
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'*' | b'?'))
        && !p.contains("..")
}

/// A route host as written, split into the host and a port (`example.com:8080`,
/// `[2001:db8::1]:443`); a bare IPv6 address has no port to split.
pub fn split_route_host(h: &str) -> (&str, Option<&str>) {
    if h.starts_with('[') {
        return match h.find(']') {
            Some(end) => match h[end + 1..].strip_prefix(':') {
                Some(port) => (&h[..=end], Some(port)),
                None => (h, None),
            },
            None => (h, None),
        };
    }
    match h.rsplit_once(':') {
        Some((name, port))
            if !name.contains(':')
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (name, Some(port))
        }
        _ => (h, None),
    }
}

/// True for a bracketed IPv6 address, as a Host header carries one (`[2001:db8::1]`).
pub(crate) fn is_ipv6_literal(h: &str) -> bool {
    h.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
}

/// True for an HTTP header name (an RFC 9110 token).
pub(crate) fn is_header_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// True for a cookie name (also a token).
pub(crate) fn is_cookie_name(s: &str) -> bool {
    is_header_name(s)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The variables a hash key may use, for messages.
const KNOWN_VARS: &str = "$remote_addr, $request_uri, $http_NAME, $cookie_NAME";

/// Parses a hash key template: literal text and the variables `$remote_addr`, `$request_uri`,
/// `$http_NAME` and `$cookie_NAME`, written `$name` or `${name}` (braces let text follow a
/// variable directly). `$http_X_Forwarded_For` becomes the header `x-forwarded-for`.
pub(crate) fn parse_key_template(s: &str) -> Result<KeyTemplate, String> {
    if s.is_empty() {
        return Err(format!("it is empty; use variables such as {KNOWN_VARS}"));
    }
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = s;
    while let Some(dollar) = rest.find('$') {
        literal.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let (name, next) = if let Some(braced) = after.strip_prefix('{') {
            let Some(end) = braced.find('}') else {
                return Err(format!("\"${{\" without a closing \"}}\" in {}", quote(s)));
            };
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            return Err(format!(
                "\"$\" must be followed by a variable name ({KNOWN_VARS})"
            ));
        }
        let part = variable(name)?;
        if !literal.is_empty() {
            parts.push(KeyPart::Literal(std::mem::take(&mut literal)));
        }
        parts.push(part);
        rest = next;
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(KeyPart::Literal(literal));
    }
    Ok(KeyTemplate {
        text: s.to_owned(),
        parts,
    })
}

/// One variable of a key template, by name (without `$`).
fn variable(name: &str) -> Result<KeyPart, String> {
    match name {
        "remote_addr" => return Ok(KeyPart::RemoteAddr),
        "request_uri" => return Ok(KeyPart::RequestUri),
        _ => {}
    }
    if let Some(header) = name.strip_prefix("http_") {
        if header.is_empty() {
            return Err("\"$http_\" needs a header name, like \"$http_x_user\"".to_owned());
        }
        let header = header.to_ascii_lowercase().replace('_', "-");
        if !is_header_name(&header) {
            return Err(format!("{} is not a valid header name", quote(&header)));
        }
        return Ok(KeyPart::Header(header));
    }
    if let Some(cookie) = name.strip_prefix("cookie_") {
        if cookie.is_empty() || !is_cookie_name(cookie) {
            return Err("\"$cookie_\" needs a cookie name, like \"$cookie_session\"".to_owned());
        }
        return Ok(KeyPart::Cookie(cookie.to_owned()));
    }
    let hint = did_you_mean(name, ["remote_addr", "request_uri"]).replace("mean \"", "mean \"$");
    Err(format!(
        "unknown variable \"${name}\" (known: {KNOWN_VARS}){hint}"
    ))
}

/// Parses one entry of a status list written as a string: `"502"` or a range `"500-599"`.
pub(crate) fn parse_status_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let bad = || {
        format!(
            "invalid status {}: write codes like 502 or ranges like \"500-599\"",
            quote(s)
        )
    };
    let code = |t: &str| -> Result<u16, String> {
        let t = t.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: u32 = t.parse().map_err(|_| bad())?;
        status_code(i64::from(n))
    };
    match s.split_once('-') {
        None => code(s).map(|c| c..=c),
        Some((lo, hi)) => {
            let (lo, hi) = (code(lo)?, code(hi)?);
            if lo > hi {
                return Err(format!(
                    "status range {} is backwards; write \"{hi}-{lo}\"",
                    quote(s)
                ));
            }
            Ok(lo..=hi)
        }
    }
}

/// An HTTP status code, 100..=599.
pub(crate) fn status_code(n: i64) -> Result<u16, String> {
    match u16::try_from(n) {
        Ok(c @ 100..=599) => Ok(c),
        _ => Err(format!("status {n} is out of range 100..=599")),
    }
}

/// The bytes of a check's `send` or `expect` (docs/configuration.md): the string's own bytes,
/// with gtd's escapes decoded after TOML's (so that a literal string `'...'` can carry them,
/// and a basic string `"..."` with its backslash doubled): `\\xHH` any byte, `\\r`, `\\n`,
/// `\\t`, `\\0`, `\\\\` a backslash.
pub(crate) fn unescape_bytes(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let byte = match b.get(i + 1) {
            Some(b'r') => b'\r',
            Some(b'n') => b'\n',
            Some(b't') => b'\t',
            Some(b'0') => 0,
            Some(b'\\') => b'\\',
            Some(b'x') => {
                let hex = b
                    .get(i + 2..i + 4)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 4;
                        continue;
                    }
                    None => {
                        return Err(format!(
                            "\\x at byte {i} needs two hex digits (\\x00 to \\xff)"
                        ));
                    }
                }
            }
            Some(_) | None => {
                let shown: String = s[i..].chars().take(2).collect();
                return Err(format!(
                    "unknown escape {shown:?} at byte {i}; the escapes are \\xHH, \\r, \\n, \\t, \\0 \
                     and \\\\ for a backslash"
                ));
            }
        };
        out.push(byte);
        i += 2;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_bytes_with_escapes() {
        assert_eq!(unescape_bytes(r"PING\r\n").unwrap(), b"PING\r\n");
        assert_eq!(unescape_bytes("real\r\n").unwrap(), b"real\r\n");
        assert_eq!(
            unescape_bytes(r"\x00\xfF\t\0\\").unwrap(),
            [0, 255, 9, 0, b'\\']
        );
        assert_eq!(unescape_bytes("é").unwrap(), "é".as_bytes());
        for bad in [r"\x", r"\x1", r"\xg0", r"\q", "end\\"] {
            assert!(unescape_bytes(bad).is_err(), "{bad}");
        }
    }

    fn addr(s: &str) -> Address {
        parse_address(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn addresses_with_ips_and_names() {
        let a = addr("10.0.0.1:80");
        assert_eq!(a.host, Host::Ip("10.0.0.1".parse().unwrap()));
        assert_eq!(a.port, 80);
        assert_eq!(a.text, "10.0.0.1:80");
        let a = addr("[2001:db8::1]:443");
        assert_eq!(a.host, Host::Ip("2001:db8::1".parse().unwrap()));
        assert_eq!(a.port, 443);
        let a = addr("api-1.example.com:8080");
        assert_eq!(a.host, Host::Name("api-1.example.com".into()));
        assert_eq!(addr("localhost:1").port, 1);
        assert_eq!(addr("backend.:65535").port, 65535);
    }

    #[test]
    fn bad_addresses_say_why() {
        let err = |s: &str| parse_address(s).unwrap_err();
        assert!(err("10.0.0.1").contains("no port"));
        assert!(err("10.0.0.1:").contains("port is missing"));
        assert!(err(":80").contains("host is missing"));
        assert!(err("10.0.0.1:0").contains("port 0 is out of range 1..=65535"));
        assert!(err("10.0.0.1:70000").contains("port 70000 is out of range"));
        assert!(err("10.0.0.1:http").contains("port \"http\" is not a number"));
        assert!(err("10.0.0.256:80").contains("\"10.0.0.256\" is not a valid IPv4 address"));
        assert!(err("bad_host!:80").contains("not a valid host name"));
        assert!(err("-a.example:80").contains("not a valid host name"));
        assert!(err("[::1]").contains("no port"));
        assert!(err("[::zz]:80").contains("not a valid IPv6"));
        assert!(err("[::1:80").contains("missing \"]\""));
        assert!(err("").contains("empty"));
    }

    #[test]
    fn ipv6_without_brackets_gets_the_fix() {
        assert_eq!(
            parse_address("::1:80").unwrap_err(),
            "IPv6 addresses must be in brackets: write \"[::1]:80\""
        );
        assert_eq!(
            parse_address("2001:db8::1:8080").unwrap_err(),
            "IPv6 addresses must be in brackets: write \"[2001:db8::1]:8080\""
        );
        assert!(
            parse_address("fe80::1::2:3")
                .unwrap_err()
                .contains("must be in brackets")
        );
    }

    #[test]
    fn host_names_and_patterns() {
        assert!(is_host_name("a.b-c.example"));
        assert!(is_host_name("_srv.example."));
        assert!(!is_host_name("a..b"));
        assert!(!is_host_name(&"a".repeat(64)));
        assert!(!is_host_name("a b"));
        assert!(is_host_pattern("*.example.com"));
        assert!(is_host_pattern("api-?.example.com"));
        assert!(!is_host_pattern("exa mple.com"));
        assert!(!is_host_pattern(""));
    }

    #[test]
    fn key_templates_split_into_parts() {
        let t = parse_key_template("$remote_addr").unwrap();
        assert_eq!(t.parts, vec![KeyPart::RemoteAddr]);
        let t = parse_key_template("u:${http_X_User}/$cookie_Session-$request_uri").unwrap();
        assert_eq!(
            t.parts,
            vec![
                KeyPart::Literal("u:".into()),
                KeyPart::Header("x-user".into()),
                KeyPart::Literal("/".into()),
                KeyPart::Cookie("Session".into()),
                KeyPart::Literal("-".into()),
                KeyPart::RequestUri,
            ]
        );
        assert_eq!(t.text, "u:${http_X_User}/$cookie_Session-$request_uri");
        assert_eq!(
            parse_key_template("static").unwrap().parts,
            vec![KeyPart::Literal("static".into())]
        );
        assert!(KeyPart::Header("a".into()).http_only() && !KeyPart::RemoteAddr.http_only());
    }

    #[test]
    fn bad_key_templates_say_why() {
        let err = |s: &str| parse_key_template(s).unwrap_err();
        assert_eq!(
            err("$remote_adr"),
            "unknown variable \"$remote_adr\" (known: $remote_addr, $request_uri, $http_NAME, $cookie_NAME); did you mean \"$remote_addr\"?"
        );
        assert!(err("$host").starts_with("unknown variable \"$host\""));
        assert!(err("a$").contains("must be followed by a variable name"));
        assert!(err("${http_x").contains("closing"));
        assert!(err("$http_").contains("needs a header name"));
        assert!(err("$cookie_").contains("needs a cookie name"));
        assert!(err("").contains("empty"));
    }

    #[test]
    fn status_codes_and_ranges() {
        assert_eq!(parse_status_range("502"), Ok(502..=502));
        assert_eq!(parse_status_range("500-599"), Ok(500..=599));
        assert!(
            parse_status_range("5xx")
                .unwrap_err()
                .contains("invalid status \"5xx\"")
        );
        assert!(
            parse_status_range("599-500")
                .unwrap_err()
                .contains("backwards")
        );
        assert!(
            parse_status_range("99-200")
                .unwrap_err()
                .contains("status 99 is out of range 100..=599")
        );
        assert_eq!(
            status_code(600),
            Err("status 600 is out of range 100..=599".to_owned())
        );
    }
}
