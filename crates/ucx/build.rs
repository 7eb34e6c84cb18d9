//! Generates the UCP bindings from the installed headers (`libucx-dev`), so the structures'
//! layout is the one the linked library was built with, and links `libucp`/`libucs`.

fn main() {
    let ucx = pkg_config::Config::new()
        .atleast_version("1.10")
        .probe("ucx")
        .expect("libucx-dev (UCX 1.10 or later, with its pkg-config file) is required: apt-get install libucx-dev");
    let mut builder = bindgen::Builder::default()
        .header_contents("wrapper.h", "#include <ucp/api/ucp.h>\n")
        .allowlist_function("ucp_.*|ucs_status_string")
        .allowlist_type("ucp_.*|ucs_.*")
        .allowlist_var("UCP_.*|UCS_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false);
    for dir in &ucx.include_paths {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = builder.generate().expect("generating the UCX bindings");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("ucp.rs"))
        .expect("writing the UCX bindings");
    println!("cargo:rerun-if-changed=build.rs");
}
