//! Outbound sockets towards endpoints, for every data plane: name resolution, TCP connects
//! within `connect_timeout` from `[node] source_ip`, connected UDP sockets, and the test for
//! this node running out of open files or local ports (never an endpoint's failure).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rustix::io::Errno;
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

use gtd_core::config::{Address, Host};

use super::timers::Pace;

/// The socket address of an endpoint: its IP, or the address of its name this target stands
/// for ([`super::dns`] expands a name into one target per address). A name with no address yet
/// is never picked (its placeholder is `down`); connecting to one fails, naming it.
pub(crate) fn resolve(address: &Address) -> io::Result<SocketAddr> {
    match &address.host {
        Host::Ip(ip) | Host::Resolved { ip, .. } => Ok(SocketAddr::new(*ip, address.port)),
        Host::Name(name) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{name} has not resolved to any address"),
        )),
    }
}

/// True when `e` says this node is short of something of its own: open files or socket memory
/// (EMFILE, ENFILE, ENOBUFS, ENOMEM), or a local port or address for a new connection
/// (EADDRNOTAVAIL: the ephemeral ports to that endpoint are used up, or `source_ip` is not on
/// this machine; EADDRINUSE: no free port for `source_ip`; an address this host cannot reach
/// at all is told apart at the connect, see [`connect`]). Not the endpoint's failure, so never
/// counted as a passive one nor as a failed health check (nginx too answers without marking
/// the server when socket() fails). Warns, at most every 10 s for each kind, since under
/// exhaustion it is true for every new connection.
pub(crate) fn exhausted(e: &io::Error) -> bool {
    static FILES: Pace = Pace::new();
    static PORTS: Pace = Pace::new();
    match Errno::from_io_error(e) {
        Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM) => {
            if FILES.due() {
                tracing::warn!(
                    error = %e,
                    "this node is out of open files: new connections wait to be accepted or \
                     are closed, UDP flows evict the least recently active, no endpoint is \
                     blamed; raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower \
                     udp_max_flows"
                );
            }
            true
        }
        Some(Errno::ADDRNOTAVAIL | Errno::ADDRINUSE) => {
            if PORTS.due() {
                tracing::warn!(
                    error = %e,
                    "this node has no local port or address for a new connection to an \
                     endpoint: the connection fails, no endpoint is blamed; widen \
                     net.ipv4.ip_local_port_range, or check that [node] source_ip is an \
                     address of this machine"
                );
            }
            true
        }
        _ => false,
    }
}

/// Connects to an endpoint within `timeout`, from `source` when set.
pub(crate) async fn connect(
    address: &Address,
    source: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let attempt = async {
        let target = resolve(address)?;
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = source.filter(|ip| ip.is_ipv4() == target.is_ipv4()) {
            // The port is chosen at connect, per destination (as nginx's `proxy_bind` does):
            // a bind to port 0 would otherwise take a local port for every destination at
            // once, and the whole node would share one range of ports.
            #[cfg(target_os = "linux")]
            let _ = nix::sys::socket::setsockopt(
                &socket,
                nix::sys::socket::sockopt::IpBindAddressNoPort,
                &true,
            );
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        socket
            .connect(target)
            .await
            .map_err(|e| unreachable(e, target))
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")))
}

/// A UDP socket connected to an endpoint, bound to `source` when set.
pub(crate) async fn connect_udp(
    address: &Address,
    source: Option<IpAddr>,
) -> io::Result<UdpSocket> {
    let target = resolve(address)?;
    let source = source.filter(|ip| ip.is_ipv4() == target.is_ipv4());
    let local = source.map_or_else(|| unspecified(target), |ip| SocketAddr::new(ip, 0));
    // Without `source_ip`, a bind to the unspecified address fails only where the family is
    // turned off: the address's fault. So is EADDRNOTAVAIL from a UDP connect, which takes no
    // port of the destination's.
    let socket = UdpSocket::bind(local).await.map_err(|e| {
        if source.is_none() {
            no_way_to(target, e)
        } else {
            e
        }
    })?;
    socket
        .connect(target)
        .await
        .map_err(|e| no_way_to(target, e))?;
    Ok(socket)
}

/// The unspecified address of `target`'s family, any port.
fn unspecified(target: SocketAddr) -> SocketAddr {
    if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0_u16; 8], 0).into()
    }
}

/// A TCP connect's EADDRNOTAVAIL is this node's shortage when its ephemeral ports for
/// `target` are used up, and the endpoint's (its config's) when this host cannot reach that
/// address at all: an IPv6 endpoint where IPv6 is turned off, an address of a family the
/// host has no route for. Told apart by a UDP socket connected to the same address, which
/// takes no TCP port: when that fails too, the error becomes the endpoint's (no OS error
/// code, so [`exhausted`] does not excuse it). Costs a socket only on that error.
fn unreachable(e: io::Error, target: SocketAddr) -> io::Error {
    if Errno::from_io_error(&e) != Some(Errno::ADDRNOTAVAIL) {
        return e;
    }
    match std::net::UdpSocket::bind(unspecified(target)).and_then(|s| s.connect(target)) {
        Ok(()) => e,
        Err(_) => no_way_to(target, e),
    }
}

/// `e` as the endpoint's failure when it is EADDRNOTAVAIL (this host cannot reach `target`),
/// else `e` unchanged.
fn no_way_to(target: SocketAddr, e: io::Error) -> io::Error {
    if Errno::from_io_error(&e) != Some(Errno::ADDRNOTAVAIL) {
        return e;
    }
    io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        format!("this host has no way to {target} ({e}; IPv6 turned off?)"),
    )
}
