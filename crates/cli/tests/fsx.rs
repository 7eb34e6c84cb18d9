//! fsx, the file system exerciser (as in xfstests): random operations on one file through
//! the mount — writes, reads, truncations, every `fallocate` mode the store has, mapped reads
//! and writes, `copy_file_range` from another file and within the file, `fsync`, closing
//! and reopening, writes and reads with `O_DIRECT` — each checked against a model of what the file must hold: every read's
//! bytes, every mapped read and the size after every operation; at the end, the whole file
//! again after a remount.
//!
//! On a mismatch the test prints the seed and the last operations. `SWITCHYARD_FSX_OPS` sets
//! the number of operations (default 3000), `SWITCHYARD_FSX_SEED` the seed.

mod common;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{Mount, Rng};

/// The file's size stays below this (fsx's default `maxfilelen` is 256 KiB; a larger one
/// crosses the store's extent and split sizes).
const MAX_LEN: u64 = 3 << 20;
/// The largest single write, read or copy.
const MAX_OP: u64 = 320 << 10;

/// An offset below `max_off` and a length: mostly small and unaligned, sometimes
/// page-aligned, sometimes large, as fsx's mix of odd sizes finds boundary bugs.
fn range(rng: &mut Rng, max_off: u64) -> (u64, u64) {
    let mut off = rng.below(max_off);
    let mut len = match rng.below(4) {
        0 => rng.below(64) + 1,
        1 => rng.below(16 << 10) + 1,
        _ => rng.below(MAX_OP) + 1,
    };
    if rng.below(4) == 0 {
        off &= !4095;
        len = (len + 4095) & !4095;
    }
    (off, len)
}

