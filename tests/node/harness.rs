//! The node tests' own helpers: TCP and UDP backends that name themselves, the tcp listener
//! most tests run, reading a backend's name through the node.

use crate::common::*;

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// Backend tasks, aborted on drop.
pub(crate) struct Backends(pub(crate) Vec<JoinHandle<()>>);

impl Drop for Backends {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// A TCP backend: writes its name and a newline, then echoes until EOF, then writes "bye".
pub(crate) async fn tcp_backend(name: &str) -> (SocketAddr, JoinHandle<()>) {
    tcp_backend_on("127.0.0.1:0".parse().unwrap(), name).await
}

/// [`tcp_backend`] on `addr`.
pub(crate) async fn tcp_backend_on(addr: SocketAddr, name: &str) -> (SocketAddr, JoinHandle<()>) {
    let name = name.to_owned();
    socket_backend_on(addr, move |mut s| {
        let name = name.clone();
        async move {
            if s.write_all(format!("{name}\n").as_bytes()).await.is_err() {
                return;
            }
            let mut buf = vec![0_u8; 64 * 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = s.write_all(b"bye").await;
        }
    })
    .await
}

/// A UDP backend: answers every datagram with "NAME:" + the datagram.
pub(crate) async fn udp_backend(name: &str) -> (SocketAddr, JoinHandle<()>) {
    udp_backend_on("127.0.0.1:0".parse().unwrap(), name).await
}

/// [`udp_backend`] on `addr`.
pub(crate) async fn udp_backend_on(addr: SocketAddr, name: &str) -> (SocketAddr, JoinHandle<()>) {
    let socket = UdpSocket::bind(addr).await.unwrap();
    let addr = socket.local_addr().unwrap();
    let name = name.to_owned();
    let handle = tokio::spawn(async move {
        let mut buf = vec![0_u8; 65536];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let mut reply = format!("{name}:").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from).await;
        }
    });
    (addr, handle)
}

/// A tcp listener "t" served from cn-beijing, with `extra` settings and `groups`.
pub(crate) fn tcp_listener(port: u16, extra: &str, groups: &[String]) -> String {
    listener_on(port, "t", "tcp", &["cn-beijing"], extra, &groups.concat())
}

/// Connects through the node and returns the backend's name line.
pub(crate) async fn tcp_name(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut name = Vec::new();
    let mut byte = [0_u8; 1];
    loop {
        let n = s.read(&mut byte).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before the name",
            ));
        }
        if byte[0] == b'\n' {
            break;
        }
        name.push(byte[0]);
    }
    Ok(String::from_utf8(name).unwrap())
}

/// `gtd run` on `config` (region cn-beijing, bound to 127.0.0.1) as a child process, stdout
/// discarded, stderr to `stderr`.
pub(crate) fn run_child(config: &std::path::Path, stderr: std::process::Stdio) -> Child {
    Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["run", "--config", config.to_str().unwrap()])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap(),
    )
}

/// The admin server's address `config` sets (its `bind = "..."` line).
pub(crate) fn admin_in(config: &std::path::Path) -> SocketAddr {
    std::fs::read_to_string(config)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("bind = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap()
        .parse()
        .unwrap()
}

/// Sends SIGTERM to `child`.
pub(crate) fn sigterm(child: &Child) {
    let pid = child.0.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
}
