//! What an operator reads in the log when passive failures take an endpoint out of rotation and
//! when it comes back (README "Logs"). Its own test binary: it installs the process-wide log
//! subscriber, capturing what the node writes.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// Everything logged so far, shared with the subscriber's writer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines that mention `needle`.
    fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
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
    let log = Captured::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    // The endpoint refuses (nothing listens on its port) until the test starts it.
    let port = free_port(false);
    let endpoint = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[[listener]]\nname = \"web\"\nprotocol = \"http\"\nport = {}\nregions = [\"cn-beijing\"]\n\
             [[listener.group]]\nname = \"bj\"\nregion = \"cn-beijing\"\n\
             [[listener.group.endpoint]]\naddress = \"{endpoint}\"\nmax_fails = 2\nfail_timeout = \"3s\"\n",
            free_port(false)
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;

    let statuses = tokio::task::spawn_blocking(move || [get(addr), get(addr), get(addr)])
        .await
        .unwrap();
    // The first failure counts, the second marks the endpoint, then there is no route.
    assert_eq!(statuses, [502, 502, 503]);
    let out = log.lines_with("endpoint out of rotation");
    assert_eq!(out.len(), 1, "one warning, at the marking:\n{}", log.text());
    for part in [
        "WARN",
        "listener=web",
        "group=bj",
        &format!("endpoint={endpoint}"),
        "cause=no connection",
        "max_fails=2",
        "fail_timeout_s=3",
    ] {
        assert!(out[0].contains(part), "{part:?} in {:?}", out[0]);
    }
    assert!(log.lines_with("back in rotation").is_empty());

    // The endpoint comes up; once fail_timeout has passed, the next request probes it.
    serve_ok(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let probe = log.clone();
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while probe.lines_with("back in rotation").is_empty() {
            assert!(std::time::Instant::now() < deadline, "no recovery logged");
            get(addr);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(get(addr), 200);
    })
    .await
    .unwrap();
    let back = log.lines_with("back in rotation");
    assert_eq!(back.len(), 1, "{}", log.text());
    assert!(
        back[0].contains("INFO") && back[0].contains(&format!("endpoint={endpoint}")),
        "{:?}",
        back[0]
    );
    assert_eq!(log.lines_with("endpoint out of rotation").len(), 1);
    node.shutdown().await;
}
