//! A UDP listener's socket. Bound to one address, it is a plain socket. Bound to a wildcard
//! (`0.0.0.0`, `::`, gtd's default), it learns each datagram's destination address from
//! IP_PKTINFO / IPV6_PKTINFO and sends the replies from that address, as nginx's stream module
//! does. Without it the kernel picks the reply's source by route, and on a host with several
//! addresses a client that wrote to one of them gets the reply from another: a connected UDP
//! socket (most DNS, QUIC and VPN clients) drops it.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::UdpSocket;

/// Room for the packet-info control messages of a datagram: an IPv6 wildcard socket gets both
/// IPV6_PKTINFO (40 bytes with its header) and IP_PKTINFO (32) for an IPv4 datagram, and a
/// truncated set is unreadable.
pub(crate) type Control = [u8; 128];

pub(crate) struct Listen {
    socket: UdpSocket,
    /// Bound to a wildcard address, with packet info enabled.
    pktinfo: bool,
    /// SO_RXQ_OVFL is on: each datagram carries the count of those the kernel dropped on
    /// this socket because its receive buffer was full.
    overflow: bool,
    /// That count, as the last datagram told it.
    dropped: AtomicU64,
}

impl Listen {
    /// Wraps a bound socket, enabling packet info when it is bound to a wildcard address.
    pub(crate) fn new(socket: UdpSocket) -> io::Result<Listen> {
        let wildcard = socket.local_addr()?.ip().is_unspecified();
        let pktinfo = wildcard && pktinfo::enable(&socket)?;
        let overflow = pktinfo::count_drops(&socket);
        Ok(Listen {
            socket,
            pktinfo,
            overflow,
            dropped: AtomicU64::new(0),
        })
    }

    /// Datagrams the kernel dropped on this socket (receive buffer full), as last reported.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Receives a datagram: its length, its sender and, on a wildcard socket, the local address
    /// it was sent to. `control` is scratch space for the packet info, reused across calls.
    pub(crate) async fn recv(
        &self,
        buf: &mut [u8],
        control: &mut Control,
    ) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        if !self.pktinfo && !self.overflow {
            let (n, from) = self.socket.recv_from(buf).await?;
            return Ok((n, from, None));
        }
        pktinfo::recv(&self.socket, buf, control, &self.dropped).await
    }

    /// [`Listen::send`] without waiting: `WouldBlock` when the socket's buffer is full.
    pub(crate) fn try_send(
        &self,
        buf: &[u8],
        to: SocketAddr,
        local: Option<IpAddr>,
    ) -> io::Result<usize> {
        match local {
            Some(local) if self.pktinfo => pktinfo::try_send(&self.socket, buf, to, local),
            _ => self.socket.try_send_to(buf, to),
        }
    }

    /// Sends `buf` to `to`, from `local` when the datagram it answers named one.
    pub(crate) async fn send(
        &self,
        buf: &[u8],
        to: SocketAddr,
        local: Option<IpAddr>,
    ) -> io::Result<usize> {
        match local {
            Some(local) if self.pktinfo => pktinfo::send(&self.socket, buf, to, local).await,
            _ => self.socket.send_to(buf, to).await,
        }
    }
}

