//! The two anchors, nginx and HAProxy, each one process on loopback with a private config in a
//! temp dir, each proxying to its own port of the recording endpoint, stopped (killed and
//! reaped by its own handle) when dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `name` is: `$env` (and nowhere else when that is set), then /usr/sbin, then `$PATH`.
pub(crate) fn binary(name: &str, env: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() {
        return Some(sbin);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|c| c.exists())
}

/// A running anchor.
pub(crate) struct Anchor {
    pub(crate) addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Anchor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx as a plain reverse proxy: HTTP/1.1 with keep-alive to the endpoint, the client's Host
/// passed on (as gtd and HAProxy do), everything else at its defaults.
pub(crate) fn nginx(bin: &Path, endpoint: SocketAddr) -> Anchor {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().display().to_string();
    let port = crate::common::free_port(false);
    let conf = format!(
        "worker_processes 1;\ndaemon off;\nmaster_process off;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n\
         access_log off;\nclient_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
         upstream endpoint {{ server {endpoint}; keepalive 8; }}\n\
         server {{\n  listen 127.0.0.1:{port};\n  location / {{\n\
         proxy_pass http://endpoint; proxy_http_version 1.1;\n\
         proxy_set_header Connection \"\"; proxy_set_header Host $http_host;\n  }}\n}}\n}}\n"
    );
    let path = dir.path().join("nginx.conf");
    std::fs::write(&path, conf).expect("write nginx.conf");
    let mut cmd = Command::new(bin);
    cmd.arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&path)
        .arg("-e")
        .arg(dir.path().join("error.log"));
    start("nginx", cmd, port, dir)
}

/// HAProxy in HTTP mode with keep-alive to the endpoint, everything else at its defaults.
pub(crate) fn haproxy(bin: &Path, endpoint: SocketAddr) -> Anchor {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = crate::common::free_port(false);
    let conf = format!(
        "global\n  nbthread 1\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n\
         timeout server 30s\n  timeout http-request 10s\n  option http-keep-alive\n\
         frontend fe\n  bind 127.0.0.1:{port}\n  default_backend be\n\
         backend be\n  server endpoint {endpoint}\n"
    );
    let path = dir.path().join("haproxy.cfg");
    std::fs::write(&path, conf).expect("write haproxy.cfg");
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(&path);
    start("haproxy", cmd, port, dir)
}

fn start(name: &str, mut cmd: Command, port: u16, dir: tempfile::TempDir) -> Anchor {
    // Its output goes to a file, not a pipe nobody drains.
    let log = dir.path().join("stderr.log");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("create stderr.log"))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    let mut anchor = Anchor {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        child,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect(anchor.addr).is_ok() {
            return anchor;
        }
        if let Some(status) = anchor.child.try_wait().expect("poll child") {
            let stderr = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("{name} exited with {status}: {stderr}");
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not open port {port} within 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
