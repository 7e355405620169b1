//! CRC-32 (IEEE 802.3: reflected polynomial `0xEDB88320`, initial value and final XOR
//! `0xFFFFFFFF`) — the checksum zlib, Ethernet and nginx's `ngx_crc32` compute.
//!
//! It is fed piece by piece so hash keys can be checksummed while they are rendered, without
//! building the key string (the pick path allocates nothing). nginx hashes keys and derives its
//! ketama points with exactly this function, which is why gtd uses it: the same key and server
//! list give the same server.

/// A running CRC-32; `Copy` so a common prefix can be checksummed once and then extended in
/// several ways (the ketama points of one server).
///
/// The arithmetic is `crc32fast`'s; this keeps the checksum so far (finalised, as
/// `crc32fast::Hasher::new_with_initial` resumes from) so that, unlike the crate's hasher, it
/// can be copied. Feeding it piece by piece is nginx's `ngx_crc32_update`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Crc32 {
    crc: u32,
}

impl Crc32 {
    /// An empty checksum.
    pub(crate) fn new() -> Self {
        Crc32 { crc: 0 }
    }

    /// Feeds `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        let mut h = crc32fast::Hasher::new_with_initial(self.crc);
        h.update(bytes);
        self.crc = h.finalize();
    }

    /// The checksum of everything fed so far.
    pub(crate) fn finish(&self) -> u32 {
        self.crc
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
