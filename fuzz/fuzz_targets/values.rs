//! The scan programs' value syntax (`benches/src/args/values.rs`) on
//! arbitrary text: no parser panics; a value it accepts reads back the same
//! after formatting (sizes, yield budgets) or is in range (rings,
//! durations, counts); an error names the text it refused; and the checks
//! of `--block-size`, `--size`, `--combine` and `--max-ios` accept exactly
//! the values in range and name the flag when they refuse one.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Included by path, so that this target does not build the benchmark crate
// and its runtimes.
#[allow(dead_code)]
#[path = "../../benches/src/args/values.rs"]
mod values;

use values::*;

/// The error names the text: `"{text:?}"` appears in it.
fn names(e: &str, text: &str) {
    assert!(
        e.contains(&format!("{text:?}")),
        "{e:?} does not name {text:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let s = text.as_ref();
    let mut word = [0u8; 8];
    let n = rest.len().min(8);
    word[..n].copy_from_slice(&rest[..n]);
    let x = u64::from_le_bytes(word);
    match which % 8 {
        0 => match parse_size(s) {
            Ok(v) => assert_eq!(parse_size(&format_size(v)), Ok(v), "{s:?}"),
            Err(e) => names(&e, s),
        },
        1 => assert_eq!(parse_size(&format_size(x)), Ok(x)),
        2 => match parse_block_size(s) {
            Ok(v) => assert_eq!(parse_size(s), Ok(v as u64)),
            Err(e) => names(&e, s),
        },
        3 => match parse_ring(s) {
            Ok(None) => assert_eq!(s, "auto"),
            Ok(Some(0)) => assert_eq!(s, "off"),
            Ok(Some(v)) => assert_eq!(parse_size(s), Ok(v as u64)),
            Err(e) => names(&e, s),
        },
        4 => match parse_yield_budget(s) {
            Ok(b) => assert_eq!(parse_yield_budget(&format_budget(b)), Ok(b), "{s:?}"),
            Err(e) => names(&e, s),
        },
        5 => match parse_duration(s) {
            Ok(d) => assert!(!d.is_zero(), "{s:?}"),
            Err(e) => names(&e, s),
        },
        6 => match number::<usize>(s) {
            Ok(v) => assert_eq!(v.to_string().parse::<usize>(), Ok(v)),
            Err(e) => names(&e, s),
        },
        _ => {
            let bs = (x as u32) as usize;
            let size = x >> 16;
            let ok = (512..=1 << 20).contains(&bs)
                && bs.is_power_of_two()
                && size > 0
                && size % bs as u64 == 0;
            match check_block_size(bs, size) {
                Ok(()) => assert!(ok, "{bs} {size}"),
                Err(e) => {
                    assert!(!ok, "{bs} {size}: {e}");
                    assert!(
                        e.0.contains("--block-size") || e.0.contains("--size"),
                        "{e}"
                    );
                }
            }
            let k = (x % 1024) as usize;
            let combine_ok = (1..=pagestream::MAX_IO_COMBINE_LIMIT).contains(&k);
            match check_combine(k) {
                Ok(()) => assert!(combine_ok, "{k}"),
                Err(e) => assert!(!combine_ok && e.0.contains("--combine"), "{k}: {e}"),
            }
            match check_max_ios(k) {
                Ok(()) => assert!(k <= pagestream::MAX_IOS, "{k}"),
                Err(e) => assert!(
                    k > pagestream::MAX_IOS && e.0.contains("--max-ios"),
                    "{k}: {e}"
                ),
            }
        }
    }
});
