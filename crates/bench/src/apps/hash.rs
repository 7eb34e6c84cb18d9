//! hash: SHA-256 of each file, as `sha256sum` does, reading in 2 MiB chunks.

use sha2::{Digest, Sha256};
use switchyard_store::{Fs, OpenFlags};

use super::corpus;
use super::harness::{App, Io, Scratch};

/// Bytes per read.
pub const CHUNK: usize = 2 << 20;
/// Bytes per file.
pub const FILE_LEN: usize = 8 << 20;

/// The prepared files and each one's digest.
pub struct Hash {
    paths: Vec<String>,
    digests: Vec<[u8; 32]>,
}

impl Hash {
    /// Writes `data` bytes of log files (untimed) and hashes them in memory.
    pub fn prepare(fs: &Fs, data: u64) -> anyhow::Result<Hash> {
        let mut digests = Vec::new();
        let paths = corpus::write_logs(fs, "/hash", 2 << 20, data, FILE_LEN, |text| {
            digests.push(Sha256::digest(text).into())
        })?;
        Ok(Hash { paths, digests })
    }
}

impl App for Hash {
    fn items(&self) -> usize {
        self.paths.len()
    }

    fn scratch(&self) -> Scratch {
        Scratch::with_bufs(&[CHUNK])
    }

    async fn op(&self, io: &Io, _: usize, item: usize, s: &mut Scratch) -> anyhow::Result<u64> {
        let fd = io.meta(|fs| fs.open(&self.paths[item], OpenFlags::READ, 0))?;
        let mut buf = std::mem::take(&mut s.bufs[0]);
        let mut h = Sha256::new();
        let mut off = 0u64;
        loop {
            let (n, b) = io.pread(fd, buf, off).await?;
            buf = b;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            off += n as u64;
        }
        s.bufs[0] = buf;
        io.meta(|fs| fs.close(fd))?;
        let got: [u8; 32] = h.finalize().into();
        anyhow::ensure!(
            got == self.digests[item],
            "SHA-256 of {} differs from the written file's",
            self.paths[item]
        );
        Ok(off)
    }
}
