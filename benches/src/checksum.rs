//! The checksum every scan computes: a wrapping sum over pages of a 64-bit
//! hash of (block number, first 64 bytes, last 64 bytes). Order-independent
//! (a sum), so forward, backward and parallel scans of the same blocks agree,
//! and cheap enough to sit inside the timing, touching a page's header as a
//! real scan would.

/// Bytes hashed at each end of a page.
pub const EDGE: usize = 64;

#[inline]
fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
}

/// The hash of one page (`page.len() >= 2 * EDGE` for the full hash; shorter
/// pages hash what they have). The two ends are hashed as independent
/// chains so their multiplies overlap.
#[inline]
pub fn page_hash(block: u64, page: &[u8]) -> u64 {
    let word = |c: &[u8]| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(w)
    };
    let mut a = mix(0xC0FF_EE00_D15E_A5E5, block);
    let mut b = mix(0x0DDB_A11C_AB00_5E1F, block);
    if page.len() >= 2 * EDGE {
        // Fixed-size words: no memcpy calls on the hot path.
        let head = &page[..EDGE];
        let tail = &page[page.len() - EDGE..];
        for (x, y) in head.chunks_exact(8).zip(tail.chunks_exact(8)) {
            a = mix(a, u64::from_le_bytes(x.try_into().expect("8 bytes")));
            b = mix(b, u64::from_le_bytes(y.try_into().expect("8 bytes")));
        }
    } else {
        let n = page.len().min(EDGE);
        for c in page[..n].chunks(8) {
            a = mix(a, word(c));
        }
        for c in page[page.len() - n..].chunks(8) {
            b = mix(b, word(c));
        }
    }
    let h = a ^ b.rotate_left(17);
    h ^ (h >> 31)
}

/// A running checksum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    /// Wrapping sum of page hashes.
    pub sum: u64,
    /// Pages added.
    pub pages: u64,
}

impl Checksum {
    /// Adds one page.
    #[inline]
    pub fn add(&mut self, block: u64, page: &[u8]) {
        self.sum = self.sum.wrapping_add(page_hash(block, page));
        self.pages += 1;
    }

    /// Adds the pages of another checksum (a reader's tasks each keep
    /// one).
    pub fn merge(&mut self, other: Checksum) {
        self.sum = self.sum.wrapping_add(other.sum);
        self.pages += other.pages;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_independent_and_sensitive_to_contents() {
        let a = vec![1u8; 8192];
        let mut b = a.clone();
        let mut x = Checksum::default();
        x.add(0, &a);
        x.add(1, &b);
        let mut y = Checksum::default();
        y.add(1, &b);
        y.add(0, &a);
        assert_eq!(x, y);
        b[8191] = 2;
        let mut z = Checksum::default();
        z.add(0, &a);
        z.add(1, &b);
        assert_ne!(x.sum, z.sum, "last bytes not hashed");
        b[8191] = 1;
        b[4000] = 9; // the middle is not hashed
        let mut w = Checksum::default();
        w.add(0, &a);
        w.add(1, &b);
        assert_eq!(x.sum, w.sum);
        assert_ne!(
            page_hash(0, &a),
            page_hash(1, &a),
            "block number not hashed"
        );
    }
}
