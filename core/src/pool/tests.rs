//! Pool unit tests for the corner cases a review found: generation wrap,
//! pin-count overflow, huge block numbers, invalidate.

use super::*;

fn pool(frames: usize) -> Arc<PoolInner> {
    Arc::clone(&BufferPool::new(frames, 512).unwrap().inner)
}

fn read_valid(p: &PoolInner, view: &mut FileView, block: u64) -> u32 {
    read_into(p, view, None, block, false)
}

/// Reads `block` (through `ring`, if given) into a new frame, its read
/// finished at once, and unpins it unless `hold`; returns the frame.
fn read_into(
    p: &PoolInner,
    view: &mut FileView,
    ring: Option<&mut Ring>,
    block: u64,
    hold: bool,
) -> u32 {
    match p.lookup(view, block, ring) {
        Ok(Lookup::Read(f)) => {
            p.finish_io(f, true);
            if !hold {
                p.unpin(f);
            }
            f
        }
        other => panic!("expected a read, got {other:?}"),
    }
}

/// After 2^32 claims a stale slot names the frame's generation again: the
/// tag check must still refuse it (it holds another file's block).
#[test]
fn a_stale_slot_never_pins_another_block_even_after_the_generation_wraps() {
    let p = pool(1);
    let mut a = p.file_view(FileId::new(7));
    let mut b = p.file_view(FileId::new(8));
    let f = read_valid(&p, &mut a, 0);
    let g = frame::gen(p.header(f).load());
    assert_eq!(read_valid(&p, &mut b, 1), f, "one frame, reused");
    // Make the frame's generation equal the stale slot's again, as 2^32
    // claims would.
    let s = p.header(f).load();
    p.header(f).state.store(
        (s & ((1 << frame::GEN_SHIFT) - 1)) | (u64::from(g) << frame::GEN_SHIFT),
        Ordering::SeqCst,
    );
    assert_eq!(
        p.lookup_existing(&mut a, 0),
        Ok(None),
        "file 7 block 0 must miss"
    );
    assert_eq!(
        frame::pins(p.header(f).load()),
        0,
        "the refused pin was dropped"
    );
}

/// After 2^32 claims of a frame, the slot file 7 block 0 left behind names
/// the frame's generation again. This claims the frame at that generation.
/// Returns the frame, its generation, and file 7's view.
fn claim_at_wrapped_gen(p: &PoolInner) -> (u32, u32, FileView) {
    let mut a = p.file_view(FileId::new(7));
    let f = read_valid(p, &mut a, 0);
    let g = frame::gen(p.header(f).load());
    let mut other = p.file_view(FileId::new(9));
    assert_eq!(read_valid(p, &mut other, 3), f, "one frame, reused");
    // 2^32 - 2 claims later: the next claim brings generation `g` back.
    p.header(f).set_gen(g.wrapping_sub(1));
    assert_eq!(p.sweep(), Ok(f), "the one frame, claimed");
    assert_eq!(frame::gen(p.header(f).load()), g);
    (f, g, a)
}

/// A lookup through a stale slot whose generation has come round again
/// pins the frame (then checks the tag and unpins) even while another
/// thread holds the frame claimed for a new block. Installing the claimed
/// frame, and giving the claim back, must keep that pin: a state word
/// stored whole would drop it, and the lookup's unpin would then take the
/// claim's (a read's frame with no pin, free to be taken for another block
/// under the read).
#[test]
fn install_and_release_keep_a_pin_taken_through_a_wrapped_stale_slot() {
    // Install, taking the slot-changed path once (the slot is not what the
    // caller found: the claim goes back to EMPTY and is tried again).
    let p = pool(1);
    let (f, g, _a) = claim_at_wrapped_gen(&p);
    assert!(
        matches!(p.header(f).pin_if_gen(g), PinIf::Pinned(_)),
        "the stale lookup pins"
    );
    let mut b = p.file_view(FileId::new(8));
    let not_what_is_there = table::pack(f, g.wrapping_add(9));
    assert_eq!(
        p.install(f, &mut b, 1, not_what_is_there),
        Ok(Lookup::Read(f))
    );
    assert_eq!(frame::pins(p.header(f).load()), 2, "claim + stale lookup");
    // The stale lookup sees file 8's tag, not file 7's, and lets go.
    p.header(f).unpin();
    let s = p.header(f).load();
    assert_eq!(
        (frame::pins(s), frame::status(s)),
        (1, Status::Io),
        "the read keeps its pin"
    );
    assert_eq!(
        p.sweep(),
        Err(Exhausted),
        "a frame under a read cannot be taken"
    );
    p.finish_io(f, true);
    p.unpin(f);
    assert_eq!(frame::pins(p.header(f).load()), 0);

    // Release of a claim that was never installed.
    let p = pool(1);
    let (f, g, _a) = claim_at_wrapped_gen(&p);
    assert!(matches!(p.header(f).pin_if_gen(g), PinIf::Pinned(_)));
    p.release_claim(f);
    let s = p.header(f).load();
    assert_eq!(
        frame::pins(s),
        1,
        "the stale lookup's pin survives the release"
    );
    assert_eq!(frame::gen(s), g);
    assert_eq!(
        p.sweep(),
        Err(Exhausted),
        "a frame someone pins cannot be taken"
    );
    p.header(f).unpin();
    assert_eq!(frame::pins(p.header(f).load()), 0);
    assert!(matches!(p.sweep(), Ok(x) if x == f), "free again");
}

