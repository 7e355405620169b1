//! TLS: the certificates of https listeners and the groups' TLS towards endpoints, files and
//! contents.

use super::*;

#[test]
fn https_needs_certificates_that_exist() {
    let text = r#"[[listener]]
name = "site"
protocol = "https"
port = 8443
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  tls = { ca = "no-such-ca.pem", client_cert = "no-such.pem" }
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"

[[listener]]
name = "site2"
protocol = "https"
port = 9443
regions = ["cn-beijing"]
tls = { certs = [{ cert = "missing.pem" }] }

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:1:1: listener "site": https listeners need tls = { certs = [{ cert = "site.pem", key = "site.key" }] }"#,
            r#"config.toml:10:16: listener "site" group "beijing": ca file "no-such-ca.pem" not found"#,
            r#"config.toml:10:34: listener "site" group "beijing": "client_cert" needs "client_key" too"#,
            r#"config.toml:10:48: listener "site" group "beijing": client_cert file "no-such.pem" not found"#,
            r#"config.toml:19:18: listener "site2": missing required key "key""#,
            r#"config.toml:19:27: listener "site2": cert file "missing.pem" not found"#,
        ]
    );
}

#[test]
fn upstream_tls_without_a_ca_uses_the_system_bundle_and_versions_read_as_written() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  tls = { sni = "api.example.com" }
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
"#;
    let tls = |text: &str| valid(text).listeners[0].groups[0].tls.clone().unwrap();
    let t = tls(text);
    assert!(t.enabled && t.ca.is_none() && !t.insecure_skip_verify);
    assert_eq!(t.min_version, TlsVersion::V1_2);
    for (written, version) in [
        ("\"1.3\"", TlsVersion::V1_3),
        ("\"TLSv1.3\"", TlsVersion::V1_3),
        ("\"tls1.2\"", TlsVersion::V1_2),
        ("\"TLSv1_3\"", TlsVersion::V1_3),
        ("1.2", TlsVersion::V1_2),
        ("1.3", TlsVersion::V1_3),
    ] {
        let t = tls(&text.replace("sni = ", &format!("min_version = {written}, sni = ")));
        assert_eq!(t.min_version, version, "{written}");
    }
    assert_errors(&[
        (
            text.replace("sni = ", "min_version = \"TLSv1.1\", sni = "),
            &[
                r#"config.toml:10:25: listener "web" group "beijing": min_version "TLSv1.1" is not supported: gtd speaks TLS 1.2 and 1.3 (rustls)"#,
            ],
        ),
        (
            text.replace("sni = ", "min_version = \"1.4\", sni = "),
            &[
                r#"config.toml:10:25: listener "web" group "beijing": unknown min version "1.4" (expected "1.2" or "1.3")"#,
            ],
        ),
    ]);
    // Keys that do nothing are said to.
    let warnings = |text: &str| -> Vec<String> {
        valid(text)
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert!(warnings(text).is_empty());
    assert_eq!(
        warnings(&text.replace("sni = ", "enabled = false, min_version = \"1.3\", sni = ")),
        [
            r#"config.toml:10:49: listener "web" group "beijing": "sni", "min_version" have no effect: enabled = false"#
        ]
    );
    assert_eq!(
        warnings(&text.replace("sni = ", "insecure_skip_verify = true, sni = ")),
        Vec::<String>::new()
    );
}

/// Certificates and keys are read by the check, as `nginx -t` and `haproxy -c` read them: a
/// file holding something else, or a key that is not its certificate's, is an error at the
/// value naming it, not a node that then refuses to start.
#[test]
fn certificate_and_key_contents_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(&dir.path().join("certs"));
    let config = |site_cert: &str, site_key: &str, ca: &str, client_key: &str| {
        format!(
            r#"catalog = "{catalog}"
[[listener]]
name = "site"
protocol = "https"
port = 8443
regions = ["cn-beijing"]
tls = {{ certs = [{{ cert = "{site_cert}", key = "{site_key}" }}] }}
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  tls = {{ enabled = true, ca = "{ca}", client_cert = "certs/client.pem", client_key = "{client_key}" }}
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
"#,
            catalog = catalog_path().display()
        )
    };
    let check = |text: String| {
        let file = dir.path().join("gtd.toml");
        std::fs::write(&file, text).unwrap();
        match config::load(&file, None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }
    };
    let good = (
        "certs/site.pem",
        "certs/site.key",
        "certs/ca.pem",
        "certs/client.key",
    );
    assert_eq!(
        check(config(good.0, good.1, good.2, good.3)),
        Vec::<String>::new()
    );

    let certs = dir.path().join("certs");
    let shown = |f: &str| certs.join(f).display().to_string();
    let errors = check(config(
        "certs/site.key",
        "certs/other.key",
        "certs/client.key",
        "certs/client.pem",
    ));
    let file = dir.path().join("gtd.toml").display().to_string();
    assert_eq!(
        errors,
        [
            format!(
                "{file}:7:27: listener \"site\": {}: no certificate found (expected PEM \"BEGIN CERTIFICATE\" blocks)",
                shown("site.key")
            ),
            format!(
                "{file}:11:32: listener \"site\" group \"beijing\": {}: no certificate found (expected PEM \"BEGIN CERTIFICATE\" blocks)",
                shown("client.key")
            ),
            format!(
                "{file}:11:99: listener \"site\" group \"beijing\": {}: no private key found (expected a PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\" block)",
                shown("client.pem")
            ),
        ]
    );
    let errors = check(config("certs/site.pem", "certs/other.key", good.2, good.3));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!(
            "{file}:7:51: listener \"site\": {}: the key does not belong to the certificate {}",
            shown("other.key"),
            shown("site.pem")
        )),
        "{errors:?}"
    );
}

/// A group `tls` on a TCP or UDP listener would leave the bytes in plaintext while the config
/// reads as if they were encrypted: refused, never ignored.
#[test]
fn group_tls_on_a_tcp_or_udp_listener_is_an_error() {
    for head in [GAME, &GAME.replace("\"tcp\"", "\"udp\"")] {
        let text = one_group(head, "  tls = { sni = \"api.example.com\" }\n", "");
        assert_eq!(
            error(&text),
            "config.toml:10:3: listener \"game\" group \"beijing\": \"tls\" (TLS towards the \
             endpoints) is for http/https listeners: this listener relays bytes as they come and \
             would send them to the endpoints in plaintext; remove it, or terminate TLS at the \
             endpoints themselves"
        );
    }
    // For the group's https health checks it is accepted, with a warning saying so.
    let text = one_group(
        GAME,
        "  tls = { sni = \"api.example.com\" }\n    [listener.group.health_check]\n    protocol = \"https\"\n",
        "",
    );
    let c = valid(&text);
    assert!(c.listeners[0].groups[0].tls.is_some());
    assert!(
        c.warnings.iter().any(|w| w
            .to_string()
            .contains("used by this group's https health checks only")),
        "{:?}",
        c.warnings
    );
}
