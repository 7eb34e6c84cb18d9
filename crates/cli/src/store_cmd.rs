//! The store commands: `mkfs`, `fsck`, `ls`, `cp`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use switchyard_config::Config;
use switchyard_media::{Granularity, Region, MIN_REGION};
use switchyard_mover::Mover;
use switchyard_options::counters::Durability;
use switchyard_store::{fsck, Files, Fs, OpenFlags, Owner, Store, StoreConfig, SyncPolicy};

use crate::serve_cmd::Remote;

use switchyard_options::{size, MoverArgs};

/// Where the store lives: all that the commands that only read or check it take.
#[derive(Args, Clone)]
pub struct StorePath {
    /// Store file. The embedded default lives in the working directory.
    #[arg(long, default_value = "switchyard.store")]
    pub store: PathBuf,
    /// Open the store file even though other users may read or write it (refused by
    /// default: they could read every file stored in it, whatever its mode). Say so only for
    /// a file shared on purpose; the command warns each time.
    #[arg(long)]
    pub allow_exposed_store: bool,
}

impl StorePath {
    /// Maps the existing store file with `persist`'s primitives.
    fn region(&self, persist: switchyard_media::Persist) -> anyhow::Result<Region> {
        if self.allow_exposed_store {
            switchyard_options::allow_exposed();
        }
        if !self.store.exists() {
            bail!(
                "no store at {}; create one with `switchyard mkfs --store {}`",
                self.store.display(),
                self.store.display()
            );
        }
        Ok(Region::open(&self.store, MIN_REGION, persist)?)
    }

    /// Opens the store with `cfg`'s mover and sync policy (`[store]`): recovery runs if it
    /// was not unmounted cleanly.
    pub fn open_with(&self, cfg: &Config) -> anyhow::Result<Store> {
        let store = Store::mount(
            self.region(cfg.mover.persist())?,
            Arc::new(Mover::start(&cfg.mover)?),
        )?;
        store
            .set_sync_policy(sync_policy(&cfg.store))
            .context("store.sync")?;
        Ok(store)
    }

    /// Mounts the store in this process with the default mover (for commands that move
    /// little data: listing, repair).
    pub fn mount(&self) -> anyhow::Result<Fs> {
        Ok(Fs::new(self.open_with(&Config::default())?))
    }

    /// Where the counters of the last run on this store are kept (`switchyard stat`).
    pub fn stats_path(&self) -> PathBuf {
        switchyard_options::counters::path(&self.store)
    }
}

/// When a store on a disk file writes what returned to its disk: `store.sync` and
/// `store.sync_interval_ms`.
pub fn sync_policy(c: &StoreConfig) -> SyncPolicy {
    c.sync_every()
        .map_or(SyncPolicy::Always, SyncPolicy::Interval)
}

/// What survives a power cut on a store on a medium of granularity `g` synced by `policy`.
pub fn durability_of(g: Granularity, policy: SyncPolicy) -> Durability {
    Durability {
        granularity: g.name().into(),
        guarantee: g.guarantee().into(),
        sync: match g {
            Granularity::Page => policy.to_string(),
            Granularity::CacheLine => {
                "none needed (flush + fence make every operation durable)".into()
            }
            Granularity::Volatile => "none (a memory file system has no disk to sync to)".into(),
        },
    }
}

/// What survives a power cut on the mounted `store`, under its sync policy now.
pub fn durability(store: &Store) -> Durability {
    durability_of(store.granularity(), store.sync_policy())
}

/// `d` in two lines, for a banner and `stat`: the medium's granularity and its guarantee,
/// then the sync policy.
pub fn show_durability(d: &Durability) -> String {
    format!(
        "medium: {} granularity: {}\nsync policy: {}",
        d.granularity, d.guarantee, d.sync
    )
}

/// A store and the mover that moves its data.
#[derive(Args, Clone)]
pub struct StoreArgs {
    #[command(flatten)]
    pub path: StorePath,
    #[command(flatten)]
    pub mover: MoverArgs,
}

impl std::ops::Deref for StoreArgs {
    type Target = StorePath;

    fn deref(&self) -> &StorePath {
        &self.path
    }
}

impl StoreArgs {
    /// Mounts the store (in this process).
    pub fn mount(&self) -> anyhow::Result<Fs> {
        Ok(Fs::new(self.open()?))
    }

