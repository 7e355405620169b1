//! The PROXY protocol v2 header (haproxy.org/download/2.9/doc/proxy-protocol.txt, section 2.2),
//! sent to endpoints so they see the client's address.

use std::net::{IpAddr, SocketAddr};

/// The 12-byte v2 signature.
const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The header for a TCP connection from `client` to `local` (the address the client reached).
/// Mixed families (an IPv4 client on an IPv6 socket) are sent as IPv6.
pub fn v2_header(client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let mut h = Vec::with_capacity(16 + 36);
    h.extend_from_slice(&SIGNATURE);
    h.push(0x21); // version 2, command PROXY
    match (client.ip(), local.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            h.push(0x11); // AF_INET, STREAM
            h.extend_from_slice(&12_u16.to_be_bytes());
            h.extend_from_slice(&src.octets());
            h.extend_from_slice(&dst.octets());
        }
        (src, dst) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            h.push(0x21); // AF_INET6, STREAM
            h.extend_from_slice(&36_u16.to_be_bytes());
            h.extend_from_slice(&v6(src).octets());
            h.extend_from_slice(&v6(dst).octets());
        }
    }
    h.extend_from_slice(&client.port().to_be_bytes());
    h.extend_from_slice(&local.port().to_be_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_layout() {
        let h = v2_header(
            "192.0.2.1:5000".parse().unwrap(),
            "198.51.100.2:443".parse().unwrap(),
        );
        assert_eq!(&h[..12], &SIGNATURE);
        assert_eq!(h[12], 0x21);
        assert_eq!(h[13], 0x11);
        assert_eq!(u16::from_be_bytes([h[14], h[15]]), 12);
        assert_eq!(&h[16..20], &[192, 0, 2, 1]);
        assert_eq!(&h[20..24], &[198, 51, 100, 2]);
        assert_eq!(u16::from_be_bytes([h[24], h[25]]), 5000);
        assert_eq!(u16::from_be_bytes([h[26], h[27]]), 443);
        assert_eq!(h.len(), 28);
    }

    #[test]
    fn ipv6_header_layout() {
        let h = v2_header(
            "[2001:db8::1]:5000".parse().unwrap(),
            "[2001:db8::2]:443".parse().unwrap(),
        );
        assert_eq!(h[13], 0x21);
        assert_eq!(u16::from_be_bytes([h[14], h[15]]), 36);
        assert_eq!(h.len(), 16 + 36);
    }
}
