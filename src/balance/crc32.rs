//! CRC-32 (IEEE 802.3: reflected polynomial `0xEDB88320`, initial value and final XOR
//! `0xFFFFFFFF`) — the checksum zlib, Ethernet and nginx's `ngx_crc32` compute.
//!
//! It is fed piece by piece so hash keys can be checksummed while they are rendered, without
//! building the key string (the pick path allocates nothing). nginx hashes keys and derives its
//! ketama points with exactly this function, which is why gtd uses it: the same key and server
//! list give the same server.

/// The byte-at-a-time lookup table, built at compile time.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// A running CRC-32; `Copy` so a common prefix can be checksummed once and then extended in
/// several ways (the ketama points of one server).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Crc32 {
    state: u32,
}

impl Crc32 {
    /// An empty checksum.
    pub(crate) fn new() -> Self {
        Crc32 { state: 0xFFFF_FFFF }
    }

    /// Feeds `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        let mut c = self.state;
        for &b in bytes {
            c = TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
        }
        self.state = c;
    }

    /// The checksum of everything fed so far.
    pub(crate) fn finish(&self) -> u32 {
        self.state ^ 0xFFFF_FFFF
    }
}

/// CRC-32 of one byte string.
#[cfg(test)]
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(bytes);
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_check_values() {
        // The catalogue check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
    }

    #[test]
    fn piecewise_equals_whole() {
        let mut c = Crc32::new();
        c.update(b"1234");
        let prefix = c;
        c.update(b"56789");
        assert_eq!(c.finish(), 0xCBF4_3926);
        let mut d = prefix;
        d.update(b"5");
        d.update(b"6789");
        assert_eq!(d.finish(), 0xCBF4_3926);
    }
}
