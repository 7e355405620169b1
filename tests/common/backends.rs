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
    socket_backend_on("127.0.0.1:0".parse().unwrap(), serve).await
}

/// [`socket_backend`] on `addr` (a port an endpoint was configured with before anything
/// listened on it).
pub(crate) async fn socket_backend_on<F, Fut>(
    addr: SocketAddr,
    serve: F,
) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut open = JoinSet::new();
        while let Ok((s, _)) = listener.accept().await {
            open.spawn(serve(s));
        }
    });
    (addr, task)
}
