//! TLS: the certificates of an https listener (`[listener.tls]`) and the group's TLS towards
//! its endpoints (`[listener.group.tls]`); certificate and key files are read as the node will.

use std::path::Path;

use super::Env;
use crate::config::document::{Ctx, Table, describe, quote};
use crate::config::model::*;
use crate::config::syntax;

pub(super) fn server_tls(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'_, '_>) -> Option<ServerTls> {
    let tls = t.table(ctx, "tls", t.path.clone())?;
    tls.check_keys(ctx, &["certs"]);
    if !tls.has("certs") {
        tls.missing(ctx, "certs");
        return None;
    }
    let pairs = tls.tables(ctx, "certs");
    if pairs.is_empty() && tls.array(ctx, "certs").is_some_and(|a| a.is_empty()) {
        let at = tls.value_at("certs").unwrap_or(tls.at);
        ctx.error(
            at,
            &tls.path,
            "\"certs\" must list at least one { cert, key } pair",
        );
    }
    let mut certs = Vec::new();
    for v in pairs {
        let Some(pair) = Table::of(
            ctx,
            v,
            "each entry of \"certs\"",
            &tls.path,
            tls.path.clone(),
        ) else {
            continue;
        };
        pair.check_keys(ctx, &["cert", "key"]);
        for key in ["cert", "key"] {
            if !pair.has(key) {
                pair.missing(ctx, key);
            }
        }
        let cert = env.file(ctx, &pair, "cert");
        let key = env.file(ctx, &pair, "key");
        if let (Some(cert), Some(key)) = (cert, key) {
            pem_pair(ctx, &pair, ("cert", &cert), ("key", &key));
            certs.push(CertPair { cert, key });
        }
    }
    Some(ServerTls { certs })
}

/// Reads a certificate chain and its key as the node will (`nginx -t` and `haproxy -c` load
/// them too): a file that holds something else, or a key that does not belong to its
/// certificate, is an error at the value that names it.
fn pem_pair(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    (cert_key, cert): (&str, &Path),
    (key_key, key): (&str, &Path),
) {
    if let Err((faulty, e)) = crate::pem::certified(cert, key, &crate::pem::provider()) {
        let field = match faulty {
            crate::pem::Faulty::Cert => cert_key,
            crate::pem::Faulty::Key => key_key,
        };
        if let Some(at) = t.value_at(field) {
            ctx.error(at, &t.path, e);
        }
    }
}

pub(super) fn upstream_tls(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: &Table<'_, '_>,
) -> Option<UpstreamTls> {
    t.check_keys(
        ctx,
        &[
            "enabled",
            "sni",
            "ca",
            "client_cert",
            "client_key",
            "insecure_skip_verify",
            "min_version",
        ],
    );
    let enabled = t
        .bool(ctx, "enabled")
        .unwrap_or(UpstreamTls::DEFAULT_ENABLED);
    let sni = t.nonempty_str(ctx, "sni").and_then(|s| {
        if syntax::is_host_name(s.v) {
            Some(s.v.to_owned())
        } else {
            ctx.error(
                s.at,
                &t.path,
                format!("sni {} is not a valid host name", quote(s.v)),
            );
            None
        }
    });
    let ca = t.has("ca").then(|| env.file(ctx, t, "ca")).flatten();
    if let (Some(ca), Some(at)) = (&ca, t.value_at("ca"))
        && let Err(e) = crate::pem::roots(ca)
    {
        ctx.error(at, &t.path, e);
    }
    let client_cert = t
        .has("client_cert")
        .then(|| env.file(ctx, t, "client_cert"))
        .flatten();
    let client_key = t
        .has("client_key")
        .then(|| env.file(ctx, t, "client_key"))
        .flatten();
    if let (Some(cert), Some(key)) = (&client_cert, &client_key) {
        pem_pair(ctx, t, ("client_cert", cert), ("client_key", key));
    }
    for (key, other) in [("client_cert", "client_key"), ("client_key", "client_cert")] {
        if let (Some(at), false) = (t.key_at(key), t.has(other)) {
            ctx.error(
                at,
                &t.path,
                format!("{} needs {} too", quote(key), quote(other)),
            );
        }
    }
    let insecure_skip_verify = t.bool(ctx, "insecure_skip_verify").unwrap_or(false);
    let min_version = tls_version(ctx, t).unwrap_or_default();
    // Valid but without effect: a warning, as for other such keys.
    let (idle, why): (Vec<&str>, _) = if enabled {
        let ca = ["ca"]
            .into_iter()
            .filter(|k| insecure_skip_verify && t.has(k));
        (ca.collect(), "insecure_skip_verify = true verifies nothing")
    } else {
        let keys = ["sni", "ca", "client_cert", "client_key"];
        let keys = keys
            .into_iter()
            .chain(["insecure_skip_verify", "min_version"]);
        (keys.filter(|k| t.has(k)).collect(), "enabled = false")
    };
    if let Some(at) = idle.first().and_then(|k| t.key_at(k)) {
        let keys = idle.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
        let verb = if idle.len() == 1 { "has" } else { "have" };
        ctx.warn(at, &t.path, format!("{keys} {verb} no effect: {why}"));
    }
    Some(UpstreamTls {
        enabled,
        sni,
        ca,
        client_cert,
        client_key,
        insecure_skip_verify,
        min_version,
    })
}

/// `min_version`: "1.2" or "1.3", also as written elsewhere ("TLSv1.2", "TLS1.3", any case)
/// or as the number 1.2.
fn tls_version(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<TlsVersion> {
    let v = t.value("min_version")?;
    let at = v.span().start;
    let text = match v.get_ref() {
        toml::de::DeValue::Float(f) => f.as_str().to_owned(),
        toml::de::DeValue::String(s) => s.to_string(),
        other => {
            let msg = format!(
                "\"min_version\" must be \"1.2\" or \"1.3\", found {}",
                describe(other)
            );
            ctx.error(at, &t.path, msg);
            return None;
        }
    };
    let lower = text.to_ascii_lowercase();
    let bare = lower.strip_prefix("tls").unwrap_or(&lower);
    let bare = bare.strip_prefix('v').unwrap_or(bare).replace('_', ".");
    match bare.trim() {
        "1.2" => Some(TlsVersion::V1_2),
        "1.3" => Some(TlsVersion::V1_3),
        "1.0" | "1" | "1.1" => {
            let msg = format!(
                "min_version {} is not supported: gtd speaks TLS 1.2 and 1.3 (rustls)",
                quote(&text)
            );
            ctx.error(at, &t.path, msg);
            None
        }
        _ => {
            let msg = format!(
                "unknown min version {} (expected \"1.2\" or \"1.3\")",
                quote(&text)
            );
            ctx.error(at, &t.path, msg);
            None
        }
    }
}