    /// Opens the store: recovery runs if it was not unmounted cleanly.
    pub fn open(&self) -> anyhow::Result<Store> {
        self.path.open_with(&self.mover.load_config()?)
    }
}

/// `mkfs` options.
#[derive(Args)]
pub struct MkfsArgs {
    #[command(flatten)]
    pub at: StoreArgs,
    /// Size of the store file (K/M/G suffixes; the file is sparse until written).
    #[arg(long, default_value = "1G", value_parser = size::parse)]
    pub size: u64,
    /// Format even if the file already holds a store (everything in it is lost).
    #[arg(long)]
    pub force: bool,
}

/// Formats a store.
pub fn mkfs(a: &MkfsArgs) -> anyhow::Result<()> {
    if a.at.store.exists() && !a.force && holds_store(&a.at.store)? {
        bail!(
            "{} already holds a store; pass --force to format it anyway (its contents are lost)",
            a.at.store.display()
        );
    }
    let cfg = a.at.mover.load_config()?;
    if a.at.allow_exposed_store {
        switchyard_options::allow_exposed();
    }
    let region = Region::create(&a.at.store, a.size, cfg.mover.persist())?;
    let store = Store::format(
        region,
        Arc::new(Mover::start(&cfg.mover)?),
        Owner::current(),
    )?;
    let s = store.statfs();
    println!(
        "formatted {}: {} of data space ({} blocks of {}), {} inodes",
        a.at.store.display(),
        size::show(s.blocks * s.block_size),
        s.blocks,
        size::show(s.block_size),
        s.inodes
    );
    store.unmount()?;
    Ok(())
}

/// Whether `path` starts like a store: the superblock's magic in its primary or its replica
/// (damaged or not, it may hold data worth keeping). Reads the first two blocks only.
fn holds_store(path: &Path) -> anyhow::Result<bool> {
    use switchyard_store::format::{BLOCK, SB_MAGIC};
    let mut head = Vec::with_capacity(2 * BLOCK as usize);
    std::fs::File::open(path)
        .and_then(|f| f.take(2 * BLOCK).read_to_end(&mut head))
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(head
        .chunks(BLOCK as usize)
        .any(|b| b.starts_with(&SB_MAGIC)))
}

/// `fsck` options.
#[derive(Args)]
pub struct FsckArgs {
    #[command(flatten)]
    at: StorePath,
    /// Also perform the repairs a mount's recovery makes (undo an interrupted operation, free
    /// unlinked inodes). Refused when the store has real damage: that needs a person.
    #[arg(long)]
    repair: bool,
}

/// Checks every invariant; exits non-zero on damage.
pub fn fsck(a: &FsckArgs) -> anyhow::Result<()> {
    let region = a.at.region(switchyard_media::Persist::detect())?;
    let t0 = std::time::Instant::now();
    let release = || region.release_resident();
    let present = switchyard_store::Present::ranges(region.data_extents()).releasing(&release);
    let r = {
        // SAFETY: the region is mapped for its whole length while `region` lives, and nothing
        // writes it meanwhile: this process holds its owner lock and only reads it here.
        let image = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) };
        fsck::check_present_as(image, &present, Some(region.cache_identity()))
    };
    drop(region);
    println!(
        "{}: {} inodes, {} of {} data blocks used, last unmount {}",
        a.at.store.display(),
        r.inodes,
        r.used_blocks,
        r.data_blocks,
        if r.clean {
            "clean"
        } else {
            "not clean (crash or still mounted)"
        }
    );
    for x in &r.recoverable {
        println!("recoverable: {x}");
    }
    for p in &r.problems {
        println!("PROBLEM: {p}");
    }
    println!(
        "checked in {:.2} s, read {} of the store's {}",
        t0.elapsed().as_secs_f64(),
        size::show(r.read_bytes),
        size::show(r.data_blocks * switchyard_store::BLOCK)
    );
    if !r.healthy() {
        bail!(
            "{} problem(s) found; the store will not mount",
            r.problems.len()
        );
    }
    if a.repair && !r.recoverable.is_empty() {
        a.at.mount()?.unmount()?;
        println!("repaired: recovery ran and the store was unmounted cleanly");
    }
    println!("ok");
    Ok(())
}

