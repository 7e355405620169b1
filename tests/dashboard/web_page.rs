//! The admin API from a web page (issue 28 item 8): without a token (the default on
//! loopback) the dashboard's own toggles work, a page of another origin cannot disable an
//! endpoint or reload, and a Host that does not name the server (DNS rebinding) is refused
//! for GETs and POSTs alike.

use super::*;

/// [`config`] without the admin token: the loopback default.
fn config_without_token(dir: &Path, bj: SocketAddr, sh: SocketAddr) -> std::path::PathBuf {
    let path = config(dir, bj, sh);
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(
        &format!("token = \"{TOKEN}\"\n"),
        "hosts = [\"gtd-1.internal\"]\n",
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// One HTTP/1.0 request to `addr` with `headers` (each `Name: value`): (status, body).
fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.0\r\nContent-Length: 0\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// Whether `/status` shows endpoint `bj` of group beijing enabled.
fn enabled(admin: SocketAddr, bj: SocketAddr) -> bool {
    status_at(admin).listeners[0]
        .groups
        .iter()
        .flat_map(|g| &g.endpoints)
        .find(|e| e.address == bj.to_string())
        .unwrap()
        .enabled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_does_not_name_the_server_is_refused() {
    let (bj, h1) = named_backend("bj-1").await;
    let (sh, h2) = named_backend("sh-1").await;
    let _backends = Aborted(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let node = start(&config_without_token(dir.path(), bj, sh)).await;
    let admin = node.admin_addr();
    let port = admin.port();
    tokio::task::spawn_blocking(move || {
        let disable = format!("/endpoints/t/beijing/{bj}/disable");
        for host in [
            "rebind.attacker.example".to_owned(),
            format!("rebind.attacker.example:{port}"),
            format!("localhost.attacker.example:{port}"),
            format!("127.0.0.2:{port}"),
        ] {
            let h = format!("Host: {host}");
            for (method, path) in [
                ("GET", "/status"),
                ("GET", "/"),
                ("POST", &*disable),
                ("POST", "/reload"),
            ] {
                let (code, body) = raw(admin, method, path, &[&h]);
                assert_eq!(code, 421, "{method} {path} with {h}: {body}");
                assert!(body.contains("does not answer to Host"), "{body}");
                assert!(body.contains("[admin] hosts"), "{body}");
            }
        }
        assert!(enabled(admin, bj), "the refused POST changed nothing");
        assert_eq!(metric_at(admin, "gtd_config_reloads_total", &[]), 0.0);
        // What names it: its address, localhost, a listed name, or no Host at all.
        for h in [
            format!("Host: {admin}"),
            "Host: 127.0.0.1".to_owned(),
            format!("Host: localhost:{port}"),
            "Host: GTD-1.internal:8443".to_owned(),
        ] {
            assert_eq!(raw(admin, "GET", "/status", &[&h]).0, 200, "{h}");
        }
        assert_eq!(raw(admin, "GET", "/healthz", &[]).0, 200);
        // A POST from another origin, as a browser marks it, with a Host that names it.
        let h = format!("Host: {admin}");
        for from in [
            "Origin: http://127.0.0.2:8000",
            "Sec-Fetch-Site: cross-site",
            "Origin: null",
        ] {
            let (code, body) = raw(admin, "POST", &disable, &[&h, from]);
            assert_eq!(code, 403, "{from}: {body}");
        }
        assert!(enabled(admin, bj));
        // The same POST from the dashboard's own origin goes through.
        let origin = format!("Origin: http://{admin}");
        let (code, body) = raw(
            admin,
            "POST",
            &disable,
            &[&h, &origin, "Sec-Fetch-Site: same-origin"],
        );
        assert_eq!(code, 200, "{body}");
        assert!(!enabled(admin, bj));
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_the_dashboard_toggles_and_another_origin_cannot() {
    let Some(exe) =
        chromium_or_skip("without_a_token_the_dashboard_toggles_and_another_origin_cannot")
    else {
        return;
    };
    let (bj, h1) = named_backend("bj-1").await;
    let (sh, h2) = named_backend("sh-1").await;
    let _backends = Aborted(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let node = start(&config_without_token(dir.path(), bj, sh)).await;
    let admin = node.admin_addr();
    tokio::task::spawn_blocking(move || {
        let attacker = Attacker::start(admin, bj);
        let browser = Browser::start(&exe);
        let mut page = browser.page();

        // A page of another origin (another loopback address) POSTs to the admin API.
        page.navigate(&format!("http://{}/", attacker.addr));
        let tried = page.eval("window.tried");
        assert_eq!(tried.as_array().map(Vec::len), Some(4), "{tried}");
        assert!(
            enabled(admin, bj),
            "a page of another origin disabled the endpoint: {tried}"
        );
        assert_eq!(
            metric_at(admin, "gtd_config_reloads_total", &[]),
            0.0,
            "a page of another origin reloaded the config: {tried}"
        );
        assert!(
            attacker.asked(),
            "the attacking page was served (the browser ran its script)"
        );

        // The dashboard's own toggle, with no token to ask for. (The other page's CORS
        // errors are that page's.)
        page.problems.clear();
        page.navigate(&format!("http://{admin}/"));
        page_shows_status(&mut page, admin, "the cascade", |d| {
            d.listeners[0].mode == "cascade"
        });
        let toggle = format!("[data-group=\"beijing\"] [data-endpoint=\"{bj}\"] .toggle");
        page.click(&toggle);
        page_shows_status(&mut page, admin, "the endpoint disabled", |d| {
            d.listeners[0].mode == "failover"
        });
        assert!(!enabled(admin, bj));
        page.click(&toggle);
        page_shows_status(&mut page, admin, "the endpoint enabled again", |d| {
            d.listeners[0].mode == "cascade"
        });
        assert!(enabled(admin, bj));
        assert_eq!(
            page.eval("document.getElementById('token-form').hidden"),
            json!(true)
        );
        assert!(page.problems.is_empty(), "{:#?}", page.problems);
    })
    .await
    .expect("the browser part passed");
    node.shutdown().await;
}

/// A page on 127.0.0.2 whose script POSTs to the admin server at `admin` as a web page can:
/// `no-cors` and `cors` fetches of the endpoint toggle and `/reload`; `window.tried` holds
/// what each fetch gave once all four settled. Served until dropped.
struct Attacker {
    addr: SocketAddr,
    served: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Attacker {
    fn start(admin: SocketAddr, bj: SocketAddr) -> Attacker {
        let listener = TcpListener::bind("127.0.0.2:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let page = format!(
            r#"<!doctype html><title>elsewhere</title><script>
const admin = "http://{admin}";
const tries = [];
for (const path of ["/endpoints/t/beijing/{bj}/disable", "/reload"]) {{
  for (const mode of ["no-cors", "cors"]) {{
    tries.push(fetch(admin + path, {{method: "POST", mode, body: "x", headers: {{"Content-Type": "text/plain"}}}})
      .then(r => mode + " " + path + ": " + r.type + " " + r.status, e => mode + " " + path + ": " + e));
  }}
}}
window.tried = Promise.all(tries);
</script>"#
        );
        let served = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, seen) = (stop.clone(), served.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut s) = conn else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut byte = [0_u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let (code, body) = if head.starts_with(b"GET / ") {
                    seen.store(true, Ordering::Relaxed);
                    ("200 OK", page.as_str())
                } else {
                    ("404 Not Found", "")
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {code}\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Attacker {
            addr,
            served,
            stop,
            thread: Some(thread),
        }
    }

    fn asked(&self) -> bool {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
