//! Binds the installed libfabric headers (Debian 12: 1.17) with bindgen and compiles the
//! wrappers of libfabric's `static inline` calls.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-changed=csrc/wrapper.c");
    println!("cargo:rustc-link-lib=fabric");

    cc::Build::new()
        .file("csrc/wrapper.c")
        .include("csrc")
        .warnings(true)
        .compile("rma_ofi_wrapper");

    let bindings = bindgen::Builder::default()
        .header("csrc/wrapper.h")
        .allowlist_function("rma_fi_.*")
        .allowlist_function("fi_getinfo|fi_freeinfo|fi_dupinfo|fi_allocinfo|fi_strerror|fi_tostr")
        .allowlist_type("fi_.*|fid_.*")
        .allowlist_var("FI_.*")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect(
            "bindgen over <rdma/fabric.h> and the fi_*.h headers (is libfabric-dev installed?)",
        );
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}
