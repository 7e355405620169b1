//! `gtd check` = `gtd run` (issue 28 item 5): over configs whose string values are mutated with
//! the bytes that break wire syntax (space, CR, LF, `<`, non-ASCII, control bytes, empty), the
//! config validation `gtd check` runs accepts exactly the configs a node starts with. A node's
//! start is that validation followed by [`Snapshot::build`] (sockets apart), so the property is:
//! whatever validation accepts, the snapshot builds for every region the config serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use proptest::prelude::*;

use super::dns;
use super::snapshot::Snapshot;
use super::telemetry::Registry;
use gtd_core::config::{self, Config};
use gtd_core::regions::Catalog;

/// Every string a config turns into wire bytes, in one file: a route (host, path prefix,
/// header), a group path prefix, a feedback header, an SNI, an HTTP check's path, host,
/// headers and body, endpoints by name and by address, a sticky cookie and an admin token.
const WIRE: &str = r#"catalog = "regions/catalog.toml"

[admin]
bind = "127.0.0.1:9100"
token = "secret"

[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]
sticky = { cookie = "gtd_sticky" }

  [[listener.route]]
  host = "api.example.com"
  path_prefix = ["/api/", "/v2"]
  header = { name = "X-Env", value = "blue" }
  groups = ["beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  path_prefix = "/v1/"
  balance = "feedback"
  feedback_header = "X-Load"

    [listener.group.tls]
    sni = "api.example.com"
    min_version = "1.3"

    [listener.group.health_check]
    protocol = "https"
    method = "POST"
    path = "/health?full=1"
    host = "health.example.com:8443"
    headers = { "X-Check" = "gtd", Accept = "*/*" }
    body = "ping"
    expect_headers = { "X-Ok" = "yes" }
    expect_body = "pong"

    [[listener.group.endpoint]]
    address = "api.example.com:443"

    [[listener.group.endpoint]]
    address = "[2001:db8::1]:443"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  balance = "hash"
  hash_key = "$http_x_user$cookie_id"

    [listener.group.health_check]
    protocol = "http"
    path = "/"

    [[listener.group.endpoint]]
    address = "127.0.0.1:9101"
"#;

/// What is put into a string: the bytes that break the syntax of a request line or header,
/// and some that do not.
const INSERTS: &[&str] = &[
    "",
    " ",
    "\r\n",
    "\r",
    "\n",
    "\r\nX-Injected: 1",
    "<",
    ">",
    "é",
    "\u{1}",
    "\u{0}",
    "\u{7f}",
    "\t",
    "#",
    "?",
    "%",
    "%zz",
    "\"",
    "\\",
    "@",
    ":",
    "/",
    "*",
    "[",
    "{",
    "\u{80}",
    "\u{feff}",
    "a",
    "-",
];

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn catalog() -> Catalog {
    config::load_catalog(&root().join("regions/catalog.toml")).unwrap()
}

/// The spans (start, end: the quotes excluded) of the basic strings of `text`.
fn strings(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut comment = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => comment = false,
            b'#' if !comment => comment = true,
            b'"' if !comment => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                out.push((start, j));
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `s` written as the inside of a TOML basic string.
fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `text` with string `which` (modulo their count) changed: `insert` put at character `at`
/// (modulo its length + 1), or the whole string replaced by it.
fn mutate(text: &str, which: usize, insert: &str, at: usize, replace: bool) -> String {
    let spans = strings(text);
    let (start, end) = spans[which % spans.len()];
    let inside = &text[start..end];
    let mut chars: Vec<char> = inside.chars().collect();
    let changed: String = if replace {
        insert.to_owned()
    } else {
        // Escapes in the original stay as written: only unescaped strings are cut.
        let at = at % (chars.len() + 1);
        let tail = chars.split_off(at);
        let head: String = chars.into_iter().collect();
        let tail: String = tail.into_iter().collect();
        return format!(
            "{}{head}{}{tail}{}",
            &text[..start],
            escape(insert),
            &text[end..]
        );
    };
    format!("{}{}{}", &text[..start], escape(&changed), &text[end..])
}

/// What a node's start does with `config` after validation, for every region it serves: the
/// snapshot build (certificates, clients, checks, rules).
fn start(config: Config) -> Result<(), String> {
    let config = Arc::new(config);
    let mut regions: Vec<&String> = config.listeners.iter().flat_map(|l| &l.regions).collect();
    regions.sort();
    regions.dedup();
    let names = dns::Table::new();
    for region in regions {
        Snapshot::build(
            config.clone(),
            region,
            None,
            &Registry::new(),
            &names,
            Instant::now(),
        )
        .map_err(|e| format!("{region}: {e}"))?;
    }
    Ok(())
}

/// The strings of `config` that go onto a request line or into a header, and whether each
/// keeps to its syntax there: request targets and Host visible ASCII without a fragment (a
/// prefix without a query either), header values without an ASCII control byte but tab (obs-text is
/// allowed, RFC 9110 §5.5).
fn wire_strings(config: &Config) -> Vec<(&str, bool)> {
    let target = |s: &str, query: bool| {
        s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'#' && (query || b != b'?'))
    };
    let mut out = Vec::new();
    for g in config.listeners.iter().flat_map(|l| &l.groups) {
        if let Some(p) = &g.path_prefix {
            out.push((p.as_str(), target(p, false)));
        }
        if let Some(c) = &g.health_check {
            out.push((c.path.as_str(), target(&c.path, true)));
            if let Some(h) = &c.host {
                out.push((h.as_str(), target(h, false)));
            }
            for (k, v) in &c.headers {
                let token = |b: u8| b.is_ascii_graphic() && !b"\"(),/:;<=>?@[\\]{}".contains(&b);
                out.push((k.as_str(), !k.is_empty() && k.bytes().all(token)));
                let value = v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f));
                out.push((v.as_str(), value));
            }
        }
    }
    out
}

