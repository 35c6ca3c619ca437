//! The core conformance suite over real servers: moto's S3 API (objects
//! put through object_store's S3 client) and nginx (files under its root,
//! opened by URL with object_store's HTTP client).

mod common;

use common::{conformance, moto, nginx, Backend, Flavor};

#[test]
fn conformance_moto() {
    let Some(moto) = moto("conformance") else {
        return;
    };
    let st = conformance(
        "object-store on moto",
        Backend::moto(&moto, "conformance"),
        Flavor::CurrentThread,
    );
    assert!(st.gets > 0 && st.answered > 0 && st.failed == 0, "{st:?}");
}

#[test]
fn conformance_nginx() {
    for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
        let Some((nginx, root)) = nginx() else {
            return;
        };
        let st = conformance(
            "object-store on nginx",
            Backend::Nginx { nginx, root },
            flavor,
        );
        assert!(st.gets > 0 && st.answered > 0 && st.failed == 0, "{st:?}");
    }
}
