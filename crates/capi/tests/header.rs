//! The committed header (`include/switchyard.h`) is what cbindgen writes from the crate now:
//! a change to the C ABI that forgot the header fails here. `SWITCHYARD_BLESS=1` rewrites it.

#[test]
fn the_header_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate");
    let mut now = Vec::new();
    bindings.write(&mut now);
    let path = dir.join("include/switchyard.h");
    if std::env::var_os("SWITCHYARD_BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == now,
        "{} is stale: run SWITCHYARD_BLESS=1 cargo test -p switchyard-capi --test header",
        path.display()
    );
}