/// A frame at the most pins it can count refuses another pin instead of
/// carrying into its status bits.
#[test]
fn a_full_pin_count_refuses_more_pins() {
    let p = pool(1);
    let mut v = p.file_view(FileId::new(1));
    let f = read_valid(&p, &mut v, 0);
    let s = p.header(f).load();
    p.header(f)
        .state
        .store(s | frame::PIN_MASK, Ordering::SeqCst);
    assert_eq!(p.lookup_existing(&mut v, 0), Err(Exhausted));
    assert_eq!(
        p.sweep(),
        Err(Exhausted),
        "a fully pinned frame is not free"
    );
    assert_eq!(frame::status(p.header(f).load()), Status::Valid);
}

/// Block numbers far past 2^28 (sparse files can report exabytes) use the
/// sparse chunk map instead of a vector that long.
#[test]
fn huge_block_numbers_do_not_allocate_huge_tables() {
    let p = pool(4);
    let mut v = p.file_view(FileId::new(1));
    for b in [(1u64 << 49) - 1, 1 << 40, u64::MAX >> 13] {
        let f = read_valid(&p, &mut v, b);
        assert!(matches!(p.lookup_existing(&mut v, b), Ok(Some(Lookup::Hit(g))) if g == f));
        p.unpin(f);
    }
}

/// `invalidate` frees unpinned frames of one file and leaves others alone.
#[test]
fn invalidate_frees_one_files_frames() {
    let p = pool(8);
    let mut a = p.file_view(FileId::new(1));
    let mut b = p.file_view(FileId::new(2));
    for blk in 0..3 {
        read_valid(&p, &mut a, blk);
    }
    read_valid(&p, &mut b, 0);
    let pinned = match p.lookup(&mut a, 0, None) {
        Ok(Lookup::Hit(f)) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        p.invalidate(FileId::new(1)),
        2,
        "blocks 1 and 2; block 0 is pinned"
    );
    assert_eq!(p.lookup_existing(&mut a, 1), Ok(None));
    assert!(
        matches!(p.lookup_existing(&mut b, 0), Ok(Some(Lookup::Hit(f))) if { p.unpin(f); true })
    );
    p.unpin(pinned);
}

/// A prefaulted pool's frames are mapped, zero, and in the alignment the
/// builder promises, for block sizes below, at and above the page size.
#[test]
fn a_prefaulted_pool_is_zeroed_and_aligned() {
    for bs in [512, 4096, 16384] {
        let pool = BufferPool::builder()
            .frames(33)
            .block_size(bs)
            .prefault(true)
            .build()
            .unwrap();
        let p = &pool.inner;
        for f in 0..33u32 {
            let ptr = p.frame_ptr(f);
            assert_eq!(ptr as usize % bs.min(FRAME_ALIGN), 0, "frame {f} at {bs}");
            // SAFETY: no stream exists, so nothing writes the frame; it is
            // `bs` bytes inside the pool's allocation.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, bs) };
            assert!(bytes.iter().all(|&b| b == 0), "frame {f} at {bs} not zero");
        }
    }
}

/// A pool of 64 frames and a ring of `slots` slots (growing to `max_len`,
/// `step` a read), its slots filled by reading blocks `0..slots` of a file
/// through it; returns them and the frames, slot by slot.
fn filled_ring(
    slots: usize,
    max_len: usize,
    step: usize,
) -> (Arc<PoolInner>, FileView, Ring, Vec<u32>) {
    let p = pool(64);
    let mut view = p.file_view(FileId::new(1));
    let mut ring = Ring::new(slots, max_len, step);
    let frames = (0..slots as u64)
        .map(|b| read_into(&p, &mut view, Some(&mut ring), b, false))
        .collect();
    (p, view, ring, frames)
}

