//! FxMark's DWAL (each worker appends blocks to its private file) and DRBL (each worker reads
//! blocks of its private file), for the throughput-latency curves.

use std::sync::RwLock;

use switchyard_store::{Fd, Fs, OpenFlags};

use super::harness::{App, Io, Scratch};

/// Which FxMark workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Workload {
    /// Appends to a private file.
    Dwal,
    /// Reads of a private file (cycling through its blocks).
    Drbl,
}

impl Workload {
    /// FxMark's name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Dwal => "DWAL",
            Workload::Drbl => "DRBL",
        }
    }
}

/// Bytes of each DRBL private file.
const DRBL_FILE: u64 = 4 << 20;

/// One workload at one block size.
pub struct FxMark {
    workload: Workload,
    block: usize,
    ops: usize,
    /// The open private file of each worker of the current run.
    fds: RwLock<Vec<Fd>>,
}

fn path(workload: Workload, worker: usize) -> String {
    format!("/fxmark/{}.{worker}", workload.name())
}

impl FxMark {
    /// `total` bytes per run in `block`-byte operations; DRBL's private files for up to
    /// `max_workers` workers are written now (untimed).
    pub fn prepare(
        fs: &Fs,
        workload: Workload,
        block: usize,
        total: u64,
        max_workers: usize,
    ) -> anyhow::Result<FxMark> {
        if fs.stat("/fxmark").is_err() {
            fs.mkdir("/fxmark", 0o755)?;
        }
        if workload == Workload::Drbl {
            let data = vec![0xd5u8; DRBL_FILE as usize];
            for w in 0..max_workers {
                let fd = fs.open(&path(workload, w), OpenFlags::CREATE, 0o644)?;
                fs.pwrite(fd, &data, 0)?;
                fs.close(fd)?;
            }
        }
        Ok(FxMark {
            workload,
            block,
            ops: (total / block as u64).max(1) as usize,
            fds: RwLock::new(Vec::new()),
        })
    }
}

impl App for FxMark {
    fn items(&self) -> usize {
        self.ops
    }

    fn scratch(&self) -> Scratch {
        Scratch::with_bufs(&[self.block])
    }

    fn before_run(&self, fs: &Fs, workers: usize) -> anyhow::Result<()> {
        let flags = match self.workload {
            Workload::Dwal => OpenFlags::CREATE,
            Workload::Drbl => OpenFlags::READ,
        };
        let fds = (0..workers)
            .map(|w| fs.open(&path(self.workload, w), flags, 0o644))
            .collect::<Result<_, _>>()?;
        *self.fds.write().unwrap_or_else(|e| e.into_inner()) = fds;
        Ok(())
    }

    fn after_run(&self, fs: &Fs) -> anyhow::Result<()> {
        let fds = std::mem::take(&mut *self.fds.write().unwrap_or_else(|e| e.into_inner()));
        let mut appended = 0;
        for (w, fd) in fds.into_iter().enumerate() {
            if self.workload == Workload::Dwal {
                appended += fs.fstat(fd)?.size;
                fs.close(fd)?;
                fs.unlink(&path(self.workload, w))?;
            } else {
                fs.close(fd)?;
            }
        }
        if self.workload == Workload::Dwal {
            let want = (self.ops * self.block) as u64;
            anyhow::ensure!(
                appended == want,
                "DWAL appended {appended} bytes, not {want}"
            );
        }
        Ok(())
    }

    async fn op(&self, io: &Io, worker: usize, _: usize, s: &mut Scratch) -> anyhow::Result<u64> {
        let fd = self.fds.read().unwrap_or_else(|e| e.into_inner())[worker];
        let buf = std::mem::take(&mut s.bufs[0]);
        s.bufs[0] = match self.workload {
            Workload::Dwal => io.append(fd, buf).await?,
            Workload::Drbl => {
                let block = self.block as u64;
                let off = s.done % (DRBL_FILE / block) * block;
                let (n, buf) = io.pread(fd, buf, off).await?;
                anyhow::ensure!(n == self.block, "DRBL read {n} bytes at {off}");
                buf
            }
        };
        Ok(self.block as u64)
    }
}
