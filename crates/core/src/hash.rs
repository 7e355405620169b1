//! The fixed, unkeyed byte hash behind every placement hash in gtd: FNV-1a with the splitmix64
//! finaliser. Nothing here is seeded per process, so every node and every restart places the
//! same way. A leaf: [`crate::split::rendezvous`] (source-ip affinity), the sticky cookie values
//! of [`crate::split::plan`] and the check spread of [`crate::health::spread`] all use it.

/// FNV-1a, 64-bit: the fixed byte hash behind every placement hash in gtd.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The splitmix64 finaliser: spreads FNV's weak low bits over the whole word.
pub fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