/// `ls` options.
#[derive(Args)]
pub struct LsArgs {
    #[command(flatten)]
    at: StorePath,
    /// Directory (or file) inside the store, or `ADDR:PORT:/path` in a store another process
    /// serves (`switchyard serve`).
    #[arg(default_value = "/")]
    path: String,
    /// The served store's key, for an `ADDR:PORT:/path` operand [default: the store file's
    /// path with `.key` added, as `serve` makes it].
    #[arg(long)]
    key: Option<PathBuf>,
}

impl LsArgs {
    fn key(&self) -> PathBuf {
        self.key
            .clone()
            .unwrap_or_else(|| crate::serve_cmd::default_key(&self.at.store))
    }
}

/// Lists a directory: type and permissions, links, size, name.
pub fn ls(a: &LsArgs) -> anyhow::Result<()> {
    match Remote::parse(&a.path) {
        Some(r) => list(&r.connect(&a.key(), false)?, &r.path),
        None => {
            let fs = a.at.mount()?;
            list(&fs, &a.path)?;
            fs.unmount()?;
            Ok(())
        }
    }
}

fn list(fs: &dyn Files, path: &str) -> anyhow::Result<()> {
    use switchyard_store::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFSOCK};
    let attr = fs.stat(path).with_context(|| path.to_string())?;
    let entries = if attr.kind() == S_IFDIR {
        fs.readdir(path).with_context(|| path.to_string())?
    } else {
        vec![switchyard_store::DirEntry {
            name: path.as_bytes().to_vec(),
            ino: 0,
            kind: attr.kind(),
        }]
    };
    let dir = path.trim_end_matches('/');
    for e in entries {
        let name = String::from_utf8_lossy(&e.name).to_string();
        let full = if attr.kind() == S_IFDIR {
            format!("{dir}/{name}")
        } else {
            name.clone()
        };
        let at = fs.lstat(&full)?;
        let t = match at.kind() {
            S_IFDIR => 'd',
            S_IFLNK => 'l',
            S_IFIFO => 'p',
            S_IFSOCK => 's',
            S_IFCHR => 'c',
            S_IFBLK => 'b',
            _ => '-',
        };
        let target = if t == 'l' {
            format!(" -> {}", String::from_utf8_lossy(&fs.readlink(&full)?))
        } else {
            String::new()
        };
        println!(
            "{t}{:04o} {:>3} {:>12} {name}{target}",
            at.mode & 0o7777,
            at.nlink,
            at.size
        );
    }
    Ok(())
}

/// `cp` options.
#[derive(Args)]
pub struct CpArgs {
    #[command(flatten)]
    at: StoreArgs,
    /// Source: a host file, `store:/path` for a file in the store, or `ADDR:PORT:/path` for
    /// a file in a store another process serves.
    from: String,
    /// Destination: a host file, `store:/path` in the store, or `ADDR:PORT:/path` in a
    /// served store (created or truncated).
    to: String,
    /// The served store's key, for `ADDR:PORT:/path` operands [default: the store file's
    /// path with `.key` added, as `serve` makes it].
    #[arg(long)]
    key: Option<PathBuf>,
}

/// Reads the next chunk of a `cp` source; 0 at the end.
type Reader<'a> = Box<dyn FnMut(&mut [u8]) -> anyhow::Result<usize> + 'a>;
/// Writes a chunk to a `cp` destination.
type Writer<'a> = Box<dyn FnMut(&[u8]) -> anyhow::Result<()> + 'a>;

/// Where a `cp` operand is.
enum Place<'a> {
    /// In a store: this process's (`store:`) or a served one; the path in it.
    Store(&'a dyn Files, &'a str),
    /// A host file.
    Host(&'a str),
}

/// The stores a `cp` reaches: this process's if an operand names it, and a client per
/// served store named.
struct Reached {
    local: Option<Fs>,
    remote: Vec<(switchyard_remote::Client, String)>,
}

impl Reached {
    fn new(a: &CpArgs) -> anyhow::Result<Reached> {
        let key = a
            .key
            .clone()
            .unwrap_or_else(|| crate::serve_cmd::default_key(&a.at.store));
        let local = if a.from.starts_with("store:") || a.to.starts_with("store:") {
            Some(a.at.mount()?)
        } else {
            None
        };
        let mut remote = Vec::new();
        for (op, write) in [(&a.from, false), (&a.to, true)] {
            if let Some(r) = Remote::parse(op) {
                remote.push((r.connect(&key, write)?, r.path));
            }
        }
        Ok(Reached { local, remote })
    }

