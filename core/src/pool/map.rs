//! The block map: `(file, block) → frame`, split into partitions each behind
//! its own `RwLock`, as PostgreSQL splits its buffer mapping table. A hit
//! takes one partition's read lock; nothing on the hit path is pool-wide.

use crate::sync::RwLock;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Partitions (PostgreSQL's NUM_BUFFER_PARTITIONS is 128 too).
pub(crate) const PARTITIONS: usize = 128;

pub(crate) type Key = (u64, u64);

/// A multiplicative hash of the two words of a key; consecutive blocks land
/// in different partitions.
#[inline]
pub(crate) fn hash_key(file: u64, block: u64) -> u64 {
    let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ block).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^ (h >> 31)
}

/// Hasher for the per-partition maps: the key is hashed by [`hash_key`]
/// before insertion, so this hasher only folds what it is given.
#[derive(Default, Debug)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = hash_key(self.0, v);
    }
}

pub(crate) type PartMap = HashMap<Key, u32, BuildHasherDefault<KeyHasher>>;

/// One partition, on its own cache lines.
#[repr(align(128))]
#[derive(Debug)]
pub(crate) struct Partition(pub(crate) RwLock<PartMap>);

#[derive(Debug)]
pub(crate) struct BlockMap {
    parts: Box<[Partition]>,
}

impl BlockMap {
    pub(crate) fn new(frames: usize) -> Self {
        let per = frames / PARTITIONS + 1;
        let parts = (0..PARTITIONS)
            .map(|_| {
                Partition(RwLock::new(PartMap::with_capacity_and_hasher(
                    per,
                    Default::default(),
                )))
            })
            .collect();
        BlockMap { parts }
    }

    #[inline]
    pub(crate) fn partition(&self, file: u64, block: u64) -> &RwLock<PartMap> {
        let h = hash_key(file, block);
        &self.parts[(h >> 57) as usize % PARTITIONS].0
    }

    pub(crate) fn partitions(&self) -> impl Iterator<Item = &RwLock<PartMap>> {
        self.parts.iter().map(|p| &p.0)
    }
}
