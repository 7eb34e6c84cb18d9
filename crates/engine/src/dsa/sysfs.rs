//! Discovery of DSA work queues that user space may submit to, from Linux's `idxd` sysfs tree
//! (`/sys/bus/dsa/devices/`): a queue `wqD.Q` of device `dsaD` is usable when its `state` is
//! `enabled` and its `type` is `user`; its character device is `/dev/dsa/wqD.Q`.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where the kernel publishes DSA devices and work queues.
pub const SYSFS_ROOT: &str = "/sys/bus/dsa/devices";
/// Where the work queues' character devices live.
pub const DEV_ROOT: &str = "/dev/dsa";

/// How a work queue takes descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One submitter; `MOVDIR64B` to its portal, which gives no feedback when the queue is
    /// full, so the submitter counts its own credits.
    Dedicated,
    /// Many submitters; `ENQCMD`, which reports when the queue is full.
    Shared,
}

/// An enabled user work queue and what its device can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkQueue {
    /// Its name, `wqD.Q`.
    pub name: String,
    /// Its device, `dsaD`.
    pub device: String,
    /// Dedicated or shared.
    pub mode: Mode,
    /// Entries (descriptors it holds at once).
    pub size: u32,
    /// Priority within its group (1–15).
    pub priority: u32,
    /// Largest transfer size of one descriptor, bytes.
    pub max_transfer_size: u64,
    /// Most descriptors in one batch.
    pub max_batch_size: u32,
    /// Whether the queue blocks on page faults (the engine never asks it to).
    pub block_on_fault: bool,
    /// The device's operation capabilities: bit `n` set when opcode `n` is supported.
    pub op_cap: [u64; 4],
    /// Its character device (`/dev/dsa/wqD.Q`).
    pub dev_path: PathBuf,
}

impl WorkQueue {
    /// Whether the device supports `opcode`.
    pub fn supports(&self, opcode: u8) -> bool {
        self.op_cap[usize::from(opcode / 64)] >> (opcode % 64) & 1 == 1
    }
}

/// Why no usable work queue was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// What was looked at and not found or not usable.
    pub reason: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no DSA work queue for user space: {}\n\
             With a DSA device bound to the idxd driver, set one up with accel-config, e.g.\n  \
             accel-config config-engine dsa0/engine0.0 --group-id=0\n  \
             accel-config config-wq dsa0/wq0.0 --group-id=0 --mode=dedicated --wq-size=16 \
             --priority=10 --type=user --name=switchyard --block-on-fault=0 \
             --max-batch-size=32 --max-transfer-size=2097152\n  \
             accel-config enable-device dsa0\n  \
             accel-config enable-wq dsa0/wq0.0\n\
             and give the user read-write access to /dev/dsa/wq0.0",
            self.reason
        )
    }
}

impl std::error::Error for Missing {}

