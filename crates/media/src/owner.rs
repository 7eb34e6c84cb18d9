//! One owner per region file: an exclusive `flock` taken before the file is grown or mapped.
//!
//! A store's indexes and free lists live in the DRAM of the process that mounted it, so a
//! second process mapping the same file would hand out the same blocks twice and overwrite
//! acknowledged data. Every [`Region`](crate::Region) over a file therefore holds an
//! exclusive lock on it for as long as it is mapped, and a second opener is refused with
//! [`MediaError::Busy`](crate::MediaError::Busy), which names the holder.
//!
//! Why `flock` (and not `fcntl` record locks or a lock file):
//! - it belongs to the open file description, so it dies with its holder: a killed owner
//!   never leaves a stale lock behind, and the next opener runs recovery as usual;
//! - POSIX record locks are dropped when *any* descriptor of the file is closed by the
//!   process, which a library cannot rule out; OFD record locks would do, but report no
//!   holder either;
//! - a lock file can outlive its holder and needs cleaning up.
//!
//! The holder is named from the kernel's own table (`/proc/locks`: pid, device and inode),
//! with the pid's command line and how long it has run from `/proc`, so the name is never
//! stale. Where that table's device numbers are not the ones `stat` gives (overlayfs and
//! other stacked file systems report the lower file system's), the holder is found instead
//! by the descriptors that have the file open and carry the lock (`/proc/PID/fdinfo`).
//!
//! Where it holds: local file systems (ext4, xfs, tmpfs, btrfs), DAX file systems and
//! device-DAX character devices (a `flock` on the device node excludes every other opener on
//! this host). On NFS, `flock` is emulated with byte-range locks that the server arbitrates
//! (Linux ≥ 2.6.12), so two hosts exclude each other while `lockd` works; the holder is then
//! on another host and not in this host's table, and the message says so. Where the file
//! system has no locking at all (`ENOLCK`, e.g. NFS mounted `nolock`), the open is refused:
//! a store whose single owner cannot be guaranteed is not opened. Sharing a region file
//! between hosts is in any case not a supported configuration (each host would map its own
//! page cache); one owner serves the others (`DESIGN.md`, "One owner, many clients").

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::error::MediaError;

/// Takes the exclusive owner lock on `file` (opened from `path`) without waiting. A region
/// that already holds it may take it again (the lock belongs to the open file).
pub(crate) fn lock(file: &File, path: &Path) -> Result<(), MediaError> {
    loop {
        // SAFETY: flock on a descriptor we hold open; it touches no memory of ours.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                return Err(MediaError::Busy {
                    path: path.to_path_buf(),
                    holder: holder(file),
                })
            }
            _ => {
                return Err(MediaError::Io {
                    path: path.to_path_buf(),
                    op: "lock (this file system cannot lock files, so one owner cannot be \
                         guaranteed)",
                    source: e,
                })
            }
        }
    }
}

/// Who holds the lock on `file`, in words: from `/proc/locks` when the holder is on this
/// host and visible in our pid namespace.
fn holder(file: &File) -> String {
    let found = file.metadata().ok().and_then(|m| {
        let locks = std::fs::read_to_string("/proc/locks").ok();
        locks
            .and_then(|l| locks_holder(&l, m.dev(), m.ino()))
            .or_else(|| descriptor_holder(m.dev(), m.ino()))
    });
    let Some(pid) = found else {
        return "another process (not on this host's lock table: on another host over a \
                network file system, or in another pid namespace)"
            .into();
    };
    let mut s = format!("pid {pid}");
    if let Some(cmd) = command_line(pid) {
        s += &format!(" ({cmd})");
    }
    s += &format!(" on host {}", host_name());
    if let Some(ran) = running_for(pid) {
        s += &format!(", running for {ran}");
    }
    s
}

/// The pid of the `FLOCK` holder of the file `(dev, ino)` in a `/proc/locks` listing.
/// Lines look like `1: FLOCK  ADVISORY  WRITE 2185 fe:00:9977866 0 EOF`; waiters are marked
/// `->` and skipped.
fn locks_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|line| {
        let mut f = line.split_whitespace().skip(1);
        let kind = f.next()?;
        if kind == "->" || kind != "FLOCK" {
            return None;
        }
        let pid: u32 = f.nth(2)?.parse().ok()?;
        let mut id = f.next()?.split(':');
        let ma = u32::from_str_radix(id.next()?, 16).ok()?;
        let mi = u32::from_str_radix(id.next()?, 16).ok()?;
        let i: u64 = id.next()?.parse().ok()?;
        (ma == major && mi == minor && i == ino && pid != 0).then_some(pid)
    })
}

