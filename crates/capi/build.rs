//! Links the shared library with its symbol version script: only `sy_*` is exported, each
//! under the version node `SWITCHYARD_1` (see `switchyard.map`).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    println!("cargo:rerun-if-changed=switchyard.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/switchyard.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libswitchyard.so.1");
}