/// A ring whose window is smaller than the ring cycles through the
/// window's frames only; frames outside it stay untouched.
#[test]
fn a_ring_reuses_only_the_frames_of_its_window() {
    // 32 slots, 8 a read.
    let (p, mut view, mut ring, first) = filled_ring(32, 32, 8);
    ring.set_window(16);
    assert_eq!(ring.window(), 16);
    let next: Vec<u32> = (32..96)
        .map(|b| read_into(&p, &mut view, Some(&mut ring), b, false))
        .collect();
    let used: std::collections::BTreeSet<u32> = next.iter().copied().collect();
    let window: std::collections::BTreeSet<u32> = first[..16].iter().copied().collect();
    assert_eq!(used, window, "frames reused outside the window");
    // The frames outside it still hold their blocks.
    for (b, &f) in first.iter().enumerate().skip(16) {
        assert_eq!(
            p.lookup_existing(&mut view, b as u64).map(|h| h.is_some()),
            Ok(true)
        );
        p.unpin(f);
    }
    assert_eq!(ring.len(), 32, "the ring grew");
}

/// A window is whole reads, at least one and at most the ring.
#[test]
fn a_ring_window_is_whole_reads_within_the_ring() {
    let mut ring = Ring::new(32, 64, 8);
    for (want, got) in [
        (0, 8),
        (1, 8),
        (8, 8),
        (9, 16),
        (31, 32),
        (1000, 32),
        (usize::MAX, 32),
    ] {
        ring.set_window(want);
        assert_eq!(ring.window(), got, "set_window({want})");
    }
}

/// A frame still held when the ring comes round to it widens the window
/// by a read (the ring takes a frame it already has) before the ring
/// takes one from the sweep, the widened window outlasts the next
/// `set_window`, and the ring grows only once its window is all of it.
#[test]
fn a_held_frame_widens_the_window_before_the_ring_grows() {
    let (p, mut view, mut ring, first) = filled_ring(16, 32, 8);
    ring.set_window(8);
    // Every frame read from now on is held. Blocks 16..24 reuse slots
    // 0..8.
    let mut held: Vec<u32> = (16..24)
        .map(|b| read_into(&p, &mut view, Some(&mut ring), b, true))
        .collect();
    assert_eq!(held, first[..8]);
    // Round again: slot 0 is held, so the window takes slots 8..16.
    held.push(read_into(&p, &mut view, Some(&mut ring), 24, true));
    assert_eq!(
        held[8], first[8],
        "did not widen into the ring's own frames"
    );
    assert_eq!((ring.window(), ring.len()), (16, 16));
    ring.set_window(8);
    assert_eq!(ring.window(), 16, "the widened window did not last");
    for b in 25..32 {
        held.push(read_into(&p, &mut view, Some(&mut ring), b, true));
    }
    assert_eq!(held[8..], first[8..]);
    assert_eq!(ring.len(), 16, "grew while its own frames were free");
    // Every slot is held and in the window: now the ring grows by a read.
    held.push(read_into(&p, &mut view, Some(&mut ring), 32, true));
    assert_eq!(ring.len(), 24);
    for f in held {
        p.unpin(f);
    }
}

/// A widened window comes back down a read's worth after each lap of it
/// that found nothing busy.
#[test]
fn a_widened_window_comes_down_after_laps_with_nothing_busy() {
    let (p, mut view, mut ring, _) = filled_ring(16, 16, 8);
    ring.set_window(8);
    // Slot 0's frame is held when the ring comes round to it: the window
    // widens to 16 and stays there.
    let held = read_into(&p, &mut view, Some(&mut ring), 16, true);
    for b in 17..24 {
        read_into(&p, &mut view, Some(&mut ring), b, false);
    }
    read_into(&p, &mut view, Some(&mut ring), 24, false);
    assert_eq!(ring.window(), 16);
    ring.set_window(8);
    assert_eq!(ring.window(), 16, "the widened window did not last");
    p.unpin(held);
    // The rest of the lap that found slot 0 busy, then one lap of the 16
    // slots with nothing busy: back to 8.
    for b in 25..48 {
        read_into(&p, &mut view, Some(&mut ring), b, false);
    }
    ring.set_window(8);
    assert_eq!(ring.window(), 8, "the window did not come down");
}
