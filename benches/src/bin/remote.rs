//! `remote`: scans over simulated remote storage; the measurement is
//! [`pagestream_bench::remote`], which `pagestream-bench report` also runs.

fn main() {
    pagestream_bench::remote::main();
}