    fn place<'a>(&'a self, op: &'a str, nth_remote: &mut usize) -> Place<'a> {
        if let (Some(p), Some(fs)) = (op.strip_prefix("store:"), &self.local) {
            return Place::Store(fs, p);
        }
        if Remote::parse(op).is_some() {
            let (c, p) = &self.remote[*nth_remote];
            *nth_remote += 1;
            return Place::Store(c, p);
        }
        Place::Host(op)
    }
}

fn reader<'a>(from: &Place<'a>, label: &str) -> anyhow::Result<(u64, Reader<'a>)> {
    Ok(match *from {
        Place::Store(fs, p) => {
            let fd = fs
                .open(p, OpenFlags::READ, 0)
                .with_context(|| label.to_string())?;
            let len = fs.fstat(fd)?.size;
            (len, Box::new(move |b: &mut [u8]| Ok(fs.read(fd, b)?)))
        }
        Place::Host(p) => {
            let mut f = std::fs::File::open(p).with_context(|| label.to_string())?;
            let len = f.metadata()?.len();
            // A pipe or a FIFO gives at most its buffer (64 KiB) per read: fill the whole
            // buffer, so the store sees the same large writes as from a regular file.
            let fill = move |b: &mut [u8]| {
                let mut n = 0;
                while n < b.len() {
                    match f.read(&mut b[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(n)
            };
            (len, Box::new(fill))
        }
    })
}

fn writer<'a>(to: &Place<'a>, label: &str) -> anyhow::Result<Writer<'a>> {
    Ok(match *to {
        Place::Store(fs, p) => {
            let flags = OpenFlags {
                read: false,
                ..OpenFlags::CREATE
            };
            let fd = fs
                .open(p, flags, 0o644)
                .with_context(|| label.to_string())?;
            Box::new(move |b: &[u8]| {
                fs.write(fd, b)?;
                Ok(())
            })
        }
        Place::Host(p) => {
            let mut f = std::fs::File::create(Path::new(p)).with_context(|| label.to_string())?;
            Box::new(move |b: &[u8]| Ok(f.write_all(b)?))
        }
    })
}

/// Copies a file between the host, the store and served stores, with a progress bar for
/// large files.
pub fn cp(a: &CpArgs) -> anyhow::Result<()> {
    let reached = Reached::new(a)?;
    let mut nth = 0;
    let (from, to) = (
        reached.place(&a.from, &mut nth),
        reached.place(&a.to, &mut nth),
    );
    let mut buf = vec![0u8; 1 << 20];
    let (len, mut reader) = reader(&from, &a.from)?;
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "cp [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    if len < 64 << 20 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut writer = writer(&to, &a.to)?;
    let mut total = 0u64;
    loop {
        let n = reader(&mut buf)?;
        if n == 0 {
            break;
        }
        writer(&buf[..n])?;
        total += n as u64;
        bar.set_position(total);
    }
    bar.finish_and_clear();
    drop(writer);
    drop(reader);
    if let Some(fs) = reached.local {
        switchyard_options::counters::save_with(
            &a.at.stats_path(),
            "cp",
            fs.store().mover(),
            Some(&durability(fs.store())),
        )?;
        fs.unmount()?;
    }
    println!("copied {} from {} to {}", size::show(total), a.from, a.to);
    for (client, path) in &reached.remote {
        let s = client.stats();
        println!(
            "{path} on the server: data {}; {} requests, {} one-sided, {} in messages, cache \
             {} hits / {} misses",
            client.data_path(),
            s.requests,
            size::show(s.one_sided_bytes),
            size::show(s.message_bytes),
            s.cache_hits,
            s.cache_misses
        );
    }
    Ok(())
}

/// One line of store usage for `stat`, or why there is none; and the granularity of the
/// store's medium, when it could be opened.
pub fn usage(at: &StorePath) -> (String, Option<Granularity>) {
    match at.mount() {
        Ok(fs) => {
            let g = fs.store().granularity();
            let s = fs.statfs();
            let line = format!(
                "store {}: {} used of {} ({} free), {} of {} inodes used",
                at.store.display(),
                size::show((s.blocks - s.free_blocks) * s.block_size),
                size::show(s.blocks * s.block_size),
                size::show(s.free_blocks * s.block_size),
                s.inodes - s.free_inodes,
                s.inodes
            );
            let _ = fs.unmount();
            (line, Some(g))
        }
        Err(e) => (format!("store {}: {e:#}", at.store.display()), None),
    }
}