/// The pid of a process with a descriptor open on the file `(dev, ino)` (as `stat` sees it)
/// that holds a `FLOCK` on it: its `/proc/PID/fdinfo/FD` lists the lock. Slower than the
/// lock table (it visits every descriptor on the host), but right on stacked file systems.
fn descriptor_holder(dev: u64, ino: u64) -> Option<u32> {
    let me = proc_self();
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // Our own descriptors first: the holder is most often this very process.
    pids.sort_by_key(|&p| Some(p) != me);
    pids.into_iter().find(|&pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.filter_map(Result::ok).any(|fd| {
            let same = std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino);
            same && std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .is_ok_and(|info| fdinfo_holds_flock(&info))
        })
    })
}

/// Whether a `/proc/PID/fdinfo/FD` text shows a granted `FLOCK` (a `lock:` line that is not
/// a waiter's `->` line).
fn fdinfo_holds_flock(info: &str) -> bool {
    info.lines().any(|line| {
        let Some(rest) = line.strip_prefix("lock:") else {
            return false;
        };
        let mut f = rest.split_whitespace().skip(1);
        f.next() == Some("FLOCK")
    })
}

/// This process's pid as `/proc` numbers it, which is the numbering `/proc/locks` uses too
/// (it differs from `getpid` where `/proc` was mounted by an ancestor pid namespace).
fn proc_self() -> Option<u32> {
    std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()
}

fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    let mut words = words.into_iter();
    let program = words.next()?;
    let program = Path::new(&program)
        .file_name()
        .map_or(program.clone(), |n| n.to_string_lossy().into_owned());
    let mut s = std::iter::once(program)
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() > 120 {
        let cut = (0..=117)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(cut);
        s += "...";
    }
    Some(s)
}

fn host_name() -> String {
    // SAFETY: utsname is plain data and uname fills it; on failure it stays zeroed.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "?".into();
    }
    let bytes: Vec<u8> = u
        .nodename
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// How long `pid` has run, as `3 h 12 min` or `45 s`: its start in clock ticks after boot
/// (`/proc/PID/stat`, field 22) against the time since boot (`/proc/uptime`).
fn running_for(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let after = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let secs = (uptime - ticks as f64 / hz as f64).max(0.0) as u64;
    Some(duration(secs))
}

/// Seconds in words: `2 d 3 h`, `3 h 12 min`, `4 min 5 s`, `45 s`.
fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_words() {
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(245), "4 min 5 s");
        assert_eq!(duration(3 * 3600 + 12 * 60 + 7), "3 h 12 min");
        assert_eq!(duration(2 * 86_400 + 3 * 3600), "2 d 3 h");
    }

    #[test]
    fn finds_the_holder_in_the_lock_table() {
        let table = "1: POSIX  ADVISORY  WRITE 77 fe:00:12 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 2185 fe:00:9977866 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 3000 fe:00:9977866 0 EOF\n";
        let dev = libc::makedev(0xfe, 0);
        assert_eq!(locks_holder(table, dev, 9_977_866), Some(2185));
        assert_eq!(
            locks_holder(table, dev, 12),
            None,
            "record locks are not ours"
        );
        assert_eq!(locks_holder(table, libc::makedev(8, 1), 9_977_866), None);
    }

    #[test]
    fn finds_the_holder_by_its_descriptors() {
        assert!(fdinfo_holds_flock(
            "pos:\t0\nflags:\t02100001\nlock:\t1: FLOCK  ADVISORY  WRITE 2961 fe:00:9977959 0 EOF\n"
        ));
        assert!(!fdinfo_holds_flock(
            "pos:\t0\nlock:\t1: -> FLOCK  ADVISORY  WRITE 3000 fe:00:9 0 EOF\n"
        ));
        assert!(!fdinfo_holds_flock(
            "pos:\t0\nlock:\t1: POSIX  ADVISORY  WRITE 7 fe:00:9 0 EOF\n"
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let a = File::create(&path).unwrap();
        lock(&a, &path).unwrap();
        if !kernel_shows_our_lock(&a) {
            return; // a /proc without lock lines (some sandboxes): nothing to find by
        }
        let m = a.metadata().unwrap();
        assert_eq!(
            descriptor_holder(m.dev(), m.ino()),
            proc_self(),
            "found without the lock table's device numbers"
        );
    }

    /// Whether this host's `/proc` lists the locks a descriptor holds (the fdinfo of
    /// our own descriptor has the lock line); sandboxes with an emulated `/proc` may not.
    fn kernel_shows_our_lock(f: &File) -> bool {
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd()))
            .is_ok_and(|info| fdinfo_holds_flock(&info))
    }

    #[test]
    fn a_second_open_file_is_refused_and_names_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        lock(&a, &path).unwrap();
        lock(&a, &path).expect("the holder may lock again");
        let e = lock(&b, &path).unwrap_err().to_string();
        if kernel_shows_our_lock(&a) {
            let me = proc_self().expect("/proc/self names this process");
            assert!(e.contains(&format!("pid {me}")), "names the holder: {e}");
        } else {
            assert!(e.contains("another process"), "says it cannot tell: {e}");
        }
        drop(a);
        lock(&b, &path).expect("the lock dies with its holder's open file");
    }
}
