//! The README's quick start is the crate's front page, word for word: the
//! text between `<!-- quickstart:begin -->` and `<!-- quickstart:end -->`
//! in `README.md` equals the same span of `core/src/lib.rs`'s crate docs,
//! where it runs as a doc-test. Edit both, or this fails.

fn span<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in lines {
        if line.trim() == "<!-- quickstart:begin -->" {
            inside = true;
        } else if line.trim() == "<!-- quickstart:end -->" {
            assert!(inside, "quickstart:end before quickstart:begin");
            return out;
        } else if inside {
            out.push(line);
        }
    }
    panic!("no complete quickstart:begin / quickstart:end span");
}

#[test]
fn readme_quick_start_is_the_crate_front_page() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let lib = std::fs::read_to_string(format!("{root}/core/src/lib.rs")).unwrap();
    let from_readme = span(readme.lines());
    let from_lib = span(
        lib.lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.strip_prefix("//! ").unwrap_or(&l[3..])),
    );
    assert!(
        from_readme.len() > 15,
        "quick start too short: {from_readme:?}"
    );
    assert_eq!(from_readme, from_lib);
}
