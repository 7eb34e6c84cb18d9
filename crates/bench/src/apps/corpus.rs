//! Synthetic input: web-service log text (what grep scans, snappy compresses and sha256sum
//! hashes), deterministic from a seed, and a checksum to verify what an application wrote.

use std::io::Write;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use switchyard_store::{Fs, OpenFlags};

const SERVICES: [&str; 8] = [
    "api", "auth", "billing", "search", "cart", "images", "mailer", "gateway",
];
const RESOURCES: [&str; 6] = ["items", "users", "orders", "sessions", "carts", "reviews"];

/// `len` bytes of log lines (the last one padded to end exactly at `len` with a newline).
/// About one line in 60 is an error or fatal line and a third of those carry a 5xx status.
pub fn log_text(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(len);
    let mut ms: u64 = rng.random_range(0..3_600_000);
    while out.len() + 200 < len {
        ms += rng.random_range(0..40);
        let level = match rng.random_range(0..1000) {
            0..=11 => "ERROR",
            12..=16 => "FATAL",
            17..=96 => "WARN",
            _ => "INFO",
        };
        let status = match (level, rng.random_range(0..3)) {
            ("ERROR" | "FATAL", 0) => [500, 502, 503][rng.random_range(0..3)],
            ("ERROR" | "FATAL", _) | ("WARN", _) => [400, 404, 409][rng.random_range(0..3)],
            _ => 200,
        };
        let _ = writeln!(
            out,
            "2026-11-22T{:02}:{:02}:{:02}.{:03}Z host-{:02} {} level={} req={:016x} \
             path=/v1/{}/{} status={} latency_ms={}",
            ms / 3_600_000 % 24,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000,
            rng.random_range(0..48),
            SERVICES[rng.random_range(0..SERVICES.len())],
            level,
            rng.random::<u64>(),
            RESOURCES[rng.random_range(0..RESOURCES.len())],
            rng.random_range(0..100_000),
            status,
            rng.random_range(1..2000),
        );
    }
    out.resize(len - 1, b'.');
    out.push(b'\n');
    out
}

/// An order-dependent checksum of `data` (one multiply-add per 8 bytes; untimed checks only).
pub fn checksum(data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(8);
    let mut h = data.len() as u64;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    for &b in words.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    h
}

/// Writes `data` bytes of log text as files of `file_len` bytes in a new directory `dir`
/// (file `i` from seed `seed + i`), handing each file's text to `each`; their paths.
pub fn write_logs(
    fs: &Fs,
    dir: &str,
    seed: u64,
    data: u64,
    file_len: usize,
    mut each: impl FnMut(&[u8]),
) -> anyhow::Result<Vec<String>> {
    fs.mkdir(dir, 0o755)?;
    let files = (data as usize / file_len).max(1);
    let mut paths = Vec::with_capacity(files);
    for i in 0..files {
        let text = log_text(seed + i as u64, file_len);
        let path = format!("{dir}/{i:04}.log");
        let fd = fs.open(&path, OpenFlags::CREATE, 0o644)?;
        fs.pwrite(fd, &text, 0)?;
        fs.close(fd)?;
        each(&text);
        paths.push(path);
    }
    Ok(paths)
}
