//! A file's identity in the pool: ids of distinct files never collide, so a
//! stream over one file is never handed another file's cached pages.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::{stamp, MemEngine, MemFile};
use pagestream::{source, BufferPool, EngineFile, FileId, IoEngine, ReadRequest, ReadStream};
use std::io;

/// glibc's `makedev`.
fn makedev(major: u64, minor: u64) -> u64 {
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// Two anonymous devices (the kind tmpfs, overlayfs and FUSE mounts get)
/// whose numbers a lossy packing of `(dev, ino)` into 64 bits mapped to the
/// same id for every inode.
const DEV_A: (u64, u64) = (0, 5);
const DEV_B: (u64, u64) = (0, 2052);

#[test]
fn distinct_devices_with_equal_inodes_give_distinct_ids() {
    let (a, b) = (makedev(DEV_A.0, DEV_A.1), makedev(DEV_B.0, DEV_B.1));
    for ino in [1u64, 2, 42, 1 << 20, 1 << 40, (1 << 43) - 1, u64::MAX] {
        assert_ne!(
            FileId::from_dev_ino(a, ino),
            FileId::from_dev_ino(b, ino),
            "dev {a:#x} and dev {b:#x} with inode {ino} share an id"
        );
    }
    // The whole identity counts, bit by bit, in both halves.
    for bit in 0..64 {
        assert_ne!(
            FileId::from_dev_ino(1 << bit, 7),
            FileId::from_dev_ino(0, 7),
            "dev bit {bit}"
        );
        assert_ne!(
            FileId::from_dev_ino(9, 1 << bit),
            FileId::from_dev_ino(9, 0),
            "ino bit {bit}"
        );
    }
}

#[test]
fn ids_made_in_different_ways_never_collide() {
    let anon = FileId::anonymous();
    for v in [
        0u64,
        1,
        5,
        1 << 43,
        1 << 63,
        (1 << 63) + 1,
        u64::MAX - 1,
        u64::MAX,
    ] {
        assert_ne!(FileId::new(v), anon, "new({v}) equals an anonymous id");
        assert_ne!(FileId::new(v), FileId::from_dev_ino(0, v));
        assert_ne!(FileId::new(v), FileId::from_dev_ino(v, 0));
        assert_ne!(FileId::new(v), FileId::block_device(v));
        assert_ne!(FileId::block_device(v), FileId::from_dev_ino(v, 0));
        assert_eq!(FileId::new(v), FileId::new(v));
    }
    assert_ne!(FileId::new(u64::MAX), FileId::new(u64::MAX - 1));
    assert_ne!(FileId::anonymous(), FileId::anonymous());
}

/// An in-memory file that claims the identity of a file on disk.
#[derive(Clone)]
struct Claimed {
    mem: MemFile,
    id: FileId,
}

impl EngineFile for Claimed {
    fn id(&self) -> FileId {
        self.id
    }
    fn byte_len(&self) -> io::Result<u64> {
        self.mem.byte_len()
    }
}

#[derive(Clone)]
struct ClaimedEngine(MemEngine);

impl IoEngine for ClaimedEngine {
    type File = Claimed;
    fn start_read(&self, file: &Claimed, req: ReadRequest) {
        self.0.start_read(&file.mem, req);
    }
    fn name(&self) -> &'static str {
        "claimed"
    }
}

fn scan_checks(pool: &BufferPool, file: &Claimed, n: u64) -> Vec<u64> {
    let engine = ClaimedEngine(MemEngine::new());
    let mut stream = ReadStream::builder(pool, engine, file.clone())
        .build(source::forward(0..n))
        .unwrap();
    let seed = file.mem.seed();
    block_on(async {
        let mut wrong = Vec::new();
        while let Some(page) = stream.next().await {
            let page = page.unwrap();
            if !stamp::check(seed, page.block(), &page) {
                wrong.push(page.block());
            }
        }
        wrong
    })
}

#[test]
fn two_files_whose_ids_collided_each_get_their_own_pages() {
    let (n, bs) = (32u64, 8192usize);
    let mem = MemEngine::new();
    let ino = 1234;
    let a = Claimed {
        mem: mem.create_stamped(n, bs),
        id: FileId::from_dev_ino(makedev(DEV_A.0, DEV_A.1), ino),
    };
    let b = Claimed {
        mem: mem.create_stamped(n, bs),
        id: FileId::from_dev_ino(makedev(DEV_B.0, DEV_B.1), ino),
    };
    assert_ne!(a.mem.seed(), b.mem.seed());
    let pool = BufferPool::new(256, bs).unwrap();
    assert_eq!(scan_checks(&pool, &b, n), Vec::<u64>::new(), "file B, cold");
    assert!(pool.contains(b.id, 0), "file B is cached");
    let wrong = scan_checks(&pool, &a, n);
    assert!(
        wrong.is_empty(),
        "a stream over file A was handed file B's cached pages for blocks {wrong:?}"
    );
    // And each is still served its own pages, now both are cached.
    assert!(scan_checks(&pool, &b, n).is_empty(), "file B, warm");
    assert!(scan_checks(&pool, &a, n).is_empty(), "file A, warm");
}

#[test]
fn keyed_ids_are_equal_exactly_when_their_keys_are() {
    let keys = [
        "s3://bucket/base/5/16384#etag1",
        "s3://bucket/base/5/16384#etag2",
        "s3://bucket/base/5/16384.1#etag1",
        "http://127.0.0.1:8080/base/5/16384",
        "",
    ];
    for (i, a) in keys.iter().enumerate() {
        for (j, b) in keys.iter().enumerate() {
            assert_eq!(
                FileId::keyed(a) == FileId::keyed(b),
                i == j,
                "{a:?} vs {b:?}"
            );
        }
    }
    // No other constructor's id equals a keyed one, whatever the numbers.
    let first = FileId::keyed(keys[0]);
    for n in 0..16 {
        assert_ne!(first, FileId::new(n));
        assert_ne!(first, FileId::from_dev_ino(0, n));
        assert_ne!(first, FileId::block_device(n));
    }
    assert_ne!(first, FileId::anonymous());
}
