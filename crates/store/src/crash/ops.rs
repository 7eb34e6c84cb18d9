//! The harness's workload: the operations it crashes, over a small namespace (`/a`, `/b`,
//! `/d/`, `/d/x`, `/e/`), and how each runs on a store.

use std::sync::Arc;

use switchyard_mover::Mover;

use super::Options;
use crate::error::Errno;
use crate::fallocate::Falloc;
use crate::format::{S_IFCHR, S_IFIFO};
use crate::fs::{Fs, OpenFlags};
use crate::store::Store;

/// One file-system operation of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create an empty file.
    Create(&'static str),
    /// Write `len` bytes of `byte` at `off`.
    Write(&'static str, u64, usize, u8),
    /// Append `len` bytes of `byte`.
    Append(&'static str, usize, u8),
    /// Truncate to a size.
    Truncate(&'static str, u64),
    /// Remove a file.
    Unlink(&'static str),
    /// Create a directory.
    Mkdir(&'static str),
    /// Remove a directory.
    Rmdir(&'static str),
    /// Remove a directory that a front end holds (the kernel's working directory of some
    /// process): it stays, without links, until the mount ends; a crash leaves an orphan.
    RmdirHeld(&'static str),
    /// Rename.
    Rename(&'static str, &'static str),
    /// Hard link.
    Link(&'static str, &'static str),
    /// Exchange what two names name (`RENAME_EXCHANGE`).
    Exchange(&'static str, &'static str),
    /// Symlink (target, path).
    Symlink(&'static str, &'static str),
    /// A FIFO, socket or device node (path, type bits, device number).
    Mknod(&'static str, u32, u64),
    /// Change permission bits.
    Chmod(&'static str, u32),
    /// Set extended attribute `name` to `len` bytes of `byte`.
    SetXattr(&'static str, &'static str, usize, u8),
    /// Remove extended attribute `name`.
    RemoveXattr(&'static str, &'static str),
    /// fallocate(2) over `len` bytes at `off`.
    Fallocate(&'static str, u64, u64, Falloc),
    /// Unmount cleanly and mount again (the checkpoint, then the quick mount and lazy loads).
    Remount,
    /// Write `len` bytes of `byte` at `off` through the asynchronous API (orderless).
    WriteAsync(&'static str, u64, usize, u8),
    /// Append `len` bytes of `byte` through the asynchronous API.
    AppendAsync(&'static str, usize, u8),
    /// Write `len` bytes of `byte` at `off` in two phases, filled as a remote client would:
    /// stored into the reserved blocks unflushed (one-sided puts), then committed.
    WritePrepared(&'static str, u64, usize, u8),
    /// Prepare and fill a write of `len` bytes of `byte` at `off`, then drop it uncommitted.
    WriteAbandoned(&'static str, u64, usize, u8),
}

/// Every operation kind over the harness's namespace (`/a`, `/b`, `/d/`, `/d/x`, `/e/`).
pub fn all_ops() -> Vec<Op> {
    vec![
        Op::Create("/b"),
        Op::Write("/a", 100, 5000, 0xA1),
        Op::Write("/a", 4096, 4096, 0xA2),
        Op::Write("/b", 0, 20000, 0xB1),
        Op::Append("/a", 3000, 0xA3),
        Op::Truncate("/a", 1000),
        Op::Truncate("/a", 9000),
        Op::Unlink("/a"),
        Op::Unlink("/d/x"),
        Op::Mkdir("/e"),
        Op::Rmdir("/e"),
        Op::RmdirHeld("/d"),
        Op::Rename("/a", "/b"),
        Op::Rename("/a", "/d/x"),
        Op::Rename("/d", "/e"),
        Op::Link("/a", "/d/y"),
        Op::Exchange("/a", "/d/x"),
        Op::Exchange("/b", "/d"),
        Op::Symlink("/a", "/s"),
        Op::Mknod("/p", S_IFIFO, 0),
        Op::Mknod("/c", S_IFCHR, 0x0103),
        Op::Chmod("/a", 0o600),
        Op::SetXattr("/a", "user.k", 3000, 0xE1),
        Op::SetXattr("/d", "user.k", 10, 0xE2),
        Op::RemoveXattr("/a", "user.k"),
        Op::Fallocate("/a", 2000, 9000, Falloc::PunchHole),
        Op::Fallocate("/b", 0, 20000, Falloc::Allocate { keep_size: false }),
        Op::Fallocate("/a", 4000, 30000, Falloc::Allocate { keep_size: true }),
        Op::WritePrepared("/a", 2000, 7000, 0xA4),
        Op::WriteAbandoned("/a", 0, 9000, 0xA5),
        Op::Remount,
    ]
}

/// The asynchronous operations, with the synchronous ones they interleave with.
pub fn async_ops() -> Vec<Op> {
    vec![
        Op::WriteAsync("/a", 0, 8192, 0xC1),
        Op::WriteAsync("/a", 100, 20000, 0xC2),
        Op::WriteAsync("/b", 4096, 12288, 0xC3),
        Op::AppendAsync("/a", 9000, 0xC4),
        Op::Write("/a", 4096, 4096, 0xA2),
        Op::Truncate("/a", 1000),
        Op::Unlink("/a"),
        Op::Create("/b"),
        Op::Rename("/a", "/b"),
        Op::Remount,
    ]
}

/// Runs `op` on `fs` (a remount hands back a new `Fs`). Failures (ENOENT, EEXIST, ...) are
/// fine: the oracle compares states either way.
pub(super) fn apply(fs: Fs, op: &Op, mover: &Arc<Mover>, opts: &Options) -> Fs {
    if *op == Op::Remount {
        let region = fs.into_store().expect("close descriptors").into_region();
        return Fs::new(Store::mount(region, mover.clone()).expect("mount after a clean unmount"));
    }
    if apply_data(&fs, op, opts).is_none() {
        let _ = apply_namespace(&fs, op);
    }
    fs
}

/// Runs a data operation (a write of any kind); `None` for any other operation.
fn apply_data(fs: &Fs, op: &Op, opts: &Options) -> Option<Result<(), Errno>> {
    let rw = OpenFlags {
        write: true,
        ..OpenFlags::READ
    };
    let append = OpenFlags { append: true, ..rw };
    let with_fd = |p: &str, flags: OpenFlags, f: &dyn Fn(crate::fs::Fd) -> Result<(), Errno>| {
        fs.open(p, flags, 0).and_then(|fd| {
            let r = f(fd);
            fs.close(fd)?;
            r
        })
    };
    Some(match *op {
        Op::Write(p, off, len, byte) => with_fd(p, rw, &|fd| {
            fs.pwrite(fd, &vec![byte; len], off).map(|_| ())
        }),
        Op::Append(p, len, byte) => {
            with_fd(p, append, &|fd| fs.write(fd, &vec![byte; len]).map(|_| ()))
        }
        Op::WriteAsync(p, off, len, byte) => with_fd(p, rw, &|fd| {
            let ex = switchyard_rt::Executor::new();
            ex.block_on(fs.pwrite_async(fd, vec![byte; len], off))
                .0
                .map(|_| ())
        }),
        Op::AppendAsync(p, len, byte) => with_fd(p, rw, &|fd| {
            let ex = switchyard_rt::Executor::new();
            ex.block_on(fs.append_async(fd, vec![byte; len]))
                .0
                .map(|_| ())
        }),
        Op::WritePrepared(p, off, len, byte) => fs.ino(p).and_then(|ino| {
            let store = fs.store();
            let mut w = store.prepare_write(ino, off, len as u64)?;
            // The injected bug: the commit takes the puts for the store's own flushed fill.
            w.filled = opts.inject_unflushed_fill;
            for t in w.targets() {
                // A one-sided put: the bytes land in the reserved blocks, unflushed.
                store
                    .pm
                    .write_unflushed(t.region_offset, &vec![byte; t.len as usize]);
            }
            store.commit_write(w)?;
            Ok(())
        }),
        Op::WriteAbandoned(p, off, len, byte) => fs.ino(p).and_then(|ino| {
            let mut w = fs.store().prepare_write(ino, off, len as u64)?;
            Ok(w.fill(&vec![byte; len])?)
        }),
        _ => return None,
    })
}

/// Runs a namespace or attribute operation.
fn apply_namespace(fs: &Fs, op: &Op) -> Result<(), Errno> {
    match *op {
        Op::Create(p) => fs
            .open(p, OpenFlags::CREATE, 0o644)
            .and_then(|fd| fs.close(fd)),
        Op::Truncate(p, n) => fs.truncate(p, n),
        Op::Unlink(p) => fs.unlink(p),
        Op::Mkdir(p) => fs.mkdir(p, 0o755),
        Op::Rmdir(p) => fs.rmdir(p),
        Op::RmdirHeld(p) => fs
            .ino(p)
            .and_then(|ino| Ok(fs.store().hold(ino)?))
            .and_then(|()| fs.rmdir(p)),
        Op::Rename(a, b) => fs.rename(a, b),
        Op::Link(a, b) => fs.link(a, b),
        Op::Exchange(a, b) => fs.exchange(a, b),
        Op::Symlink(t, p) => fs.symlink(t, p),
        Op::Mknod(p, kind, rdev) => fs.mknod(p, kind | 0o644, rdev),
        Op::Chmod(p, m) => fs.chmod(p, m),
        Op::SetXattr(p, name, len, byte) => fs.ino(p).and_then(|ino| {
            let value = vec![byte; len];
            Ok(fs
                .store()
                .setxattr(ino, name.as_bytes(), &value, crate::XattrMode::Set)?)
        }),
        Op::RemoveXattr(p, name) => fs
            .ino(p)
            .and_then(|ino| Ok(fs.store().removexattr(ino, name.as_bytes())?)),
        Op::Fallocate(p, off, len, mode) => fs
            .ino(p)
            .and_then(|ino| Ok(fs.store().fallocate(ino, off, len, mode)?)),
        _ => unreachable!("{op:?} is a data operation or a remount"),
    }
}

/// The state every workload starts from.
pub(super) fn setup(fs: &Fs) {
    fs.mkdir("/d", 0o755).expect("setup mkdir");
    let fd = fs
        .open("/a", OpenFlags::CREATE, 0o644)
        .expect("setup create");
    fs.write(fd, &[0x5A; 6000]).expect("setup write");
    fs.close(fd).expect("setup close");
    let fd = fs
        .open("/d/x", OpenFlags::CREATE, 0o644)
        .expect("setup create");
    fs.write(fd, b"x").expect("setup write");
    fs.close(fd).expect("setup close");
}
