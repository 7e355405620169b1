//! What an operator reads in the log when passive failures take an endpoint out of rotation and
//! when it comes back (README "Logs"). Its own test binary: it installs the process-wide log
//! subscriber once, capturing what the nodes write; each test reads the lines about its own
//! endpoint.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::*;

use gtd::sync::lock;

/// Everything logged so far, shared with the subscriber's writer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }

    /// The lines that mention `needle` and `endpoint=ENDPOINT`.
    fn lines_with(&self, endpoint: &str, needle: &str) -> Vec<String> {
        let endpoint = format!("endpoint={endpoint}");
        self.text()
            .lines()
            .filter(|l| l.contains(needle) && l.contains(&endpoint))
            .map(str::to_owned)
            .collect()
    }
}

/// The log of this test process (the subscriber is installed by the first caller).
fn captured() -> Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Captured::default();
        let writer = log.clone();
        tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        log
    })
    .clone()
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One HTTP/1.0 GET through the node; the status code (0 when the connection gave none).
fn get(addr: SocketAddr) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: logs\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Answers every connection on `listener` with a 200, until the test process ends.
fn serve_ok(listener: TcpListener) {
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let mut buf = [0_u8; 1024];
            let _ = c.read(&mut buf);
            let _ =
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marking_an_endpoint_out_and_back_is_logged_once_each() {
    let log = captured();

    // The endpoint refuses (nothing listens on its port) until the test starts it.
    let port = free_port(false);
    let endpoint = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[[listener]]\nname = \"web\"\nprotocol = \"http\"\nport = {}\nregions = [\"cn-beijing\"]\n\
             [[listener.group]]\nname = \"bj\"\nregion = \"cn-beijing\"\n\
             [[listener.group.endpoint]]\naddress = \"{endpoint}\"\nmax_fails = 2\nfail_timeout = \"10s\"\n",
            free_port(false)
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;

    let statuses = tokio::task::spawn_blocking(move || [get(addr), get(addr), get(addr)])
        .await
        .unwrap();
    // The first failure counts, the second marks the endpoint, then there is no route.
    // (fail_timeout is long enough that a loaded machine cannot let the window or the marking
    // run out between these three requests.)
    assert_eq!(statuses, [502, 502, 503]);
    let out = log.lines_with(&endpoint, "endpoint out of rotation");
    assert_eq!(out.len(), 1, "one warning, at the marking:\n{}", log.text());
    for part in [
        "WARN",
        "listener=web",
        "group=bj",
        &format!("endpoint={endpoint}"),
        "cause=no connection: connection refused",
        "max_fails=2",
        "fail_timeout_s=10",
    ] {
        assert!(out[0].contains(part), "{part:?} in {:?}", out[0]);
    }
    assert!(log.lines_with(&endpoint, "back in rotation").is_empty());

    // The endpoint comes up; once fail_timeout has passed, the next request probes it.
    serve_ok(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let (probe, endpoint2) = (log.clone(), endpoint.clone());
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while probe.lines_with(&endpoint2, "back in rotation").is_empty() {
            assert!(std::time::Instant::now() < deadline, "no recovery logged");
            get(addr);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(get(addr), 200);
    })
    .await
    .unwrap();
    let back = log.lines_with(&endpoint, "back in rotation");
    assert_eq!(back.len(), 1, "{}", log.text());
    assert!(
        back[0].contains("INFO") && back[0].contains(&format!("endpoint={endpoint}")),
        "{:?}",
        back[0]
    );
    assert_eq!(
        log.lines_with(&endpoint, "endpoint out of rotation").len(),
        1
    );
    node.shutdown().await;
}

/// `[[listener]]` "NAME" (http) with one group whose only endpoint is `endpoint`, with `extra`.
fn one_endpoint(name: &str, port: u16, endpoint: &str, extra: &str) -> String {
    format!(
        "[[listener]]\nname = \"{name}\"\nprotocol = \"http\"\nport = {port}\nregions = [\"cn-beijing\"]\n\
         [[listener.group]]\nname = \"bj\"\nregion = \"cn-beijing\"\n\
         [[listener.group.endpoint]]\naddress = \"{endpoint}\"\n{extra}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_marking_on_by_reload_counts_from_zero_and_warns_at_the_marking() {
    let log = captured();
    // Nothing listens on the endpoint's port: every attempt is a passive failure.
    let refusing = Refusing::new();
    let endpoint = refusing.0.to_string();
    let port = free_port(false);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &one_endpoint("off", port, &endpoint, "max_fails = 0"),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "off").await;
    let endpoint_status = |node: &gtd::node::Node| {
        let doc = status(node);
        let e = &doc.listeners[0].groups[0].endpoints[0];
        (e.healthy, u64::from(e.fails))
    };

    // Marking off: the endpoint stays in rotation and no failure is counted towards it.
    let statuses = tokio::task::spawn_blocking(move || [(); 6].map(|()| get(addr)))
        .await
        .unwrap();
    assert_eq!(statuses, [502; 6]);
    assert_eq!(endpoint_status(&node), (true, 0));

    // Marking on: the reload alone takes nothing out of rotation...
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("max_fails = 0", "max_fails = 1\nfail_timeout = \"60s\"");
    std::fs::write(&cfg, text).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(endpoint_status(&node), (true, 0));
    assert!(log.lines_with(&endpoint, "out of rotation").is_empty());

    // ...the next failure does, and says so.
    let statuses = tokio::task::spawn_blocking(move || [get(addr), get(addr)])
        .await
        .unwrap();
    assert_eq!(statuses, [502, 503]);
    assert_eq!(endpoint_status(&node), (false, 1));
    let out = log.lines_with(&endpoint, "endpoint out of rotation");
    assert_eq!(out.len(), 1, "{}", log.text());
    assert!(
        out[0].contains("WARN") && out[0].contains("max_fails=1"),
        "{:?}",
        out[0]
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_response_head_is_logged_once_for_a_burst_and_blames_nobody() {
    let log = captured();
    // An endpoint whose answers have a header line without a colon.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = backend.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut c in backend.incoming().flatten() {
            let mut buf = [0_u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\nok");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &one_endpoint("heads", free_port(false), &endpoint, ""),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "heads").await;
    let statuses = tokio::task::spawn_blocking(move || [get(addr), get(addr), get(addr)])
        .await
        .unwrap();
    // Still 502, not 503: the endpoint (max_fails = 1) was not marked.
    assert_eq!(statuses, [502, 502, 502]);
    let warned = log.lines_with(&endpoint, "response head gtd does not pass on");
    assert_eq!(warned.len(), 1, "{}", log.text());
    assert!(warned[0].contains("WARN") && warned[0].contains("listener=heads"));
    assert!(log.lines_with(&endpoint, "out of rotation").is_empty());
    node.shutdown().await;
}

/// A rejected reload is one log line, every error on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_reload_is_one_line() {
    let log = captured();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &one_endpoint("rejected", free_port(false), "127.0.0.1:9", ""),
    );
    let node = start(&cfg).await;
    let text = std::fs::read_to_string(&cfg).unwrap();
    let bad = text
        .replace("region = \"cn-beijing\"", "region = \"nowhere\"")
        .replace("protocol = \"http\"", "protocol = \"gopher\"");
    std::fs::write(&cfg, bad).unwrap();
    assert!(node.reload().await.is_err());
    let lines: Vec<String> = log
        .text()
        .lines()
        .filter(|l| l.contains("reload rejected"))
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 1, "{}", log.text());
    assert!(
        lines[0].contains("nowhere") && lines[0].contains("gopher") && lines[0].contains("; "),
        "{}",
        lines[0]
    );
    node.shutdown().await;
}

/// A TLS server on a free port presenting `cert`/`key` (PEM) to whoever connects, until the
/// test process ends; its address.
fn tls_endpoint(cert: &str, key: &str) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let cfg = Arc::new(cfg);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut tcp in listener.incoming().flatten() {
            let mut conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
            // Until the handshake ends, one way or the other.
            while conn.is_handshaking() {
                if conn.complete_io(&mut tcp).is_err() {
                    break;
                }
            }
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_certificate_is_named_in_the_log_line() {
    let log = captured();
    let trusted = Pki::new();
    // Self-signed: an issuer the group's CA bundle does not know.
    let own = rcgen::generate_simple_self_signed(vec!["api.test".to_owned()]).unwrap();
    let stranger = tls_endpoint(&own.cert.pem(), &own.signing_key.serialize_pem());
    let (cert, key) = trusted.issue(&["api.test"], false);
    let misnamed = tls_endpoint(&cert, &key);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), trusted.ca_pem()).unwrap();
    let tls = |sni: &str| format!("[listener.group.tls]\nca = \"ca.pem\"\nsni = \"{sni}\"\n");
    let listeners = [
        one_endpoint(
            "unknown",
            free_port(false),
            &stranger.to_string(),
            &tls("api.test"),
        ),
        one_endpoint(
            "misnamed",
            free_port(false),
            &misnamed.to_string(),
            &tls("other.test"),
        ),
    ]
    .concat();
    let cfg = write_config(dir.path(), &listeners);
    let node = start(&cfg).await;
    for (name, endpoint, cause) in [
        ("unknown", stranger, "TLS: certificate of an unknown issuer"),
        (
            "misnamed",
            misnamed,
            "TLS: certificate not valid for the server name",
        ),
    ] {
        let addr = listener_addr(&node, name).await;
        let status = tokio::task::spawn_blocking(move || get(addr))
            .await
            .unwrap();
        assert_eq!(status, 502, "{name}");
        let lines = log.lines_with(&endpoint.to_string(), "endpoint out of rotation");
        assert_eq!(lines.len(), 1, "{}", log.text());
        assert!(lines[0].contains(cause), "{cause:?} in {:?}", lines[0]);
    }
    node.shutdown().await;
}
