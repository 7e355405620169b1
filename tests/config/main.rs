//! The config loader and validator from the outside: exact messages and positions for the
//! mistakes operators make, every error in one run, a complete valid config parsed into the
//! model with its defaults, the shipped catalogue, and `gtd check` end to end.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gtd::config::{
    self, Affinity, Balance, CheckMethod, CheckProtocol, Config, FailoverMode, Host, KeyPart,
    Measure, Priority, Protocol, ProxyProtocol, StatusSet, TlsVersion,
};
use gtd::regions::Catalog;

#[path = "../common/mod.rs"]
mod common;

mod balance;
mod capacity;
mod catalogue;
mod check;
mod geoip;
mod log;
mod mistakes;
mod protocol;
mod talk_and_rank;
mod tls;
mod valid;
mod wire;

fn catalog_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regions/catalog.toml")
}

fn catalog() -> Catalog {
    config::load_catalog(&catalog_path()).expect("the shipped catalogue is valid")
}

/// Validates `text` as `config.toml` against the shipped catalogue.
fn parse(text: &str) -> Result<Config, Vec<String>> {
    config::parse(text, Path::new("config.toml"), &catalog())
        .map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

/// The errors of an invalid config, in the order reported.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors, the config is valid:\n{text}"),
        Err(e) => e,
    }
}

/// The single error of an invalid config.
fn error(text: &str) -> String {
    let e = errors(text);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    e.into_iter().next().unwrap()
}

/// Checks a table of (config text, every error it gives, in the order reported).
fn assert_errors(cases: &[(String, &[&str])]) {
    for (text, expected) in cases {
        assert_eq!(errors(text), *expected, "config:\n{text}");
    }
}

/// The head (lines 1-5) of an http listener "web" on 8080 served from cn-beijing.
const WEB: &str = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]"#;

/// The head (lines 1-5) of a tcp listener "game" on 7000 served from cn-beijing.
const GAME: &str = r#"[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]"#;

/// A listener of one group: `head` (the listener's lines), a blank line, group "beijing" in
/// cn-beijing with the lines `group` after its name and region, and one endpoint 10.0.0.1:80
/// with the lines `endpoint` after its address.
fn one_group(head: &str, group: &str, endpoint: &str) -> String {
    format!(
        "{head}\n\n  [[listener.group]]\n  name = \"beijing\"\n  region = \"cn-beijing\"\n{group}    \
         [[listener.group.endpoint]]\n    address = \"10.0.0.1:80\"\n{endpoint}"
    )
}

fn valid(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("expected a valid config, got:\n{}", e.join("\n")))
}

/// The shipped example's shape: two acceleration regions, an http listener at 50/50, a tcp
/// and a udp listener.
const EXAMPLE: &str = r#"catalog = "regions/catalog.toml"

[admin]
bind = "127.0.0.1:9100"

[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50

    [[listener.group.endpoint]]
    address = "127.0.0.1:9001"
    weight = 1

    [[listener.group.endpoint]]
    address = "127.0.0.1:9002"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50

    [[listener.group.endpoint]]
    address = "127.0.0.1:9101"

    [[listener.group.endpoint]]
    address = "127.0.0.1:9102"

[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9011"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9111"

[[listener]]
name = "voice"
protocol = "udp"
port = 7000
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  balance = "hash"
  hash_key = "$remote_addr"
    [listener.group.health_check]
    port = 9020
    [[listener.group.endpoint]]
    address = "127.0.0.1:9021"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  balance = "hash"
  hash_key = "$remote_addr"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9121"
"#;

/// Real certificates and keys in `dir`: site.pem/.key, other.pem/.key (server), client.pem/.key
/// (client) and the CA that signed them, ca.pem.
fn write_pki(dir: &Path) {
    let pki = common::Pki::new();
    std::fs::create_dir_all(dir).unwrap();
    for (name, names, client) in [
        ("site", &["site.example.com"][..], false),
        ("other", &["*.other.example.com"][..], false),
        ("client", &[][..], true),
    ] {
        let (cert, key) = pki.issue(names, client);
        std::fs::write(dir.join(format!("{name}.pem")), cert).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key).unwrap();
    }
    std::fs::write(dir.join("ca.pem"), pki.ca_pem()).unwrap();
}
