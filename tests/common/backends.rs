//! Backends on loopback.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// A backend on a raw socket: `serve` handles each accepted connection. Connections are served
/// in a JoinSet owned by the returned task: aborting it stops them all.
pub(crate) async fn socket_backend<F, Fut>(serve: F) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut open = JoinSet::new();
        while let Ok((s, _)) = listener.accept().await {
            open.spawn(serve(s));
        }
    });
    (addr, task)
}
