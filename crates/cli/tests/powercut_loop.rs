//! Power cuts through the real kernel. A store lives on ext4, on a loop device whose backing
//! file (the "disk") lives on a file system with reflinks (XFS, or btrfs where the kernel has
//! no XFS), itself on a loop device over a file in a temporary directory. An fsync-heavy
//! workload runs through `switchyard mount`: files created, overwritten in place, replaced by
//! rename and removed, each operation made durable (`fsync`, `fdatasync`, or a rename or unlink
//! followed by an `fsync` of its directories) and only then written into a log this process
//! keeps in memory. At random instants the disk is cloned (FICLONE, as `cp --reflink=always`
//! does) and the log's length noted just before: the ioctl is issued from this process on
//! files opened beforehand, so microseconds pass between the two, not the milliseconds of
//! starting `cp`, in which the workload's next fsync would make durable what the last logged
//! operation left undone (a directory fsync that syncs nothing went unnoticed that way). Afterwards every clone is recovered as a disk after a
//! power cut would be: attached and mounted (ext4's journal recovers), `switchyard fsck` must
//! find the store healthy, `switchyard mount` (the store's recovery) must mount it, every
//! operation in the log before the clone must be there (a created or overwritten file with
//! exactly its content, a removed one gone), and after a clean unmount `fsck` must pass again.
//!
//! What a clone holds: every write the loop device completed before it. FICLONE locks the
//! backing file and writes its dirty pages first, so no completed write is missing and none is
//! half in; writes still in flight are in or out whole. A real power cut may also lose
//! completed writes that no flush covered: a clone is the strongest image a cut can leave, not
//! the weakest. What the store has only in ext4's page cache (its mapped file's dirty pages) is
//! not in it. The kernel writes those pages back whenever it likes, in any order; a writeback
//! thread here does the same on purpose (`sync_file_range` of random ranges of the store file,
//! now and then of all of it), so that clones catch the store between its syncs with some of
//! its stores on the disk and others not.
//!
//! A clone is recovered while the original disk is still attached, so its store file never has
//! the original's device number: a store that finds the page cache its last owner wrote
//! through (same boot, same device and inode) takes the crash of its owner for what happened
//! and keeps what never reached the disk, which a reattached clone must not fake.
//!
//! `SWITCHYARD_POWERCUTS` sets the number of instants (default 50), `SWITCHYARD_POWERCUT_SECS`
//! how long the workload runs (default 12 s), `SWITCHYARD_POWERCUT_SEED` the seed (printed);
//! with `SWITCHYARD_POWERCUT_KEEP=DIR` the store file of each failing image is kept there, as
//! the power cut left it (`cutNNN.store`, sparse), for `switchyard fsck` and a mount to see.
//! Needs root, `/dev/fuse`, loop devices and the kernel's XFS or btrfs with its mkfs
//! (`xfsprogs`, in `scripts/install-deps.sh --test`); skipped, saying why, without them.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{bin, mounted, Rng};

/// Directories of the mount the workload spreads its files over.
const DIRS: u64 = 4;
/// The store file's size, and the ext4 disk's and the outer file system's (all sparse).
const STORE_SIZE: &str = "1G";
const DISK_SIZE: u64 = 2 << 30;
const OUTER_SIZE: u64 = 8 << 30;

