//! Headless Chromium and a small client of its DevTools protocol: the test starts the browser
//! (its own temporary profile, DevTools on an ephemeral loopback port), opens one page, and
//! sends commands over the page's WebSocket (tungstenite, blocking). Dropping [`Browser`]
//! closes it and kills its process group (it was started as that group's leader), whatever
//! the test's outcome.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// Where Chromium is: `$CHROMIUM`, else `chromium` (Debian's package) on the PATH.
pub(crate) fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
}

/// Chromium, or `None` with the reason printed when the test may skip: it is not installed
/// and this is not CI. Under `CI` (set and not `false`) a missing browser fails the test.
pub(crate) fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    if let Some(p) = find() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !ci,
        "{test}: chromium is not installed, and CI is set: .ci/run installs Debian's chromium"
    );
    eprintln!(
        "SKIPPED {test}: chromium is not installed (apt-get install chromium); \
         under CI=true this is a failure"
    );
    None
}

/// A running headless Chromium.
pub(crate) struct Browser {
    child: Child,
    devtools: SocketAddr,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `exe` with a fresh profile and DevTools on 127.0.0.1, on an ephemeral port.
    pub(crate) fn start(exe: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless",
            // Tests run as root in CI, where Chromium's sandbox refuses to start.
            "--no-sandbox",
            "--disable-gpu",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1000,1100",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            // Nothing but the node under test: no update checks, sync, prefetch or pings.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--dns-prefetch-disable",
            "--no-pings",
            "--mute-audio",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        // Its own temporary files (`org.chromium.Chromium.*`) go with the profile: killed, it
        // cannot remove them, and they were left in /tmp after every test.
        .env("TMPDIR", profile.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        // Its own process group, so that its zygote and renderers go with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().expect("start chromium");
        // It prints "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID" on stderr;
        // the reader keeps draining stderr afterwards so the browser never blocks on it.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("DevTools listening on ws://").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(rest.split('/').next().unwrap_or("").to_owned());
                }
            }
        });
        let mut browser = Browser {
            child,
            devtools: "127.0.0.1:9".parse().unwrap(),
            _profile: profile,
        };
        let addr = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("chromium printed its DevTools address");
        browser.devtools = addr.parse().expect("DevTools host:port");
        browser
    }

    /// The DevTools client of the browser's first page.
    pub(crate) fn page(&self) -> Page {
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            let list: Value = serde_json::from_str(&http_get(self.devtools, "/json/list")).unwrap();
            let page = list
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page");
            if let Some(url) = page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
                break url.to_owned();
            }
            assert!(Instant::now() < deadline, "no page target: {list}");
            std::thread::sleep(Duration::from_millis(100));
        };
        let stream = TcpStream::connect(self.devtools).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let (ws, _) = tungstenite::client(url.as_str(), stream).expect("DevTools WebSocket");
        let mut page = Page {
            ws,
            next: 0,
            problems: Vec::new(),
        };
        page.call("Page.enable", json!({}));
        page.call("Runtime.enable", json!({}));
        page.call("Log.enable", json!({}));
        page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One page, driven over DevTools.
pub(crate) struct Page {
    ws: WebSocket<TcpStream>,
    next: u64,
    /// Script exceptions and console errors (but the network's: a 401 is one) seen so far.
    pub(crate) problems: Vec<String>,
}

impl Page {
    /// Sends a command and returns its result; events that arrive meanwhile are looked at for
    /// problems.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(msg)).expect("send to DevTools");
        loop {
            let text = match self.ws.read().expect("read from DevTools") {
                Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v["error"].is_null(), "{method}: {}", v["error"]);
                return v["result"].clone();
            }
            match v["method"].as_str() {
                Some("Runtime.exceptionThrown") => self.problems.push(text),
                Some("Log.entryAdded")
                    if v["params"]["entry"]["level"] == "error"
                        && v["params"]["entry"]["source"] != "network" =>
                {
                    self.problems.push(text)
                }
                _ => {}
            }
        }
    }

    /// Evaluates `expr` in the page and returns its value (promises awaited).
    pub(crate) fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r["exceptionDetails"].is_null(),
            "{expr}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Waits (bounded: 90 s) until `expr` is true in the page.
    pub(crate) fn wait_for(&mut self, what: &str, expr: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.eval(expr) != Value::Bool(true) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Opens `url` and waits until its document has loaded.
    pub(crate) fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(
            "the page to load",
            &format!("location.href === {url:?} && document.readyState === 'complete'"),
        );
    }

    /// Clicks, as a mouse does (move, press, release), the middle of the element `selector`
    /// names, after scrolling it into view.
    pub(crate) fn click(&mut self, selector: &str) {
        let rect = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) return null;
               e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
               return {{x: r.x + r.width / 2, y: r.y + r.height / 2}}; }})()"
        ));
        assert!(!rect.is_null(), "nothing matches {selector}");
        let (x, y) = (rect["x"].clone(), rect["y"].clone());
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y}),
        );
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Types `text` into the focused element.
    pub(crate) fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }

    /// A PNG of the page (its whole height).
    pub(crate) fn screenshot(&mut self) -> Vec<u8> {
        let r = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        base64(r["data"].as_str().expect("screenshot data"))
    }
}

/// `GET path` over plain HTTP/1.1 (DevTools answers HTTP/1.0 with nothing, and keeps the
/// connection open whatever it is asked): the body, by its Content-Length.
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

/// Standard base64 (RFC 4648, with padding), as DevTools sends binary data.
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .map(value)
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |n, (i, d)| n | u32::from(*d) << (18 - 6 * i));
        out.extend(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn base64_decodes_what_devtools_sends() {
    assert_eq!(base64("aGVsbG8="), b"hello");
    assert_eq!(base64("aGVsbG8h"), b"hello!");
    assert_eq!(base64("aGk="), b"hi");
    assert_eq!(base64(""), b"");
}
