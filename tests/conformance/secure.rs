//! A fleet on a locked-down etcd, as production clusters run: clients over TLS only, a client
//! certificate required, then etcd's users on with least-privilege roles and tokens that
//! expire every second. What is refused is refused with etcd's or the TLS stack's reason, and
//! nodes keep their watch and registry entry across token expiries.

use std::process::Command;

use crate::etcd::*;
use crate::fleet::*;

/// `gtd ARGS`: exit status 1 and stderr, which must contain `why`.
fn refused(args: &[&str], why: &str) -> String {
    let out = gtd(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "gtd {args:?}: {err}");
    assert!(err.contains(why), "gtd {args:?}: {why:?} not in {err}");
    println!("{err}");
    err
}

#[test]
fn a_fleet_on_etcd_with_tls_client_certificates_and_users() {
    let mut cluster = Cluster::start_secure();
    let endpoints = cluster.endpoints();
    let ca = cluster.ca().display().to_string();

    // TLS and a client certificate: the fleet (nothing published yet) reads.
    assert_eq!(fleet_json(&cluster)["latest"], serde_json::Value::Null);

    // Without the client certificate, etcd ends the handshake; trusting another CA, gtd does;
    // in plaintext, etcd answers HTTP/1 400 and closes. Each is said with what to do.
    refused(
        &["fleet", "--etcd", &endpoints, "--etcd-cacert", &ca],
        "give --etcd-cert and --etcd-key",
    );
    let other = tempfile::tempdir().unwrap();
    let other_ca = other.path().join("other-ca.pem");
    std::fs::write(&other_ca, crate::common::Pki::new().ca_pem()).unwrap();
    let mut with_other_ca = cluster.access(As::Pusher);
    with_other_ca[3] = other_ca.display().to_string();
    let mut args = vec!["fleet"];
    args.extend(with_other_ca.iter().map(String::as_str));
    refused(&args, "does not verify against --etcd-cacert");
    let plain = endpoints.replace("https://", "http://");
    refused(
        &["fleet", "--etcd", &plain],
        "use https:// and --etcd-cacert",
    );

    // A user given while the cluster's users are off: a warning, and on without it (as
    // etcdctl does), so clients can be set up before `etcdctl auth enable`.
    let pw = other.path().join("pw");
    std::fs::write(&pw, "correct horse battery staple\n").unwrap();
    let pw = pw.display().to_string();
    let tls_only = cluster.access(As::Pusher);
    let mut args = vec!["fleet", "--json"];
    args.extend(tls_only.iter().map(String::as_str));
    args.extend(["--etcd-user", "pusher", "--etcd-password-file", &pw]);
    let out = gtd(&args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("users are off"), "{err}");
    assert_eq!(json_of(out)["latest"], serde_json::Value::Null);

    // Users on: pusher writes /gtd/, node reads it and writes /gtd/nodes/ only; tokens last 1 s.
    cluster.enable_users();
    let mut cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, &[]);
    for n in &fleet.nodes {
        let f = n.fleet();
        assert!(f.tls, "{f:?}");
        assert_eq!(f.user.as_deref(), Some("node"), "{f:?}");
    }

    // Several token lifetimes later (registry refreshes every 2 s), a ratio change reaches
    // every node, and each one's registry entry says it serves it.
    std::thread::sleep(std::time::Duration::from_secs(3));
    cfg.set_ratio("web/beijing", 30.0);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);
    wait_applied(&fleet, 2);
    wait("every registry entry at revision 2", || {
        let f = fleet_json(&cluster);
        let nodes = f["nodes"].as_array().unwrap();
        nodes.len() == fleet.nodes.len() && nodes.iter().all(|n| n["applied"] == 2)
    });
    for n in &fleet.nodes {
        let f = n.fleet();
        assert!(f.connected, "{f:?}");
    }
    let latest = &fleet_json(&cluster)["latest"];
    let by = latest["pushed_by"].as_str().unwrap();
    assert!(by.ends_with(" as etcd user pusher"), "{latest:#}");

    // The node's user may not publish: refused by etcd, and revision 2 stays current.
    cfg.set_ratio("web/beijing", 20.0);
    fleet.rewrite(&cfg);
    let out = gtd_as(
        &cluster,
        As::Node,
        &["push", "--config", &fleet.config.display().to_string()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    println!("{err}");
    assert_eq!(fleet_json(&cluster)["latest"]["revision"], 2);

    // A certificate whose name is no user, and a wrong password, are refused by etcd.
    let wrong = other.path().join("wrong");
    std::fs::write(&wrong, "not the password\n").unwrap();
    let mut args = vec!["fleet"];
    let access = cluster.access(As::Pusher);
    args.extend(access[..8].iter().map(String::as_str));
    refused(
        &args,
        "reading the current revision: etcdserver: permission denied",
    );
    args.extend(["--etcd-user", "pusher", "--etcd-password-file"]);
    let wrong_path = wrong.display().to_string();
    args.push(&wrong_path);
    refused(&args, "authentication failed");

    // The password from the environment instead of a file.
    let out = Command::new(env!("CARGO_BIN_EXE_gtd"))
        .arg("fleet")
        .args(&access[..8])
        .args(["--etcd-user", "pusher", "--json"])
        .env("GTD_ETCD_PASSWORD", "correct horse battery staple")
        .output()
        .unwrap();
    let f = json_of(out);
    assert_eq!(f["latest"]["revision"], 2, "{f:#}");
}
