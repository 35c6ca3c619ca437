//! pgcount's heap-page parser on arbitrary pages: it never panics and never
//! reads outside the page (AddressSanitizer), and its answer does not
//! depend on the order it visits the line pointers in: both orders give
//! the same counts, or both give an error (which may differ), and an error
//! leaves the counts as they were.
//!
//! The fuzzer's bytes make the page: the first byte chooses whether to sum
//! the first column, the first half of the rest is written from the start
//! of the page (header, line pointers) and the second half to its end
//! (tuples), zeros between.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The parser lives in the pgcount program; included by path, so that this
// target does not build the benchmark crate and its runtimes.
#[allow(dead_code)]
#[path = "../../benches/src/bin/pgcount/heap.rs"]
mod heap;

use heap::{count_page_in, Counts, TupleOrder, BLCKSZ};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut page = vec![0u8; BLCKSZ];
    let (head, tail) = rest.split_at(rest.len() / 2);
    let head = &head[..head.len().min(BLCKSZ / 2)];
    let tail = &tail[tail.len().saturating_sub(BLCKSZ / 2)..];
    page[..head.len()].copy_from_slice(head);
    page[BLCKSZ - tail.len()..].copy_from_slice(tail);
    let sum = flags & 1 != 0;
    let before = Counts {
        pages: 7,
        ..Counts::default()
    };
    let mut forward = before;
    let mut reverse = before;
    let a = count_page_in(3, &page, sum, TupleOrder::LinePointer, &mut forward);
    let b = count_page_in(3, &page, sum, TupleOrder::Reverse, &mut reverse);
    match (&a, &b) {
        (Ok(()), Ok(())) => assert_eq!(forward, reverse, "orders disagree"),
        (Err(_), Err(_)) => {
            assert_eq!(forward, before, "an error changed the counts");
            assert_eq!(reverse, before, "an error changed the counts");
        }
        _ => panic!("one order failed and the other did not: {a:?} / {b:?}"),
    }
});