#[cfg(target_os = "linux")]
mod pktinfo {
    use std::io::{self, IoSlice, IoSliceMut};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU64, Ordering};

    use nix::libc;
    use nix::sys::socket::{
        ControlMessage, ControlMessageOwned, MsgFlags, SockaddrLike, SockaddrStorage, recvmsg,
        sendmsg, setsockopt, sockopt,
    };
    use tokio::io::Interest;
    use tokio::net::UdpSocket;

    use super::Control;

    /// Asks for the destination address of every datagram. An IPv6 wildcard socket also
    /// receives IPv4 (mapped) datagrams, whose packet info comes as IP_PKTINFO.
    pub(super) fn enable(socket: &UdpSocket) -> io::Result<bool> {
        if socket.local_addr()?.is_ipv6() {
            setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true)?;
            // Refused when the socket is IPv6-only: then no IPv4 datagram arrives anyway.
            let _ = setsockopt(socket, sockopt::Ipv4PacketInfo, &true);
        } else {
            setsockopt(socket, sockopt::Ipv4PacketInfo, &true)?;
        }
        Ok(true)
    }

    /// Asks for the kernel's drop count with every datagram (SO_RXQ_OVFL); false if refused.
    pub(super) fn count_drops(socket: &UdpSocket) -> bool {
        setsockopt(socket, sockopt::RxqOvfl, &1).is_ok()
    }

    pub(super) async fn recv(
        socket: &UdpSocket,
        buf: &mut [u8],
        control: &mut Control,
        dropped: &AtomicU64,
    ) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        let fd = socket.as_raw_fd();
        socket
            .async_io(Interest::READABLE, || {
                let mut iov = [IoSliceMut::new(buf)];
                let msg = recvmsg::<SockaddrStorage>(
                    fd,
                    &mut iov,
                    Some(control.as_mut_slice()),
                    MsgFlags::empty(),
                )?;
                let from = msg
                    .address
                    .as_ref()
                    .and_then(socket_addr)
                    .ok_or_else(|| io::Error::other("datagram without a source address"))?;
                let local = msg
                    .cmsgs()
                    .ok()
                    .into_iter()
                    .flatten()
                    .find_map(|c| match c {
                        ControlMessageOwned::Ipv4PacketInfo(i) => {
                            let ip = Ipv4Addr::from(u32::from_be(i.ipi_addr.s_addr));
                            // A broadcast or multicast destination cannot be a reply's source.
                            (!ip.is_broadcast() && !ip.is_multicast()).then_some(IpAddr::V4(ip))
                        }
                        ControlMessageOwned::Ipv6PacketInfo(i) => {
                            let ip = Ipv6Addr::from(i.ipi6_addr.s6_addr);
                            (!ip.is_multicast()).then_some(IpAddr::V6(ip))
                        }
                        ControlMessageOwned::RxqOvfl(n) => {
                            dropped.store(u64::from(n), Ordering::Relaxed);
                            None
                        }
                        _ => None,
                    });
                Ok((msg.bytes, from, local))
            })
            .await
    }

    pub(super) async fn send(
        socket: &UdpSocket,
        buf: &[u8],
        to: SocketAddr,
        local: IpAddr,
    ) -> io::Result<usize> {
        socket
            .async_io(Interest::WRITABLE, || send_from(socket, buf, to, local))
            .await
    }

    pub(super) fn try_send(
        socket: &UdpSocket,
        buf: &[u8],
        to: SocketAddr,
        local: IpAddr,
    ) -> io::Result<usize> {
        socket.try_io(Interest::WRITABLE, || send_from(socket, buf, to, local))
    }

    /// One sendmsg of `buf` to `to` with `local` as its source address.
    fn send_from(
        socket: &UdpSocket,
        buf: &[u8],
        to: SocketAddr,
        local: IpAddr,
    ) -> io::Result<usize> {
        let (v4, v6) = match local {
            IpAddr::V4(ip) => (u32::from(ip).to_be(), [0; 16]),
            IpAddr::V6(ip) => (0, ip.octets()),
        };
        let v4 = libc::in_pktinfo {
            ipi_ifindex: 0,
            ipi_spec_dst: libc::in_addr { s_addr: v4 },
            ipi_addr: libc::in_addr { s_addr: 0 },
        };
        let v6 = libc::in6_pktinfo {
            ipi6_addr: libc::in6_addr { s6_addr: v6 },
            ipi6_ifindex: 0,
        };
        let cmsg = match local {
            IpAddr::V4(_) => ControlMessage::Ipv4PacketInfo(&v4),
            IpAddr::V6(_) => ControlMessage::Ipv6PacketInfo(&v6),
        };
        let iov = [IoSlice::new(buf)];
        let dest = SockaddrStorage::from(to);
        Ok(sendmsg(
            socket.as_raw_fd(),
            &iov,
            &[cmsg],
            MsgFlags::empty(),
            Some(&dest),
        )?)
    }

    fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
        match a.family()? {
            nix::sys::socket::AddressFamily::Inet => {
                a.as_sockaddr_in().map(|s| SocketAddr::V4((*s).into()))
            }
            nix::sys::socket::AddressFamily::Inet6 => {
                a.as_sockaddr_in6().map(|s| SocketAddr::V6((*s).into()))
            }
            _ => None,
        }
    }
}

/// Elsewhere a wildcard socket replies as the kernel routes: packet info is never turned on,
/// so [`Listen`] always takes its plain path and these are never called.
#[cfg(not(target_os = "linux"))]
mod pktinfo {
    use std::io;
    use std::net::{IpAddr, SocketAddr};

    use tokio::net::UdpSocket;

    use super::Control;

    pub(super) fn enable(_: &UdpSocket) -> io::Result<bool> {
        Ok(false)
    }

    pub(super) fn count_drops(_: &UdpSocket) -> bool {
        false
    }

    pub(super) async fn recv(
        _: &UdpSocket,
        _: &mut [u8],
        _: &mut Control,
        _: &std::sync::atomic::AtomicU64,
    ) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        unreachable!("packet info is off")
    }

    pub(super) async fn send(
        _: &UdpSocket,
        _: &[u8],
        _: SocketAddr,
        _: IpAddr,
    ) -> io::Result<usize> {
        unreachable!("packet info is off")
    }

    pub(super) fn try_send(_: &UdpSocket, _: &[u8], _: SocketAddr, _: IpAddr) -> io::Result<usize> {
        unreachable!("packet info is off")
    }
}
