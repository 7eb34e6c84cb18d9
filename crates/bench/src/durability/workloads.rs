//! The workloads that sync: small files written and fsynced one by one (as fs_mark), and
//! sqlite3 transactions through its command-line tool.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use switchyard_mover::lab::median;

use super::{Sample, MAX_OPS};

/// Bytes each small file holds.
const FILE_BYTES: usize = 16 << 10;

/// Operations' latencies (s) over `elapsed` seconds, and the syncs made meanwhile.
fn sample(lat: &mut [f64], elapsed: f64, syncs: u64) -> Sample {
    let ops = lat.len().max(1) as f64;
    Sample {
        ops_s: lat.len() as f64 / elapsed,
        p50_ms: if lat.is_empty() {
            0.0
        } else {
            median(lat) * 1e3
        },
        syncs_per_op: syncs as f64 / ops,
    }
}

/// Creates files of 16 KiB in `dir`, each written, fsynced and closed, for `secs` seconds;
/// then fsyncs `dir`.
pub(super) fn small_files(
    dir: &Path,
    secs: f64,
    syncs: &dyn Fn() -> u64,
) -> anyhow::Result<Sample> {
    let data = vec![0x5a_u8; FILE_BYTES];
    let mut lat = Vec::new();
    let s0 = syncs();
    let t0 = Instant::now();
    while lat.len() < MAX_OPS && t0.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        let path = dir.join(format!("f{}", lat.len()));
        let io = |op: &str| format!("{op} {}", path.display());
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .with_context(|| io("creating"))?;
        f.write_all(&data).with_context(|| io("writing"))?;
        f.sync_all().with_context(|| io("fsync of"))?;
        close(f).with_context(|| io("closing"))?;
        lat.push(t.elapsed().as_secs_f64());
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync of the directory {}", dir.display()))?;
    let elapsed = t0.elapsed().as_secs_f64();
    Ok(sample(&mut lat, elapsed, syncs() - s0))
}

/// Closes `f`, reporting what `close` says (on a FUSE mount it is the file system's `flush`,
/// which can fail; dropping a `File` ignores that).
fn close(f: File) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    // SAFETY: the descriptor is taken out of `f`, which no longer owns it, and closed once.
    if unsafe { libc::close(f.into_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// One-row transactions into a fresh database in `dir` with `journal_mode=journal` and
/// `synchronous=FULL`, one at a time for `secs` seconds.
pub(super) fn sqlite(
    dir: &Path,
    journal: &str,
    secs: f64,
    syncs: &dyn Fn() -> u64,
) -> anyhow::Result<Sample> {
    let mut db = Sqlite::open(&dir.join("bench.db"))?;
    db.send(&format!(
        "PRAGMA journal_mode={journal};\nPRAGMA synchronous=FULL;\n\
         CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB);\n.print ok\n"
    ))?;
    let mode = db.line()?;
    if mode != journal {
        bail!("sqlite3 would not take journal_mode={journal} (it answered {mode:?})");
    }
    db.expect("ok")?;
    let mut lat = Vec::new();
    let s0 = syncs();
    let t0 = Instant::now();
    while lat.len() < MAX_OPS && t0.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        db.send("BEGIN; INSERT INTO t (v) VALUES (randomblob(100)); COMMIT;\n.print ok\n")?;
        db.expect("ok")?;
        lat.push(t.elapsed().as_secs_f64());
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let synced = syncs() - s0;
    // Every transaction that returned is in the table.
    db.send("SELECT count(*) FROM t;\n")?;
    db.expect(&lat.len().to_string())?;
    db.close()?;
    Ok(sample(&mut lat, elapsed, synced))
}

/// The sqlite3 command-line tool on one database, fed on its standard input; it stops at the
/// first error (`-bail`), and is killed if dropped still running.
struct Sqlite {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    db: PathBuf,
}

impl Sqlite {
    fn open(db: &Path) -> anyhow::Result<Sqlite> {
        let mut child = Command::new("sqlite3")
            .arg("-bail")
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running sqlite3")?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        Ok(Sqlite {
            child,
            stdin,
            stdout,
            db: db.into(),
        })
    }

    fn send(&mut self, sql: &str) -> anyhow::Result<()> {
        let w = self.stdin.as_mut().expect("sqlite3's input is open");
        if w.write_all(sql.as_bytes())
            .and_then(|()| w.flush())
            .is_err()
        {
            return Err(self.failed());
        }
        Ok(())
    }

    /// The next line sqlite3 prints.
    fn line(&mut self) -> anyhow::Result<String> {
        let mut l = String::new();
        match self.stdout.read_line(&mut l) {
            Ok(n) if n > 0 => Ok(l.trim_end().to_string()),
            _ => Err(self.failed()),
        }
    }

    fn expect(&mut self, want: &str) -> anyhow::Result<()> {
        let got = self.line()?;
        if got != want {
            bail!(
                "sqlite3 on {} printed {got:?} where {want:?} was due",
                self.db.display()
            );
        }
        Ok(())
    }

    fn close(mut self) -> anyhow::Result<()> {
        self.send(".quit\n")?;
        self.stdin = None;
        let status = self.child.wait().context("waiting for sqlite3")?;
        if !status.success() {
            return Err(self.failed());
        }
        Ok(())
    }

    /// What went wrong, from sqlite3's error output, once it has stopped.
    fn failed(&mut self) -> anyhow::Error {
        self.stdin = None;
        let _ = self.child.kill();
        let mut said = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut said);
        }
        let status = self.child.wait();
        anyhow!(
            "sqlite3 on {} failed ({}): {}",
            self.db.display(),
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            said.trim()
        )
    }
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// sqlite3's version, or `None` when it cannot be run.
pub(super) fn sqlite_version() -> Option<String> {
    let out = Command::new("sqlite3").arg("--version").output().ok()?;
    let v = String::from_utf8_lossy(&out.stdout);
    out.status
        .success()
        .then(|| v.split_whitespace().next().unwrap_or("").to_string())
}