#[test]
fn fsynced_files_survive_power_cuts_at_random_instants() {
    let started = Instant::now();
    let outer_fs = match unavailable() {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let cuts = knob("SWITCHYARD_POWERCUTS", 50) as usize;
    let secs = knob("SWITCHYARD_POWERCUT_SECS", 12).max(1);
    let seed = knob("SWITCHYARD_POWERCUT_SEED", clock_seed()) | 1;
    println!(
        "seed {seed} (SWITCHYARD_POWERCUT_SEED), {cuts} power cuts in {secs} s of workload, \
         disk on {outer_fs}"
    );

    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let mut undo = Undo::default();
    let (outer, disk, store) = match disks(w, &mut undo, outer_fs) {
        Ok(paths) => paths,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let store_dev = std::fs::metadata(&store).unwrap().dev();

    // The workload, the unsynced writer and the writeback, until the last instant has passed.
    let fuse = Fuse::start(&store, &w.join("mnt"), &w.join("mount.log")).unwrap();
    for d in 0..DIRS {
        std::fs::create_dir(fuse.dir.join(format!("d{d}"))).unwrap();
    }
    std::fs::create_dir(fuse.dir.join("n")).unwrap();
    sync_dir(&fuse.dir);
    let log: Log = Arc::default();
    let stop = StopOnDrop(Arc::default());
    let workload = {
        let (root, log, stop) = (fuse.dir.clone(), log.clone(), stop.0.clone());
        std::thread::spawn(move || workload(&root, &log, &stop, seed))
    };
    let noise = {
        let (dir, stop) = (fuse.dir.join("n"), stop.0.clone());
        std::thread::spawn(move || noise(&dir, &stop, seed ^ 0x3333))
    };
    let writeback = {
        let (store, stop) = (store.clone(), stop.0.clone());
        std::thread::spawn(move || writeback(&store, &stop, seed ^ 0x5555))
    };
    let instants = instants(seed, cuts, secs);
    let t0 = Instant::now();
    let taken = take_cuts(&instants, t0, &disk, &outer, &log, &workload);
    std::thread::sleep((t0 + Duration::from_secs(secs)).saturating_duration_since(Instant::now()));
    stop.0.store(true, Ordering::Relaxed);
    let history = workload
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    let noise = noise
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    writeback.join().unwrap();
    let log = std::mem::take(&mut *log.lock().unwrap());
    println!(
        "workload: {} durable operations in {:.1} s ({} files created), {} operations \
         never synced beside them, {} power cuts taken",
        log.len(),
        t0.elapsed().as_secs_f64(),
        history.versions.len(),
        noise,
        taken.len()
    );
    assert_eq!(taken.len(), cuts, "the workload stopped early");
    // The original store unmounts and checks clean; its disk stays attached (see the top).
    fuse.stop().unwrap();
    let fsck_original = fsck(&store);
    assert!(fsck_original.0, "the original store:\n{}", fsck_original.1);

    let tally = check_all(&taken, &log, &history, w, store_dev, started);
    assert!(
        tally.report.is_empty(),
        "power cuts lost what fsync had made durable, or left a damaged store \
         (seed {seed}):\n{}",
        tally.report.join("\n")
    );
}

/// Takes a power cut at each of `instants` after `t0`: an atomic clone (FICLONE) of the
/// `disk` into `outer`, with how much of the `log` was durable then; stops early if the
/// `workload` ended (it failed).
fn take_cuts(
    instants: &[Duration],
    t0: Instant,
    disk: &Path,
    outer: &Path,
    log: &Log,
    workload: &std::thread::JoinHandle<History>,
) -> Vec<Cut> {
    let mut taken = Vec::new();
    let source = std::fs::File::open(disk).unwrap();
    for (k, at) in instants.iter().enumerate() {
        std::thread::sleep((t0 + *at).saturating_duration_since(Instant::now()));
        if workload.is_finished() {
            break; // it failed: its panic is reported below
        }
        let clone = outer.join(format!("cut{k:03}"));
        let target = std::fs::File::create_new(&clone).unwrap();
        let logged = log.lock().unwrap().len();
        reflink(&source, &target).unwrap_or_else(|e| panic!("FICLONE of the disk: {e}"));
        taken.push(Cut {
            k,
            at: t0.elapsed(),
            logged,
            clone,
        });
    }
    taken
}

/// The outer file system (`outer_fs`, on a loop device over a file in `w`), the ext4 disk on
/// a loop device over a file in it (initialized at once: no lazy inode-table writes in the
/// background), and a store file made on the disk: their paths; or why there are none.
fn disks(w: &Path, undo: &mut Undo, outer_fs: &str) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    // The outer file system: the disk's backing file and its clones.
    let image = w.join("outer.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(OUTER_SIZE)
        .unwrap();
    run(Command::new(format!("mkfs.{outer_fs}"))
        .arg("-q")
        .arg(&image));
    let outer_dev = undo
        .attach(&image)
        .map_err(|e| format!("no loop device could be attached: {e}"))?;
    let outer = w.join("outer");
    undo.mount(&outer_dev, outer_fs, &outer).unwrap();
    // The disk: ext4 on a loop device over a file of the outer file system, initialized
    // at once (no lazy inode-table writes in the background).
    let disk = outer.join("disk");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(DISK_SIZE)
        .unwrap();
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
        .arg(&disk));
    let disk_dev = undo.attach(&disk).unwrap();
    let ext4 = w.join("ext4");
    undo.mount(&disk_dev, "ext4", &ext4).unwrap();
    let store = ext4.join("s.store");
    run(Command::new(bin())
        .args(["mkfs", "--no-profile", "--size", STORE_SIZE, "--store"])
        .arg(&store));
    Ok((outer, disk, store))
}

/// `cuts` instants in `secs` seconds of workload (none in its first 100 ms), in order.
fn instants(seed: u64, cuts: usize, secs: u64) -> Vec<Duration> {
    let mut rng = Rng(seed ^ 0xaaaa);
    let mut instants: Vec<Duration> = (0..cuts)
        .map(|_| Duration::from_millis(100 + rng.below(secs * 1000 - 100)))
        .collect();
    instants.sort();
    instants
}

/// Checks every power cut's image in `taken` against the `log` and `history` of the workload
/// (the store file on device `store_dev`), removing each image; says what it found, and how
/// long the whole test (since `started`) took.
fn check_all(
    taken: &[Cut],
    log: &[Event],
    history: &History,
    w: &Path,
    store_dev: u64,
    started: Instant,
) -> Tally {
    let checking = Instant::now();
    let mut tally = Tally::default();
    for cut in taken {
        check(cut, log, history, w, store_dev, &mut tally);
        std::fs::remove_file(&cut.clone).unwrap();
    }
    println!(
        "checked {} power cuts in {:.1} s: {} logged names checked, {} fsynced operations \
         lost ({} files missing, {} with wrong content, {} removed files back), \
         {} fsck failures on the images, {} after recovery, {} mounts refused; \
         {:.1} s in all",
        taken.len(),
        checking.elapsed().as_secs_f64(),
        tally.checked,
        tally.missing + tally.wrong + tally.back,
        tally.missing,
        tally.wrong,
        tally.back,
        tally.fsck_images,
        tally.fsck_recovered,
        tally.mounts,
        started.elapsed().as_secs_f64()
    );
    tally
}

/// The outer file system to use (one with reflinks the kernel has), or why the test cannot
/// run here.
fn unavailable() -> Result<&'static str, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("loop devices and mounts need root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("no loop devices (/dev/loop-control)".into());
    }
    let known = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    ["xfs", "btrfs"]
        .into_iter()
        .find(|fs| {
            known
                .lines()
                .any(|l| l.split_whitespace().last() == Some(fs))
        })
        .ok_or_else(|| {
            "the kernel has neither XFS nor btrfs (/proc/filesystems): no reflinks to clone \
             a disk atomically"
                .into()
        })
}

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Makes `target` (empty) a copy of `source` sharing its blocks (FICLONE): atomic, as the
/// file system holds both files' locks and writes `source`'s dirty pages first.
fn reflink(source: &std::fs::File, target: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: FICLONE's argument is a descriptor passed by value, so the call reads and
    // writes no memory of ours; both descriptors are open while `source` and `target` live.
    let r = unsafe { libc::ioctl(target.as_raw_fd(), libc::FICLONE, source.as_raw_fd()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs a command that must succeed.
fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (scripts/install-deps.sh --test installs it)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `switchyard fsck` of `store`: whether it found the store healthy, and what it printed.
fn fsck(store: &Path) -> (bool, String) {
    let out = Command::new(bin())
        .args(["fsck", "--store"])
        .arg(store)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Mounts made and loop devices attached by this test, undone newest first when dropped
/// (also when the test fails half-way).
#[derive(Default)]
struct Undo(Vec<Step>);

enum Step {
    Unmount(PathBuf),
    Detach(String),
}

impl Undo {
    /// Attaches `file` to a free loop device; the device's path, or what `losetup` said.
    fn attach(&mut self, file: &Path) -> Result<String, String> {
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        self.0.push(Step::Detach(dev.clone()));
        Ok(dev)
    }

    /// Mounts `dev` (of type `fs`) on `dir`, made if missing.
    fn mount(&mut self, dev: &str, fs: &str, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", fs, dev])
            .arg(dir)
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        self.0.push(Step::Unmount(dir.to_owned()));
        Ok(())
    }
}

impl Drop for Undo {
    fn drop(&mut self) {
        while let Some(step) = self.0.pop() {
            match step {
                Step::Unmount(dir) => unmount(&dir),
                Step::Detach(dev) => {
                    let _ = Command::new("losetup")
                        .args(["-d", &dev])
                        .stderr(Stdio::null())
                        .status();
                }
            }
        }
    }
}

/// Unmounts `dir`, waiting (5 s at most) for what still holds files open there to let go;
/// then detaches it lazily, so nothing stays mounted.
fn unmount(dir: &Path) {
    for _ in 0..50 {
        let ok = Command::new("umount")
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("umount").arg("-l").arg(dir).status();
}

/// A `switchyard mount` process; dropping it kills it and unmounts.
struct Fuse {
    child: Option<Child>,
    dir: PathBuf,
    /// Where its standard error goes.
    errors: PathBuf,
}

impl Fuse {
    /// Mounts `store` on `dir` (made if missing); what went wrong if the mount exits instead
    /// or does not appear in 20 s.
    fn start(store: &Path, dir: &Path, errors: &Path) -> Result<Fuse, String> {
        std::fs::create_dir_all(dir).unwrap();
        let child = Command::new(bin())
            .args(["mount", "--no-profile", "--store"])
            .arg(store)
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(errors).unwrap())
            .spawn()
            .unwrap();
        let mut fuse = Fuse {
            child: Some(child),
            dir: dir.to_owned(),
            errors: errors.to_owned(),
        };
        let t0 = Instant::now();
        while !mounted(dir) {
            if let Some(status) = fuse.child.as_mut().unwrap().try_wait().unwrap() {
                fuse.child = None;
                return Err(format!("mount exited with {status}: {}", fuse.said()));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(format!("mount did not appear in 20 s: {}", fuse.said()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(fuse)
    }

    fn said(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.errors) {
            let _ = f.read_to_string(&mut s);
        }
        s.trim().to_string()
    }

    /// Clean unmount (SIGTERM): what went wrong if the process fails or the mount stays.
    fn stop(mut self) -> Result<(), String> {
        let mut c = self.child.take().unwrap();
        // SAFETY: kill has no memory effects; the pid is our child's, not yet waited for.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let status = c.wait().unwrap();
        if !status.success() {
            return Err(format!("mount exited with {status}: {}", self.said()));
        }
        if mounted(&self.dir) {
            return Err("still mounted after SIGTERM".into());
        }
        Ok(())
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if mounted(&self.dir) {
            for _ in 0..20 {
                let ok = Command::new("fusermount3")
                    .arg("-u")
                    .arg(&self.dir)
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.dir)
                .status();
        }
    }
}

/// Sets its flag when dropped: the threads stop also when the test fails while they run.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A durable operation of the workload.
#[derive(Debug)]
enum Event {
    /// Version `.1` of the file named `.0` (relative to the mount) is on the disk.
    Wrote(String, u32),
    /// The file is removed, and its directory synced.
    Removed(String),
}

/// What the workload made durable, in order: each entry is added after the call that made
/// it durable returned.
type Log = Arc<Mutex<Vec<Event>>>;

/// How a version of a file was written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum How {
    Create,
    /// Over the previous version, in place (same length), then `fdatasync`.
    InPlace,
    /// Into a new file, `fsync`ed, renamed over the name, directories synced.
    Replace,
}

/// Every operation the workload started, durable or not, by the end.
#[derive(Default)]
struct History {
    /// How each version of each file was written, by version.
    versions: HashMap<String, Vec<How>>,
    /// Files whose removal started.
    removing: HashSet<String>,
}

impl History {
    /// Starts the next version of `name`; its number.
    fn start(&mut self, name: &str, how: How) -> u32 {
        let v = self.versions.entry(name.to_string()).or_default();
        v.push(how);
        v.len() as u32 - 1
    }
}

/// The bytes of version `v` of the file `name`: the length follows from the name alone (so
/// an overwrite in place keeps it; one name in eight is up to 256 KiB, the rest up to
/// 24 KiB, few of them block-aligned), the bytes from name and version.
fn content(name: &str, v: u32) -> Vec<u8> {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let len = 1 + (h >> 8) as usize % if h % 8 == 0 { 256 << 10 } else { 24 << 10 };
    let mut rng = Rng((h ^ (u64::from(v) << 40)) | 1);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sync_dir(dir: &Path) {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .unwrap_or_else(|e| panic!("fsync of directory {}: {e}", dir.display()));
}

/// Durable operations on the mount at `root` until `stop`: more than half create a file,
/// the others overwrite one in place, replace one by rename or remove one. Each goes into
/// `log` once it is durable. Panics on any error.
fn workload(root: &Path, log: &Mutex<Vec<Event>>, stop: &AtomicBool, seed: u64) -> History {
    let mut rng = Rng(seed);
    let mut h = History::default();
    let mut live: Vec<String> = Vec::new();
    let ok = |r: std::io::Result<()>, what: &str, name: &str| {
        r.unwrap_or_else(|e| panic!("workload: {what} {name}: {e}"))
    };
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let pick = rng.below(100);
        let event = if live.len() < 16 || pick < 55 {
            let name = format!("d{}/f{i}", i % DIRS);
            h.start(&name, How::Create);
            let r = std::fs::File::create_new(root.join(&name)).and_then(|mut f| {
                f.write_all(&content(&name, 0))?;
                f.sync_all()
            });
            ok(r, "create", &name);
            live.push(name.clone());
            Event::Wrote(name, 0)
        } else if pick < 70 {
            let name = live[rng.below(live.len() as u64) as usize].clone();
            let v = h.start(&name, How::InPlace);
            let r = std::fs::OpenOptions::new()
                .write(true)
                .open(root.join(&name))
                .and_then(|f| {
                    f.write_all_at(&content(&name, v), 0)?;
                    f.sync_data()
                });
            ok(r, "overwrite", &name);
            Event::Wrote(name, v)
        } else if pick < 90 {
            let name = live[rng.below(live.len() as u64) as usize].clone();
            let v = h.start(&name, How::Replace);
            let tmp_dir = format!("d{}", rng.below(DIRS));
            let tmp = format!("{tmp_dir}/t{i}");
            let r = std::fs::File::create_new(root.join(&tmp))
                .and_then(|mut f| {
                    f.write_all(&content(&name, v))?;
                    f.sync_all()
                })
                .and_then(|()| std::fs::rename(root.join(&tmp), root.join(&name)));
            ok(r, "replace (by rename)", &name);
            let dir = root.join(&name).parent().unwrap().to_owned();
            sync_dir(&dir);
            if dir != root.join(&tmp_dir) {
                sync_dir(&root.join(&tmp_dir));
            }
            Event::Wrote(name, v)
        } else {
            let name = live.swap_remove(rng.below(live.len() as u64) as usize);
            h.removing.insert(name.clone());
            ok(std::fs::remove_file(root.join(&name)), "remove", &name);
            sync_dir(root.join(&name).parent().unwrap());
            Event::Removed(name)
        };
        log.lock().unwrap().push(event);
    }
    h
}

/// Changes nobody syncs, in `dir` beside the workload's, until `stop`: files created with
/// up to 256 KiB, renamed and removed, at most 64 of them at once, a few hundred a second.
/// Power cuts then find the store well past its last sync, with some of these changes on the
/// disk and others not; of them nothing is checked but that the store checks clean and
/// mounts. How many changes were made.
fn noise(dir: &Path, stop: &AtomicBool, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut live = std::collections::VecDeque::new();
    let mut j = 0u64;
    let fail = |what: &str, e: std::io::Error| panic!("unsynced writer: {what}: {e}");
    while !stop.load(Ordering::Relaxed) {
        j += 1;
        let name = format!("x{j}");
        std::fs::write(dir.join(&name), content(&name, 0)).unwrap_or_else(|e| fail(&name, e));
        live.push_back(name);
        if rng.below(4) == 0 {
            let from = live.pop_front().unwrap();
            let to = format!("y{j}");
            std::fs::rename(dir.join(&from), dir.join(&to)).unwrap_or_else(|e| fail(&to, e));
            live.push_back(to);
            j += 1;
        }
        if live.len() > 64 {
            let old = live.pop_front().unwrap();
            std::fs::remove_file(dir.join(&old)).unwrap_or_else(|e| fail(&old, e));
            j += 1;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    j
}

/// Until `stop`, starts the writeback of a random range of `store`'s dirty pages every few
/// milliseconds (one time in four all of them), without waiting for it: the kernel's
/// flusher may do as much at any moment.
fn writeback(store: &Path, stop: &AtomicBool, seed: u64) {
    let f = std::fs::File::open(store).unwrap();
    let pages = f.metadata().unwrap().len() / 4096;
    let mut rng = Rng(seed);
    while !stop.load(Ordering::Relaxed) {
        let (off, len) = if rng.below(4) == 0 {
            (0, 0) // to the end of the file
        } else {
            // Low offsets more often: the store fills from its start.
            let span = (pages >> rng.below(6)).max(1);
            let at = rng.below(span) * 4096;
            (at, 65536 << rng.below(9))
        };
        // SAFETY: sync_file_range reads and writes no memory of ours; the descriptor is open
        // for as long as `f` lives.
        unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                off as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        std::thread::sleep(Duration::from_millis(1 + rng.below(8)));
    }
}

/// A clone of the disk.
struct Cut {
    /// Its number, in the order taken.
    k: usize,
    /// When, from the start of the workload.
    at: Duration,
    /// How many log entries were there just before it.
    logged: usize,
    clone: PathBuf,
}

#[derive(Default)]
struct Tally {
    /// Logged names checked, over all cuts.
    checked: usize,
    missing: usize,
    wrong: usize,
    /// Removed files that came back.
    back: usize,
    fsck_images: usize,
    fsck_recovered: usize,
    mounts: usize,
    /// One entry per failing cut, saying what failed.
    report: Vec<String>,
}

/// What the log before a cut says must be on its image, by name: the newest version made
/// durable (`None`: removed), and the log entry that said so.
fn wanted(log: &[Event]) -> BTreeMap<&str, (Option<u32>, usize)> {
    let mut want = BTreeMap::new();
    for (e, event) in log.iter().enumerate() {
        match event {
            Event::Wrote(name, v) => want.insert(name.as_str(), (Some(*v), e)),
            Event::Removed(name) => want.insert(name.as_str(), (None, e)),
        };
    }
    want
}

/// Recovers `cut` (ext4, then the store), and checks the store and every operation logged
/// before it; what fails goes into `tally`.
fn check(cut: &Cut, log: &[Event], h: &History, w: &Path, store_dev: u64, tally: &mut Tally) {
    let what = format!(
        "power cut {} at {:.3} s (after {} durable operations)",
        cut.k,
        cut.at.as_secs_f64(),
        cut.logged
    );
    let mut problems = Vec::new();
    let mut undo = Undo::default();
    let dev = undo.attach(&cut.clone).unwrap();
    let dir = w.join(format!("cut{:03}", cut.k));
    if let Err(e) = undo.mount(&dev, "ext4", &dir) {
        tally
            .report
            .push(format!("{what}: its ext4 did not mount: {e}"));
        return;
    }
    let store = dir.join("s.store");
    assert_ne!(
        std::fs::metadata(&store).unwrap().dev(),
        store_dev,
        "a clone must not pass for the original disk"
    );
    let keep = keep(&store, cut.k);
    let (healthy, said) = fsck(&store);
    if !healthy {
        tally.fsck_images += 1;
        problems.push(format!("fsck of the image failed:\n{}", indent(&said)));
    }
    let mnt = w.join(format!("cut{:03}-mnt", cut.k));
    let fuse = match Fuse::start(&store, &mnt, &w.join("cut-mount.log")) {
        Ok(f) => f,
        Err(e) => {
            tally.mounts += 1;
            problems.push(format!("the store did not mount: {e}"));
            tally
                .report
                .push(format!("{what}:\n{}", problems.join("\n")));
            return;
        }
    };
    let want = wanted(&log[..cut.logged]);
    let lost = check_names(&want, &fuse.dir, h, tally);
    if !lost.is_empty() {
        problems.push(format!(
            "{} of {} logged names wrong:\n{}",
            lost.len(),
            want.len(),
            indent(&lost.join("\n"))
        ));
    }
    if let Err(e) = fuse.stop() {
        problems.push(format!("the recovered store did not unmount cleanly: {e}"));
    } else {
        let (healthy, said) = fsck(&store);
        if !healthy {
            tally.fsck_recovered += 1;
            problems.push(format!(
                "fsck after recovery and a clean unmount failed:\n{}",
                indent(&said)
            ));
        }
    }
    match keep {
        Some(kept) if !problems.is_empty() => {
            problems.push(format!("the image's store is kept in {}", kept.display()))
        }
        Some(kept) => std::fs::remove_file(kept).unwrap(),
        None => {}
    }
    if !problems.is_empty() {
        tally
            .report
            .push(format!("{what}:\n{}", problems.join("\n")));
    }
}

/// Checks every name `want` says is durable against what the recovered store mounted at
/// `dir` holds (`h`: every version of every name); counts into `tally`, and returns what is
/// wrong.
fn check_names(
    want: &BTreeMap<&str, (Option<u32>, usize)>,
    dir: &Path,
    h: &History,
    tally: &mut Tally,
) -> Vec<String> {
    let mut lost = Vec::new();
    for (name, (version, entry)) in want {
        tally.checked += 1;
        let found = std::fs::read(dir.join(name));
        let Some(lo) = *version else {
            if let Ok(got) = found {
                tally.back += 1;
                lost.push(format!(
                    "{name}: removed (log entry {entry}) but there, {} bytes",
                    got.len()
                ));
            }
            continue;
        };
        let hows = &h.versions[*name];
        let hi = hows.len() as u32 - 1;
        match found {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && h.removing.contains(*name) => {}
            Err(e) => {
                tally.missing += 1;
                lost.push(format!(
                    "{name}: version {lo} (log entry {entry}, {:?}) is durable, but reading \
                     it fails: {e}",
                    hows[lo as usize]
                ));
            }
            Ok(got) => {
                if let Err(why) = matches(name, &got, lo, hows) {
                    tally.wrong += 1;
                    lost.push(format!(
                        "{name}: version {lo} (log entry {entry}, {:?}{}) is durable, but {why}",
                        hows[lo as usize],
                        if hi > lo {
                            format!("; versions up to {hi} started later")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
    }
    lost
}

/// A copy of the image's `store` (of cut `k`) where `SWITCHYARD_POWERCUT_KEEP` names a
/// directory for them.
fn keep(store: &Path, k: usize) -> Option<PathBuf> {
    std::env::var_os("SWITCHYARD_POWERCUT_KEEP").map(|d| {
        let kept = Path::new(&d).join(format!("cut{:03}.store", k));
        std::fs::create_dir_all(&d).unwrap();
        run(Command::new("cp")
            .arg("--sparse=always")
            .arg(store)
            .arg(&kept));
        kept
    })
}

/// Whether `got` may be what `name` holds when version `lo` is durable and `hows` (by
/// version) were started: a whole version from `lo` on or, while an overwrite in place was
/// in flight, each 4 KiB page from one of those. Otherwise, how it differs from `lo`.
fn matches(name: &str, got: &[u8], lo: u32, hows: &[How]) -> Result<(), String> {
    let hi = hows.len() as u32 - 1;
    let versions: Vec<Vec<u8>> = (lo..=hi).map(|v| content(name, v)).collect();
    if versions.iter().any(|v| v == got) {
        return Ok(());
    }
    let in_place = hows[lo as usize + 1..].contains(&How::InPlace);
    let want = &versions[0];
    if in_place && got.len() == want.len() {
        let mixed = got
            .chunks(4096)
            .enumerate()
            .all(|(p, page)| versions.iter().any(|v| v.chunks(4096).nth(p) == Some(page)));
        if mixed {
            return Ok(());
        }
    }
    if let Some(old) = (0..lo).rev().find(|v| content(name, *v) == got) {
        return Err(format!("it holds version {old}"));
    }
    if got.len() != want.len() {
        return Err(format!("it holds {} bytes, not {}", got.len(), want.len()));
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
    let zeros = got[at..].iter().take_while(|b| **b == 0).count();
    Err(format!(
        "its bytes differ from byte {at} on{}",
        if zeros >= 64 {
            format!(" ({zeros} zero bytes there)")
        } else {
            String::new()
        }
    ))
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
