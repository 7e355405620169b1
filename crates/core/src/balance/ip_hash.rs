//! `ip_hash`: nginx's client-address hash (`ngx_http_upstream_ip_hash_module.c`).
//!
//! The key is the first three octets of an IPv4 address (so a /24 stays together) or all 16
//! bytes of an IPv6 address. Starting from 89, each byte updates `h = (h * 113 + byte) % 6271`;
//! `h % total_weight` is walked across the servers' weight segments (`down` servers keep theirs).
//! If that server cannot be used, the same update runs again over the bytes, continuing from the
//! current `h`, 21 times at most, then the rotation takes over.

use std::net::IpAddr;

use super::key::client_ip;
use super::rng::Rng;
use super::{Ctx, RequestKey, Select, Tier};

/// The `ip_hash` method.
#[derive(Debug)]
pub(crate) struct IpHash;

/// nginx's initial value, multiplier and modulus.
const SEED: u32 = 89;
const MUL: u32 = 113;
const MODULUS: u32 = 6271;
/// Rounds before the rotation (nginx: `tries > 20`).
const TRIES: u32 = 21;

/// One round of the hash over the address bytes.
pub(crate) fn round(mut h: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        h = (h * MUL + u32::from(b)) % MODULUS;
    }
    h
}

/// The bytes `ip_hash` looks at, on the stack.
pub(crate) fn key_bytes(ip: IpAddr) -> ([u8; 16], usize) {
    let mut buf = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => {
            buf[..3].copy_from_slice(&v4.octets()[..3]);
            (buf, 3)
        }
        IpAddr::V6(v6) => {
            buf.copy_from_slice(&v6.octets());
            (buf, 16)
        }
    }
}

impl Select for IpHash {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        request: &K,
        tier: &Tier,
        primary: bool,
    ) -> Option<usize> {
        if primary
            && tier.members.len() >= 2
            && let Some(i) = walk(client_ip(request), tier, |_, _, _, i| ctx.take(i))
        {
            return Some(i);
        }
        tier.rotation.pick(ctx, &tier.members)
    }
}

/// nginx's walk for client `ip` over `tier`'s weight segments: each round runs the hash over
/// the key bytes again from the last value and lands on the member whose segment holds
/// `h % total`; `visit(round, h, slot, endpoint)` says whether that endpoint takes it. The
/// endpoint taken, or `None` after 21 rounds (the rotation's turn). The pick and its
/// explanation ([`super::trace`]) both walk here.
pub(crate) fn walk(
    ip: IpAddr,
    tier: &Tier,
    mut visit: impl FnMut(u32, u32, u64, usize) -> bool,
) -> Option<usize> {
    let (buf, len) = key_bytes(ip);
    let mut h = SEED;
    for r in 0..TRIES {
        h = round(h, &buf[..len]);
        let slot = u64::from(h) % tier.ranges.total();
        let i = tier.members[tier.ranges.locate(slot)] as usize;
        if visit(r, h, slot, i) {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_three_octets_of_ipv4_count() {
        let a = key_bytes("10.20.30.1".parse().unwrap());
        let b = key_bytes("10.20.30.254".parse().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.1, 3);
        assert_ne!(a, key_bytes("10.20.31.1".parse().unwrap()));
        assert_eq!(key_bytes("::1".parse().unwrap()).1, 16);
    }

    #[test]
    fn round_is_nginx_arithmetic() {
        // 89 -> (89*113+10)%6271 = 3796 -> (3796*113+20)%6271 = 2540 -> (2540*113+30)%6271 = 4855
        assert_eq!(round(SEED, &[10, 20, 30]), 4855);
    }
}
