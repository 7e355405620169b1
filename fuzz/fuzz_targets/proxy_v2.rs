//! The PROXY protocol v2 header gtd sends to endpoints (`crates/node/src/l4/proxy_protocol.rs`): any
//! client and local address (IPv4, IPv6, or one of each) is encoded, then decoded by the
//! independent decoder below, written from the specification
//! (haproxy.org/download/2.9/doc/proxy-protocol.txt, section 2.2), and the round trip must be
//! exact: the PROXY command over TCP, both addresses and both ports. Mixed families are sent
//! as IPv6 with the IPv4 address mapped (`::ffff:a.b.c.d`), as the encoder documents.
//!
//! The decoder also reads the raw input itself, so it is exercised on arbitrary bytes too; it
//! is the target's own code, so there it only has to refuse or decode, never panic.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::Arbitrary;
use gtd::node::l4::proxy_protocol::v2_header;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    client: SocketAddr,
    local: SocketAddr,
}

fuzz_target!(|data: &[u8]| {
    let _ = decode(data);
    let Ok(input) = arbitrary::Unstructured::new(data).arbitrary::<Input>() else {
        return;
    };
    let header = v2_header(input.client, input.local);
    let decoded = decode(&header).unwrap_or_else(|e| panic!("{input:?}: {e}: {header:02x?}"));
    assert_eq!(
        decoded.len,
        header.len(),
        "the header is all there is: no TLVs"
    );
    assert_eq!(decoded.command, Command::Proxy);
    assert_eq!(decoded.transport, Transport::Stream);
    let expected = match (input.client.ip(), input.local.ip()) {
        (IpAddr::V4(c), IpAddr::V4(l)) => (Family::Inet, IpAddr::V4(c), IpAddr::V4(l)),
        (c, l) => (Family::Inet6, IpAddr::V6(v6(c)), IpAddr::V6(v6(l))),
    };
    assert_eq!(
        (
            decoded.family,
            decoded.source.ip(),
            decoded.destination.ip()
        ),
        expected,
        "{input:?}"
    );
    assert_eq!(decoded.source.port(), input.client.port());
    assert_eq!(decoded.destination.port(), input.local.port());
});

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The 12 bytes every v2 header starts with.
const SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Command {
    Local,
    Proxy,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Family {
    Unspec,
    Inet,
    Inet6,
    Unix,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Transport {
    Unspec,
    Stream,
    Dgram,
}

/// A decoded header (INET and INET6 only carry addresses this decoder returns).
#[derive(Debug)]
struct Decoded {
    command: Command,
    family: Family,
    transport: Transport,
    source: SocketAddr,
    destination: SocketAddr,
    /// The whole header's length: 16 bytes, then the length field's count.
    len: usize,
}

/// Decodes a v2 header at the start of `b`, per section 2.2.
fn decode(b: &[u8]) -> Result<Decoded, &'static str> {
    if b.len() < 16 {
        return Err("shorter than the fixed 16 bytes");
    }
    if b[..12] != SIGNATURE {
        return Err("no v2 signature");
    }
    // 13th byte: version in the high nibble (2), command in the low one.
    if b[12] >> 4 != 0x2 {
        return Err("version is not 2");
    }
    let command = match b[12] & 0x0F {
        0x0 => Command::Local,
        0x1 => Command::Proxy,
        _ => return Err("unassigned command"),
    };
    // 14th byte: address family in the high nibble, transport protocol in the low one.
    let family = match b[13] >> 4 {
        0x0 => Family::Unspec,
        0x1 => Family::Inet,
        0x2 => Family::Inet6,
        0x3 => Family::Unix,
        _ => return Err("unassigned address family"),
    };
    let transport = match b[13] & 0x0F {
        0x0 => Transport::Unspec,
        0x1 => Transport::Stream,
        0x2 => Transport::Dgram,
        _ => return Err("unassigned transport"),
    };
    // 15th and 16th bytes: the number of bytes that follow, network order.
    let len = usize::from(u16::from_be_bytes([b[14], b[15]]));
    let rest = b.get(16..16 + len).ok_or("shorter than its length field")?;
    let port = |at: usize| u16::from_be_bytes([rest[at], rest[at + 1]]);
    let (source, destination) = match family {
        Family::Inet => {
            if rest.len() < 12 {
                return Err("INET address block shorter than 12 bytes");
            }
            let ip = |at: usize| {
                IpAddr::V4(Ipv4Addr::new(
                    rest[at],
                    rest[at + 1],
                    rest[at + 2],
                    rest[at + 3],
                ))
            };
            (
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            )
        }
        Family::Inet6 => {
            if rest.len() < 36 {
                return Err("INET6 address block shorter than 36 bytes");
            }
            let ip = |at: usize| {
                let mut o = [0_u8; 16];
                o.copy_from_slice(&rest[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            (
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            )
        }
        Family::Unspec | Family::Unix => return Err("no IP addresses"),
    };
    Ok(Decoded {
        command,
        family,
        transport,
        source,
        destination,
        len: 16 + len,
    })
}