/// The file under test, its model, and the log of what was done to it.
struct Fsx {
    path: std::path::PathBuf,
    file: File,
    model: Vec<u8>,
    /// Other content to copy from (`copy_file_range` between files).
    source: (File, Vec<u8>),
    log: Vec<String>,
    rng: Rng,
    seed: u64,
    /// Fill byte of the next write (each write's bytes differ from the last's).
    fill: u8,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

impl Fsx {
    fn open(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    fn fail(&self, what: &str) -> ! {
        let from = self.log.len().saturating_sub(25);
        panic!(
            "fsx (seed {}): {what}\nlast operations (of {}):\n{}",
            self.seed,
            self.log.len(),
            self.log[from..].join("\n")
        );
    }

    /// The bytes of the next write: a counter pattern that shifts every write, so that a
    /// read of stale or misplaced data shows.
    fn bytes(&mut self, off: u64, len: u64) -> Vec<u8> {
        self.fill = self.fill.wrapping_add(1);
        let f = self.fill;
        (off..off + len)
            .map(|i| (i % 251) as u8 ^ f.wrapping_mul(31) | 1)
            .collect()
    }

    fn set_len(&mut self, len: u64) {
        self.model.resize(len as usize, 0);
    }

    fn check_size(&self) {
        let size = self.file.metadata().unwrap().len();
        if size != self.model.len() as u64 {
            self.fail(&format!("size {size}, the model's {}", self.model.len()));
        }
    }

    fn check_bytes(&self, off: u64, got: &[u8], how: &str) {
        let want = &self.model[off as usize..off as usize + got.len()];
        if got != want {
            let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
            self.fail(&format!(
                "{how} at {off}+{}: byte {} is {:#04x}, the model's {:#04x}",
                got.len(),
                off + at as u64,
                got[at],
                want[at]
            ));
        }
    }

    fn write(&mut self) {
        let (off, len) = range(&mut self.rng, MAX_LEN - MAX_OP);
        let data = self.bytes(off, len);
        self.log.push(format!("write {off}+{len}"));
        self.file.write_all_at(&data, off).unwrap();
        if self.model.len() < (off + len) as usize {
            self.set_len(off + len);
        }
        self.model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }

    fn read(&mut self) {
        let size = self.model.len() as u64;
        let (off, len) = range(&mut self.rng, size + 4096);
        self.log.push(format!("read {off}+{len}"));
        let mut buf = vec![0u8; len as usize];
        let mut n = 0;
        while n < buf.len() {
            match self.file.read_at(&mut buf[n..], off + n as u64).unwrap() {
                0 => break,
                k => n += k,
            }
        }
        let expect = size.saturating_sub(off).min(len) as usize;
        if n != expect {
            self.fail(&format!("read {off}+{len} gave {n} bytes, not {expect}"));
        }
        if n > 0 {
            self.check_bytes(off, &buf[..n], "read");
        }
    }

    fn truncate(&mut self) {
        let len = match self.rng.below(3) {
            0 => self.rng.below(MAX_LEN),
            1 => self.rng.below(MAX_LEN) & !4095,
            _ => self.rng.below(self.model.len() as u64 + 1),
        };
        self.log.push(format!("truncate {len}"));
        self.file.set_len(len).unwrap();
        self.set_len(len);
    }

    fn fallocate(&mut self) {
        let (off, len) = range(&mut self.rng, MAX_LEN - MAX_OP);
        let (mode, name) = match self.rng.below(5) {
            0 => (0, "allocate"),
            1 => (libc::FALLOC_FL_KEEP_SIZE, "allocate keep-size"),
            2 => (
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                "punch hole",
            ),
            3 => (libc::FALLOC_FL_ZERO_RANGE, "zero range"),
            _ => (
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                "zero range keep-size",
            ),
        };
        self.log.push(format!("fallocate {name} {off}+{len}"));
        // SAFETY: fallocate on a descriptor we own; no memory is passed.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                off as libc::off_t,
                len as libc::off_t,
            )
        };
        if r != 0 {
            self.fail(&format!("fallocate {name} failed: errno {}", errno()));
        }
        let end = off + len;
        let size = self.model.len() as u64;
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > size {
            self.set_len(end);
        }
        if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            let to = end.min(self.model.len() as u64);
            if off < to {
                self.model[off as usize..to as usize].fill(0);
            }
        }
    }

    /// A shared mapping of the file's first `len` bytes.
    fn map(&self, len: usize, prot: libc::c_int) -> *mut u8 {
        // SAFETY: a fresh shared mapping of our descriptor; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            self.fail(&format!("mmap of {len} bytes failed: errno {}", errno()));
        }
        p.cast()
    }

    fn map_read(&mut self) {
        let size = self.model.len() as u64;
        if size == 0 {
            return;
        }
        let (off, len) = range(&mut self.rng, size);
        let len = len.min(size - off);
        self.log.push(format!("mapread {off}+{len}"));
        let p = self.map(size as usize, libc::PROT_READ);
        // SAFETY: `off + len <= size`, within the mapping of `size` bytes, which is unmapped
        // only after the copy.
        let got = unsafe { std::slice::from_raw_parts(p.add(off as usize), len as usize) }.to_vec();
        // SAFETY: the mapping made above, of this length.
        unsafe { libc::munmap(p.cast(), size as usize) };
        self.check_bytes(off, &got, "mapped read");
    }

    fn map_write(&mut self) {
        let (off, len) = range(&mut self.rng, MAX_LEN - MAX_OP);
        let end = off + len;
        self.log.push(format!("mapwrite {off}+{len}"));
        // As fsx: a mapped write past the end first extends the file.
        if end > self.model.len() as u64 {
            self.file.set_len(end).unwrap();
            self.set_len(end);
        }
        let data = self.bytes(off, len);
        let p = self.map(end as usize, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: `off + len == end`, the mapping's length; the file is at least that long,
        // so every page written is backed.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(off as usize), len as usize);
            if libc::msync(p.cast(), end as usize, libc::MS_SYNC) != 0 {
                self.fail(&format!("msync failed: errno {}", errno()));
            }
            libc::munmap(p.cast(), end as usize);
        }
        self.model[off as usize..end as usize].copy_from_slice(&data);
    }

    /// `copy_file_range` from the other file, or within this one (ranges that do not
    /// overlap, as the call requires).
    fn copy_range(&mut self) {
        let within = self.rng.below(2) == 0 && !self.model.is_empty();
        let from_len = if within {
            self.model.len() as u64
        } else {
            self.source.1.len() as u64
        };
        let (from, len) = range(&mut self.rng, from_len);
        let len = len.min(from_len - from);
        let to = self.rng.below(MAX_LEN - MAX_OP);
        if len == 0 || (within && to < from + len && from < to + len) {
            return;
        }
        self.log.push(format!(
            "copy_file_range {} {from}+{len} to {to}",
            if within { "within" } else { "from other" }
        ));
        let src_fd = if within {
            self.file.as_raw_fd()
        } else {
            self.source.0.as_raw_fd()
        };
        let (mut a, mut b) = (from as i64, to as i64);
        let mut done = 0u64;
        while done < len {
            // SAFETY: both offsets are ours and live across the call; the descriptors are
            // open.
            let n = unsafe {
                libc::copy_file_range(
                    src_fd,
                    &mut a,
                    self.file.as_raw_fd(),
                    &mut b,
                    (len - done) as usize,
                    0,
                )
            };
            if n < 0 {
                self.fail(&format!("copy_file_range failed: errno {}", errno()));
            }
            if n == 0 {
                break;
            }
            done += n as u64;
        }
        if done != len {
            self.fail(&format!("copy_file_range copied {done} of {len}"));
        }
        let bytes = if within {
            self.model[from as usize..(from + len) as usize].to_vec()
        } else {
            self.source.1[from as usize..(from + len) as usize].to_vec()
        };
        if self.model.len() < (to + len) as usize {
            self.set_len(to + len);
        }
        self.model[to as usize..(to + len) as usize].copy_from_slice(&bytes);
    }

    /// A page-aligned write or read through a second descriptor opened with `O_DIRECT`
    /// (fsx's `-Z`): it must see what the cached descriptor wrote, and the cached one what
    /// it writes.
    fn direct(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&self.path)
            .unwrap();
        let off = self.rng.below(MAX_LEN - MAX_OP) & !4095;
        let len = ((self.rng.below(MAX_OP) + 1 + 4095) & !4095) as usize;
        // An aligned buffer: O_DIRECT may require it.
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: `layout` has a non-zero size; freed below with the same layout.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        // SAFETY: `p` points to `len` bytes allocated above, alive until the dealloc.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
        if self.rng.below(2) == 0 {
            self.log.push(format!("direct write {off}+{len}"));
            let data = self.bytes(off, len as u64);
            buf.copy_from_slice(&data);
            f.write_all_at(buf, off).unwrap();
            if self.model.len() < off as usize + len {
                self.set_len(off + len as u64);
            }
            self.model[off as usize..off as usize + len].copy_from_slice(&data);
        } else {
            self.log.push(format!("direct read {off}+{len}"));
            let mut n = 0;
            while n < len {
                match f.read_at(&mut buf[n..], off + n as u64).unwrap() {
                    0 => break,
                    k => n += k,
                }
            }
            let expect = (self.model.len() as u64)
                .saturating_sub(off)
                .min(len as u64) as usize;
            if n != expect {
                self.fail(&format!(
                    "direct read {off}+{len} gave {n} bytes, not {expect}"
                ));
            }
            if n > 0 {
                self.check_bytes(off, &buf[..n], "direct read");
            }
        }
        // SAFETY: allocated above with this layout; `buf` is not used after.
        unsafe { std::alloc::dealloc(p, layout) };
    }

    fn reopen(&mut self) {
        self.log.push("close and reopen".into());
        self.file = Fsx::open(&self.path);
    }

    fn fsync(&mut self) {
        self.log.push("fsync".into());
        self.file.sync_all().unwrap();
    }

    fn step(&mut self) {
        match self.rng.below(21) {
            20 => self.direct(),
            0..=4 => self.write(),
            5..=8 => self.read(),
            9 | 10 => self.truncate(),
            11 | 12 => self.fallocate(),
            13 | 14 => self.map_read(),
            15 | 16 => self.map_write(),
            17 | 18 => self.copy_range(),
            _ => {
                if self.rng.below(2) == 0 {
                    self.reopen()
                } else {
                    self.fsync()
                }
            }
        }
        self.check_size();
    }

    /// The whole file against the model.
    fn check_all(&self, how: &str) {
        let got = std::fs::read(&self.path).unwrap();
        if got.len() != self.model.len() {
            self.fail(&format!(
                "{how}: {} bytes, the model's {}",
                got.len(),
                self.model.len()
            ));
        }
        self.check_bytes(0, &got, how);
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fsx(m: Mount) {
    let ops = env_u64("SWITCHYARD_FSX_OPS", 3000);
    let seed = env_u64("SWITCHYARD_FSX_SEED", 0x5eed_f5c5) | 1;
    let path = m.path("fsx.file");
    let other = m.path("fsx.other");
    let source: Vec<u8> = (0..MAX_OP as usize * 2)
        .map(|i| (i * 13 % 241) as u8)
        .collect();
    std::fs::write(&other, &source).unwrap();
    let mut t = Fsx {
        file: Fsx::open(&path),
        path,
        model: Vec::new(),
        source: (File::open(&other).unwrap(), source),
        log: Vec::new(),
        rng: Rng(seed),
        seed,
        fill: 0,
    };
    for _ in 0..ops {
        t.step();
    }
    t.check_all("the whole file");
    // Everything closed, then a remount: the file must read back the same from the store.
    let model = std::mem::take(&mut t.model);
    drop(t);
    let m = m.remount();
    let got = std::fs::read(m.path("fsx.file")).unwrap();
    assert_eq!(got.len(), model.len(), "size after a remount");
    assert!(got == model, "content after a remount differs");
    m.fsck();
}

#[test]
fn random_operations_on_one_file_match_a_model_through_the_mount() {
    let d = tempfile::tempdir().unwrap();
    fsx(Mount::new(d.path()));
}

#[test]
fn random_operations_on_one_file_match_a_model_through_a_remote_mount() {
    let d = tempfile::tempdir().unwrap();
    fsx(Mount::remote(d.path()));
}

#[test]
fn random_operations_on_one_file_match_a_model_through_a_writeback_mount() {
    let d = tempfile::tempdir().unwrap();
    fsx(Mount::with_args(d.path(), &["--writeback"]));
}
