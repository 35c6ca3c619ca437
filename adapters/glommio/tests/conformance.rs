//! The core conformance suite over real O_DIRECT files read through glommio
//! DMA files, on a glommio executor whose io_memory fits RLIMIT_MEMLOCK.

mod common;

use common::{close_all, dma_files};
use pagestream::testing::conformance::run_all;
use pagestream_glommio::{make_executor, GlommioEngine};

#[test]
fn conformance_dma() {
    let Some(ex) =
        pagestream::testing::require("glommio (io_uring, RLIMIT_MEMLOCK)", make_executor())
    else {
        return;
    };
    ex.run(async {
        let engine = GlommioEngine::new();
        let h = dma_files(engine.clone(), "glommio DMA");
        run_all(&h).await;
        close_all(h.take_files()).await;
        let st = engine.stats();
        eprintln!("engine: {st:?}, copy at {:?} GiB/s", st.copy_gib_per_s());
        assert!(st.reads > 0, "no reads went through glommio: {st:?}");
        assert!(
            st.bytes_copied > 0 && st.bytes_copied <= st.bytes_read,
            "copied more than read: {st:?}"
        );
    });
}
