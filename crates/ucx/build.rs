//! Generates the UCP bindings from the UCX headers the build links against, so the structures'
//! layout is the one the linked library was built with, and links `libucp`/`libucs`.
//!
//! Which UCX: the prefix in `SWITCHYARD_UCX` if set; else `/opt/switchyard/ucx` where
//! `scripts/install-deps.sh` puts UCX 1.22 (whose `ucp_get` and `ucp_put` run over `cma` as
//! true one-sided copies between processes of one host, where Debian 12's UCX 1.13 emulates
//! them with the target's CPU); else the system's, through pkg-config (`libucx-dev`). The
//! binaries find the first two at run time through the rpath in `.cargo/config.toml`.

use std::path::PathBuf;

/// Where `scripts/install-deps.sh` installs UCX (a link to the versioned directory).
const INSTALLED: &str = "/opt/switchyard/ucx";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SWITCHYARD_UCX");
    let prefix = std::env::var_os("SWITCHYARD_UCX")
        .map(PathBuf::from)
        .or_else(|| {
            Some(PathBuf::from(INSTALLED)).filter(|p| p.join("include/ucp/api/ucp.h").exists())
        });
    let include_paths = match prefix {
        Some(prefix) => {
            let lib = prefix.join("lib");
            println!(
                "cargo:rerun-if-changed={}",
                prefix.join("include/ucp/api/ucp_version.h").display()
            );
            println!("cargo:rustc-link-search=native={}", lib.display());
            println!("cargo:rustc-link-lib=ucp");
            println!("cargo:rustc-link-lib=ucs");
            vec![prefix.join("include")]
        }
        None => pkg_config::Config::new()
            .atleast_version("1.10")
            .probe("ucx")
            .expect(
                "UCX is required: run scripts/install-deps.sh (UCX 1.22 in /opt/switchyard/ucx), \
                     set SWITCHYARD_UCX to a UCX prefix, or apt-get install libucx-dev",
            )
            .include_paths,
    };
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
    for dir in &include_paths {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = builder.generate().expect("generating the UCX bindings");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("ucp.rs"))
        .expect("writing the UCX bindings");
}
