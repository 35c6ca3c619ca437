//! Loom models of the frame protocol. Run with
//! `RUSTFLAGS="--cfg pagestream_loom" cargo test -p pagestream --lib --release loom`.

use super::*;
use loom::sync::atomic::AtomicBool;
use std::task::{Wake, Waker};

fn pool(frames: usize) -> BufferPool {
    BufferPool::builder()
        .frames(frames)
        .block_size(512)
        .build()
        .unwrap()
}

/// Installs `block` of `view` as VALID, unpinned.
fn warm(p: &PoolInner, view: &mut FileView, block: u64) {
    match p.lookup(view, block, None) {
        Ok(Lookup::Read(f)) => {
            p.finish_io(f, true);
            p.unpin(f);
        }
        other => panic!("warm: {other:?}"),
    }
}

/// A hit racing an eviction of the same frame for another block: the hit
/// either pins the frame while it still holds block 0 (and the evictor
/// backs off) or misses; it never pins the frame holding block 1.
#[test]
fn loom_hit_races_eviction() {
    loom::model(|| {
        let pool = pool(1);
        let p = Arc::clone(&pool.inner);
        let mut view = p.file_view(FileId::new(7));
        warm(&p, &mut view, 0);
        let p2 = Arc::clone(&p);
        let mut view2 = p.file_view(FileId::new(7));
        let hitter = loom::thread::spawn(move || {
            if let Ok(Some(l)) = p2.lookup_existing(&mut view2, 0) {
                let f = match l {
                    Lookup::Hit(f) => f,
                    other => panic!("block 0 is valid, got {other:?}"),
                };
                assert_eq!(p2.header(f).block.load(Ordering::Relaxed), 0);
                assert_eq!(p2.status(f), Status::Valid);
                p2.unpin(f);
            }
        });
        if let Ok(Lookup::Read(f)) = p.lookup(&mut view, 1, None) {
            p.finish_io(f, true);
            p.unpin(f);
        }
        hitter.join().unwrap();
    });
}

/// Two streams missing on the same block at once: exactly one reads it, the
/// other pins the same frame and sees the read in progress (or done).
#[test]
fn loom_one_reader_per_block() {
    loom::model(|| {
        let pool = pool(2);
        let p = Arc::clone(&pool.inner);
        let p2 = Arc::clone(&p);
        let t = loom::thread::spawn(move || {
            let mut v = p2.file_view(FileId::new(3));
            p2.lookup(&mut v, 9, None).unwrap()
        });
        let mut v = p.file_view(FileId::new(3));
        let a = p.lookup(&mut v, 9, None).unwrap();
        let b = t.join().unwrap();
        let reads = [a, b]
            .iter()
            .filter(|l| matches!(l, Lookup::Read(_)))
            .count();
        assert_eq!(reads, 1, "{a:?} {b:?}");
        let frame = |l: Lookup| match l {
            Lookup::Hit(f) | Lookup::Read(f) | Lookup::Busy(f) => f,
        };
        assert_eq!(frame(a), frame(b));
    });
}

struct Flag(AtomicBool);
impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A waiter registering while the reader finishes is never left asleep:
/// either registration sees the read done, or the finisher wakes it.
#[test]
fn loom_waiter_is_never_lost() {
    loom::model(|| {
        let pool = pool(1);
        let p = Arc::clone(&pool.inner);
        let mut v = p.file_view(FileId::new(1));
        let f = match p.lookup(&mut v, 0, None).unwrap() {
            Lookup::Read(f) => f,
            other => panic!("{other:?}"),
        };
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(std::sync::Arc::clone(&flag));
        let p2 = Arc::clone(&p);
        let finisher = loom::thread::spawn(move || p2.finish_io(f, true));
        let waiting = p.wait_io(f, &waker);
        finisher.join().unwrap();
        assert!(!waiting || flag.0.load(Ordering::SeqCst), "waiter lost");
        assert_eq!(p.status(f), Status::Valid);
        p.unpin(f);
    });
}

/// After 2^32 claims of the one frame, a lookup of file 7 block 0 through
/// its stale slot (whose generation has come round again) races a miss that
/// claims and installs the frame for file 8 block 1. The stale lookup may
/// pin the frame at any point of the claim and install; it always misses
/// (the tag is never 7/0) and lets go, and the read keeps its own pin: the
/// frame ends VALID with no pin left over and none taken twice.
#[test]
fn loom_install_keeps_a_pin_taken_through_a_wrapped_stale_slot() {
    loom::model(|| {
        let pool = pool(1);
        let p = Arc::clone(&pool.inner);
        let mut old = p.file_view(FileId::new(7));
        warm(&p, &mut old, 0);
        let f = 0;
        let g = frame::gen(p.header(f).load());
        let mut other = p.file_view(FileId::new(9));
        warm(&p, &mut other, 3);
        // 2^32 - 2 claims later: the next claim brings generation `g` back,
        // which the slot of 7/0 still names.
        p.header(f).set_gen(g.wrapping_sub(1));
        let p2 = Arc::clone(&p);
        let stale = loom::thread::spawn(move || p2.lookup_existing(&mut old, 0));
        let mut v = p.file_view(FileId::new(8));
        let f1 = match p.lookup(&mut v, 1, None) {
            Ok(Lookup::Read(f1)) => f1,
            other => panic!("{other:?}"),
        };
        assert_eq!(stale.join().unwrap(), Ok(None), "7/0 must miss");
        let s = p.header(f1).load();
        assert_eq!((frame::pins(s), frame::status(s)), (1, Status::Io));
        p.finish_io(f1, true);
        p.unpin(f1);
        assert_eq!(frame::pins(p.header(f1).load()), 0);
    });
}

/// A read's watcher (`ReadRequest::abandoned`) looking at its frame's pins
/// while the stream holding the pin releases it (a reset or a drop) is never
/// left asleep: either it sees the pin gone, or the release wakes it.
#[test]
fn loom_abandoned_watcher_is_never_lost() {
    loom::model(|| {
        let pool = pool(1);
        let p = Arc::clone(&pool.inner);
        let mut v = p.file_view(FileId::new(4));
        // The stream's read of block 0: IO, pinned by the stream.
        let f = match p.lookup(&mut v, 0, None).unwrap() {
            Lookup::Read(f) => f,
            other => panic!("{other:?}"),
        };
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(std::sync::Arc::clone(&flag));
        let p2 = Arc::clone(&p);
        let stream = loom::thread::spawn(move || {
            p2.unpin(f);
            p2.watchers.released();
        });
        let mut key = None;
        let mut seen = None;
        p.watchers.register(&mut key, &waker);
        let wanted = p.still_pinned(&[f], &mut seen);
        stream.join().unwrap();
        assert!(!wanted || flag.0.load(Ordering::SeqCst), "watcher lost");
        // Looked at again, as a woken watcher does: the pin is gone.
        assert!(!p.still_pinned(&[f], &mut seen));
        p.watchers.unregister(&mut key);
        p.finish_io(f, false);
    });
}
