//! Stamped page contents: every byte of block `b` of a file with seed `s` is
//! a function of `(s, b, offset)`, so any page can be verified in full, and a
//! page from the wrong block, the wrong file or a torn read is caught.
//!
//! Layout of a stamped block: bytes 0..8 the block number (little endian),
//! 8..16 the seed, then 8-byte words `mix(seed, block, i)`.

/// Fills `page` with the stamp of `block` under `seed`.
pub fn fill(seed: u64, block: u64, page: &mut [u8]) {
    for (i, chunk) in page.chunks_mut(8).enumerate() {
        let w = word(seed, block, i as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// The stamp of `block` as a new vector.
pub fn page(seed: u64, block: u64, block_size: usize) -> Vec<u8> {
    let mut v = vec![0; block_size];
    fill(seed, block, &mut v);
    v
}

/// Whether `page` is exactly the stamp of `block` under `seed`.
pub fn check(seed: u64, block: u64, page: &[u8]) -> bool {
    page.chunks(8).enumerate().all(|(i, chunk)| {
        let w = word(seed, block, i as u64).to_le_bytes();
        chunk == &w[..chunk.len()]
    })
}

/// The blocks among `pages` (block number, bytes) whose bytes are not
/// their stamp under `seed`, in the order given.
pub fn wrong_blocks<'a>(seed: u64, pages: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<u64> {
    pages
        .into_iter()
        .filter(|&(b, page)| !check(seed, b, page))
        .map(|(b, _)| b)
        .collect()
}

/// Which block a stamped page claims to be (its first 8 bytes).
pub fn block_of(page: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(page.get(..8)?.try_into().ok()?))
}

#[inline]
fn word(seed: u64, block: u64, i: u64) -> u64 {
    match i {
        0 => block,
        1 => seed,
        _ => {
            let mut z = seed
                ^ block.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_differ_by_block_seed_and_offset() {
        let a = page(1, 5, 512);
        assert!(check(1, 5, &a));
        assert!(!check(1, 6, &a));
        assert!(!check(2, 5, &a));
        let mut torn = a.clone();
        torn[300] ^= 1;
        assert!(!check(1, 5, &torn));
        assert_eq!(block_of(&a), Some(5));
    }
}
