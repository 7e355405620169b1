//! Weighted rendezvous hashing of the client address (`affinity = "source-ip"`, docs/design.md §3.4).
//!
//! Each group scores a client with `share / -ln(u)`, where `u` in (0, 1) comes from a fixed,
//! unkeyed hash of (group name, client address); the highest score wins. A group's score depends
//! only on that client, that group and its own share, so changing one group's share moves only
//! clients to or from that group — and a client keeps its group while the shares stay the same,
//! on every node and across restarts (nothing here is seeded per process).

use std::net::IpAddr;

use crate::hash::{fnv1a, mix};

/// The hash of a group's identity (its name), computed once per snapshot.
pub fn group_key(name: &str) -> u64 {
    mix(fnv1a(name.as_bytes()))
}

/// The hash of a client address: its 4 (IPv4) or 16 (IPv6) octets. An IPv4-mapped IPv6
/// address hashes as the IPv4 address it carries.
pub fn client_key(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => mix(fnv1a(&v4.octets())),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => mix(fnv1a(&v4.octets())),
            None => mix(fnv1a(&v6.octets())),
        },
    }
}

/// The group (index into `shares`) that a client with hash `client` goes to; `None` when every
/// share is zero. `keys[i]` is [`group_key`] of group `i`. Allocation-free.
pub fn choose(shares: &[f64], keys: &[u64], client: u64) -> Option<usize> {
    debug_assert_eq!(shares.len(), keys.len());
    let mut best: Option<(usize, f64)> = None;
    for (i, (&share, &key)) in shares.iter().zip(keys).enumerate() {
        let Some(score) = score(share, key, client) else {
            continue;
        };
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// A group's score for a client: `share / -ln(u)` with `u` from the hash of the group's key
/// and the client's; `None` for a group without a share (it takes nobody). [`choose`] takes
/// the highest; `/explain` shows them.
#[inline]
pub fn score(share: f64, key: u64, client: u64) -> Option<f64> {
    if share.is_nan() || share <= 0.0 {
        return None;
    }
    let h = mix(key ^ client);
    // 53 random bits, centred in their bucket so u is never 0 or 1.
    let u = ((h >> 11) as f64 + 0.5) / (1_u64 << 53) as f64;
    Some(share / -u.ln())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn clients(n: u32) -> impl Iterator<Item = u64> {
        (0..n).map(|i| client_key(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))))
    }

    #[test]
    fn follows_the_shares() {
        let keys = [group_key("beijing"), group_key("shanghai")];
        let mut c = [0_u32; 2];
        for k in clients(100_000) {
            c[choose(&[62.5, 37.5], &keys, k).unwrap()] += 1;
        }
        let frac = f64::from(c[0]) / 100_000.0;
        assert!((frac - 0.625).abs() < 0.01, "{frac}");
    }

    #[test]
    fn mapped_ipv4_hashes_as_ipv4() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_key(v4), client_key(mapped));
    }

    #[test]
    fn zero_share_gets_nobody() {
        let keys = [group_key("a"), group_key("b")];
        assert!(clients(1000).all(|k| choose(&[0.0, 10.0], &keys, k) == Some(1)));
        assert_eq!(choose(&[0.0, 0.0], &keys, 1), None);
    }
}
