//! `pagestream-bench` (work in progress).
fn main() {}