fn check_equals_run(base: &str, catalog: &Catalog, file: &Path, mutated: &str) {
    let changed = || {
        mutated
            .lines()
            .zip(base.lines())
            .find(|(m, b)| m != b)
            .map_or("", |(m, _)| m)
            .to_owned()
    };
    if let Ok(config) = config::parse(mutated, file, catalog) {
        // Nothing accepted goes onto the wire breaking its syntax there.
        for (s, ok) in wire_strings(&config) {
            assert!(
                ok,
                "gtd check accepted {s:?} for the wire\nchanged line: {}",
                changed()
            );
        }
        // The node's start: what the validation accepted must start.
        if let Err(e) = start(config) {
            panic!(
                "gtd check accepted, the node refused: {e}\nchanged line: {}",
                changed()
            );
        }
    }
}

#[test]
fn the_unmutated_configs_start() {
    let catalog = catalog();
    let file = root().join("config.toml");
    for text in [WIRE.to_owned(), std::fs::read_to_string(&file).unwrap()] {
        let config = config::parse(&text, &file, &catalog).unwrap();
        start(config).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn check_accepts_exactly_what_a_node_starts_with(
        base in prop::sample::select(vec![0_usize, 1]),
        which in 0_usize..1000,
        insert in prop::sample::select(INSERTS),
        at in 0_usize..64,
        replace in any::<bool>(),
        twice in prop::option::of((0_usize..1000, prop::sample::select(INSERTS), 0_usize..64)),
    ) {
        let catalog = catalog();
        let file = root().join("config.toml");
        let text = match base {
            0 => WIRE.to_owned(),
            _ => std::fs::read_to_string(&file).unwrap(),
        };
        let mut mutated = mutate(&text, which, insert, at, replace);
        if let Some((which, insert, at)) = twice {
            mutated = mutate(&mutated, which, insert, at, false);
        }
        check_equals_run(&text, &catalog, &file, &mutated);
    }
}