/// The enabled user work queues under `root` (normally [`SYSFS_ROOT`]), sorted by name, with
/// character devices under `dev_root` (normally [`DEV_ROOT`]); or why there are none.
pub fn discover(root: &Path, dev_root: &Path) -> Result<Vec<WorkQueue>, Missing> {
    let entries = std::fs::read_dir(root).map_err(|e| Missing {
        reason: format!(
            "{} cannot be read ({e}): is the idxd driver loaded?",
            root.display()
        ),
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("wq"))
        .collect();
    names.sort();
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for name in names {
        match read_queue(root, dev_root, &name) {
            Ok(q) => found.push(q),
            Err(why) => skipped.push(format!("{name}: {why}")),
        }
    }
    if found.is_empty() {
        let reason = if skipped.is_empty() {
            format!("{} lists no work queue", root.display())
        } else {
            skipped.join("; ")
        };
        return Err(Missing { reason });
    }
    Ok(found)
}

fn read_queue(root: &Path, dev_root: &Path, name: &str) -> Result<WorkQueue, String> {
    let dir = root.join(name);
    let attr = |a: &str| -> Result<String, String> {
        std::fs::read_to_string(dir.join(a))
            .map(|s| s.trim().to_string())
            .map_err(|e| format!("{a} unreadable ({e})"))
    };
    let num = |a: &str| -> Result<u64, String> {
        let s = attr(a)?;
        s.parse().map_err(|_| format!("{a} is {s:?}, not a number"))
    };
    let state = attr("state")?;
    if state != "enabled" {
        return Err(format!("state is {state}"));
    }
    let kind = attr("type")?;
    if kind != "user" {
        return Err(format!("type is {kind}, not user"));
    }
    let mode = match attr("mode")?.as_str() {
        "dedicated" => Mode::Dedicated,
        "shared" => Mode::Shared,
        m => return Err(format!("mode {m} is unknown")),
    };
    let device = format!(
        "dsa{}",
        name.trim_start_matches("wq")
            .split('.')
            .next()
            .unwrap_or("")
    );
    let op_cap = std::fs::read_to_string(root.join(&device).join("op_cap"))
        .map_err(|e| format!("{device}/op_cap unreadable ({e})"))
        .and_then(|s| parse_op_cap(s.trim()))?;
    Ok(WorkQueue {
        name: name.to_string(),
        device,
        mode,
        size: u32::try_from(num("size")?).map_err(|_| "size out of range")?,
        priority: u32::try_from(num("priority")?).map_err(|_| "priority out of range")?,
        max_transfer_size: num("max_transfer_size")?,
        max_batch_size: u32::try_from(num("max_batch_size")?)
            .map_err(|_| "max_batch_size out of range")?,
        block_on_fault: attr("block_on_fault").is_ok_and(|s| s == "1"),
        op_cap,
        dev_path: dev_root.join(name),
    })
}

/// Parses `op_cap`: the kernel's bitmap format (32-bit hex words, most significant first,
/// separated by commas) or an older single `0x…` hex number.
fn parse_op_cap(s: &str) -> Result<[u64; 4], String> {
    let bad = || format!("op_cap {s:?} is not a bitmap");
    let mut cap = [0u64; 4];
    if let Some(hex) = s.strip_prefix("0x") {
        cap[0] = u64::from_str_radix(hex, 16).map_err(|_| bad())?;
        return Ok(cap);
    }
    for (i, word) in s.rsplit(',').enumerate() {
        let w = u64::from(u32::from_str_radix(word, 16).map_err(|_| bad())?);
        if i < 8 {
            cap[i / 2] |= w << (32 * (i % 2));
        }
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, value: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{value}\n")).unwrap();
    }

    fn fake_tree(root: &Path) {
        write(
            root,
            "dsa0/op_cap",
            "00000000,00000000,00000000,00000000,00000000,00000000,00000001,0000007b",
        );
        for (wq, state, kind, mode) in [
            ("wq0.0", "enabled", "user", "dedicated"),
            ("wq0.1", "enabled", "user", "shared"),
            ("wq0.2", "disabled", "user", "shared"),
            ("wq0.3", "enabled", "kernel", "dedicated"),
        ] {
            write(root, &format!("{wq}/state"), state);
            write(root, &format!("{wq}/type"), kind);
            write(root, &format!("{wq}/mode"), mode);
            write(root, &format!("{wq}/size"), "16");
            write(root, &format!("{wq}/priority"), "10");
            write(root, &format!("{wq}/max_transfer_size"), "2097152");
            write(root, &format!("{wq}/max_batch_size"), "32");
            write(root, &format!("{wq}/block_on_fault"), "0");
        }
    }

    #[test]
    fn finds_the_enabled_user_queues_with_their_limits_and_capabilities() {
        let dir = std::env::temp_dir().join(format!("sy-dsa-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        fake_tree(&dir);
        let qs = discover(&dir, Path::new("/dev/dsa")).unwrap();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0].name, "wq0.0");
        assert_eq!(qs[0].device, "dsa0");
        assert_eq!(qs[0].mode, Mode::Dedicated);
        assert_eq!(qs[1].mode, Mode::Shared);
        assert_eq!((qs[0].size, qs[0].priority), (16, 10));
        assert_eq!(
            (qs[0].max_transfer_size, qs[0].max_batch_size),
            (2 << 20, 32)
        );
        assert_eq!(qs[0].dev_path, Path::new("/dev/dsa/wq0.0"));
        assert!(qs[0].supports(0x03) && qs[0].supports(0x01) && qs[0].supports(0x20));
        assert!(!qs[0].supports(0x02) && !qs[0].supports(0x10));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn says_what_is_missing_and_how_to_set_a_queue_up() {
        let dir = std::env::temp_dir().join(format!("sy-dsa-none-{}", std::process::id()));
        let err = discover(&dir, Path::new("/dev/dsa")).unwrap_err();
        assert!(err.reason.contains("idxd driver"), "{err}");
        let text = err.to_string();
        assert!(text.contains("accel-config enable-wq dsa0/wq0.0"), "{text}");
        write(&dir, "wq0.0/state", "disabled");
        let err = discover(&dir, Path::new("/dev/dsa")).unwrap_err();
        assert!(err.reason.contains("wq0.0: state is disabled"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_the_older_single_number_op_cap() {
        assert_eq!(parse_op_cap("0x7b").unwrap()[0], 0x7b);
        assert!(parse_op_cap("zz").is_err());
    }
}
