//! The memcpy preload library under real programs: a C program's copies of every size (and
//! its threads' and a forked child's) come out right with large ones through the mover, and
//! unmodified programs (sha256sum, python3, sort) give the same output with and without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// This build's libswitchyard_memcpy.so: the one `cargo test` built beside this test, in
/// target/<profile>/deps (the copy one level up is `cargo build`'s, and may be older).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.with_file_name("libswitchyard_memcpy.so");
    assert!(lib.exists(), "no {}", lib.display());
    lib
}

/// Runs `cmd` with the library preloaded and its counters asked for.
fn preloaded(cmd: &mut Command) -> Output {
    cmd.env("LD_PRELOAD", library())
        .env("SWITCHYARD_MEMCPY_STATS", "1")
        .output()
        .unwrap()
}

/// The bytes copied through the mover, from the counters line on stderr.
fn moved(stderr: &[u8]) -> u64 {
    counted(stderr, 0)
}

/// The `nth` "… N bytes through the mover" figure of the counters line (0: copies, 1: fills).
fn counted(stderr: &[u8], nth: usize) -> u64 {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .find(|l| l.starts_with("switchyard memcpy:"))
        .unwrap_or_else(|| panic!("no counters in {text}"));
    line.split(" bytes through the mover")
        .nth(nth)
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn every_copy_is_right_in_threads_and_a_forked_child() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("copies");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/copies.c");
    let ok = Command::new("cc")
        .args(["-O2", "-fno-builtin", "-Wall", "-Werror", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(ok.success());
    let out = preloaded(Command::new(&exe).current_dir(dir.path()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("copies ok"));
    // Each of the 16 rounds copies at least 3 × (64 KiB + 1 MiB + 8 MiB + 33 MiB) large.
    assert!(moved(&out.stderr) > 1 << 30, "{err}");
    // And each round fills one buffer of each size: the large ones through the mover's fill.
    assert!(counted(&out.stderr, 1) > 1 << 28, "{err}");
}

/// `SWITCHYARD_CONFIG` names the stack's configuration file: the library takes the mover's
/// sections from it and accepts every other layer's; a file that fails its checks turns the
/// library off (every copy to libc) instead of failing the program.
#[test]
fn the_configuration_file_is_the_whole_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("copies");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/copies.c");
    let ok = Command::new("cc")
        .args(["-O2", "-fno-builtin", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(ok.success());
    let run = |toml: &str| {
        let config = dir.path().join("switchyard.toml");
        std::fs::write(&config, toml).unwrap();
        let out = preloaded(
            Command::new(&exe)
                .current_dir(dir.path())
                .env("SWITCHYARD_CONFIG", &config),
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{toml}: {err}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("copies ok"));
        moved(&out.stderr)
    };
    let whole = "[mover]\npolicy = \"engine\"\n[runtime]\nspin_us = 10\n\
                 [store]\nsync = \"always\"\n[fuse]\nworkers = 2\n";
    assert!(run(whole) > 1 << 30);
    assert_eq!(run("[fuse]\nmax_io = 1\n"), 0);
}

#[test]
fn unmodified_programs_give_the_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    let data: Vec<u8> = (0..24u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let runs: [&[&str]; 3] = [
        &["sha256sum"],
        &["python3", "-c", "import sys; b = open(sys.argv[1], 'rb').read(); c = bytearray(b); print(len(c), c[:8].hex(), bytes(c[::-1])[:8].hex())"],
        &["sort", "-S", "64M"],
    ];
    for args in runs {
        if Command::new(args[0]).arg("--version").output().is_err() {
            eprintln!("skipping {}: not installed", args[0]);
            continue;
        }
        let plain = Command::new(args[0])
            .args(&args[1..])
            .arg(&file)
            .output()
            .unwrap();
        let with = preloaded(Command::new(args[0]).args(&args[1..]).arg(&file));
        assert!(
            with.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&with.stderr)
        );
        assert_eq!(plain.stdout, with.stdout, "{args:?}");
        moved(&with.stderr);
    }
}
