//! The C side: the examples under `examples/` and the multi-threaded `tests/c/hammer.c` are
//! compiled against the header and the shared library this build made (warnings are errors),
//! then run and must succeed; the library exports only `sy_*`, under `SWITCHYARD_1`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// This build's libswitchyard.so: the one `cargo test` built beside this test, in
/// target/<profile>/deps (the copy one level up is `cargo build`'s, and may be older).
fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.with_file_name("libswitchyard.so");
    assert!(lib.exists(), "no {}", lib.display());
    lib
}

/// A directory laid out as an installed library: `libswitchyard.so.1` (the soname programs
/// load) and `libswitchyard.so` (what `-lswitchyard` finds), both the built library.
fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        for name in ["libswitchyard.so", "libswitchyard.so.1"] {
            std::os::unix::fs::symlink(built_lib(), d.path().join(name)).unwrap();
        }
        d
    });
    dir.path().to_path_buf()
}

/// Compiles the C file `src` into `out`, against the header and the shared library.
fn compile(src: &Path, out: &Path) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let status = Command::new("cc")
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O2",
            "-I",
        ])
        .arg(crate_dir.join("include"))
        .arg(src)
        .arg("-o")
        .arg(out)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lswitchyard", "-lpthread"])
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc {} failed", src.display());
}

/// Compiles and runs `src` with `args`; returns its standard output.
fn run(src: &Path, args: &[&Path]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("prog");
    compile(src, &exe);
    let out = Command::new(&exe)
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{} failed: {}\n{stdout}{stderr}",
        src.display(),
        out.status
    );
    stdout.into_owned()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

#[test]
fn the_copy_example_runs() {
    let out = run(&example("copy.c"), &[]);
    assert!(out.contains("copied 8388608 bytes"), "{out}");
}

#[test]
fn the_file_round_trip_example_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("rt.store");
    let out = run(&example("file_roundtrip.c"), &[&store]);
    assert!(
        out.contains("/docs/a.txt") && out.contains("round trip"),
        "{out}"
    );
}

#[test]
fn the_asynchronous_batch_example_runs() {
    let out = run(&example("async_batch.c"), &[]);
    assert!(out.contains("16 asynchronous copies"), "{out}");
}

/// Eight threads on one store and one mover (and a mover each): every byte checked, appends
/// never torn.
#[test]
fn eight_threads_hammer_the_c_api() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("hammer.store");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/hammer.c");
    let out = run(&src, &[&store]);
    assert!(out.contains("8 threads"), "{out}");
}

/// Only `sy_*` is exported from the shared library, each under `SWITCHYARD_1`.
#[test]
fn only_sy_symbols_are_exported_with_their_version() {
    let lib = built_lib();
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--with-symbol-versions"])
        .arg(&lib)
        .output()
        .expect("nm runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let symbols: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| !s.starts_with("SWITCHYARD_1"))
        .collect();
    assert!(symbols.len() > 30, "{text}");
    for s in &symbols {
        assert!(
            s.starts_with("sy_") && s.ends_with("@@SWITCHYARD_1"),
            "exported: {s}"
        );
    }
}

/// `scripts/install-lib.sh` lays out a prefix that pkg-config describes: the copy example
/// builds and runs against it, linked to the shared library and, with `--static`, to the
/// static one.
#[test]
fn the_installed_library_builds_programs_through_pkg_config() {
    let prefix = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new("bash")
        .arg(root.join("scripts/install-lib.sh"))
        .arg(prefix.path())
        .env("SWITCHYARD_LIB_DIR", built_lib().parent().unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let pc = prefix.path().join("lib/pkgconfig");
    for link in [&["--libs"][..], &["--libs", "--static"][..]] {
        let flags = Command::new("pkg-config")
            .args(["--cflags", "switchyard"])
            .args(link)
            .env("PKG_CONFIG_PATH", &pc)
            .output()
            .expect("pkg-config runs");
        assert!(flags.status.success(), "{flags:?}");
        let mut flags: Vec<String> = String::from_utf8(flags.stdout)
            .unwrap()
            .split_whitespace()
            .map(String::from)
            .collect();
        if link.len() == 2 {
            // The static library, not the shared one beside it.
            let at = flags.iter().position(|f| f == "-lswitchyard").unwrap();
            flags[at] = prefix
                .path()
                .join("lib/libswitchyard.a")
                .display()
                .to_string();
        }
        let exe = prefix.path().join("copy");
        let built = Command::new("cc")
            .arg(root.join("examples/copy.c"))
            .arg("-o")
            .arg(&exe)
            .args(&flags)
            .arg(format!(
                "-Wl,-rpath,{}",
                prefix.path().join("lib").display()
            ))
            .status()
            .unwrap();
        assert!(built.success(), "cc with {flags:?}");
        let out = Command::new(&exe).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
}

/// The store's completion queue: orderless writes and reads submitted in batches, reaped and
/// checked; a bad descriptor's completion; requests finished by the close; every byte there
/// after reopening.
#[test]
fn asynchronous_store_io_through_the_completion_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("aio.store");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/aio.c");
    let out = run(&src, &[&store]);
    assert!(out.contains("32 asynchronous writes and reads ok"), "{out}");
}
