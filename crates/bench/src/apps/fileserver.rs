//! fileserver: Filebench's fileserver flow on one file per operation — create, write the whole
//! file (1 MiB), append 16 KiB, read the whole file back, stat, delete (EasyIO's Fileserver:
//! 1 MB reads, about 1 MB writes, one read per two writes).

use switchyard_store::{Fs, OpenFlags};

use super::harness::{App, Io, Scratch};

/// Bytes of the whole-file write.
pub const FILE_LEN: usize = 1 << 20;
/// Bytes of the append.
pub const APPEND: usize = 16 << 10;

/// The file-set directory and how many files one run goes through.
pub struct Fileserver {
    files: usize,
}

fn path(item: usize) -> String {
    format!("/fileserver/{item:05}")
}

impl Fileserver {
    /// One file per MiB of `data` (the files exist only during their operation).
    pub fn prepare(fs: &Fs, data: u64) -> anyhow::Result<Fileserver> {
        fs.mkdir("/fileserver", 0o755)?;
        Ok(Fileserver {
            files: (data as usize / FILE_LEN).max(1),
        })
    }
}

impl App for Fileserver {
    fn items(&self) -> usize {
        self.files
    }

    fn scratch(&self) -> Scratch {
        Scratch::with_bufs(&[FILE_LEN, APPEND, FILE_LEN + APPEND + 4096])
    }

    async fn op(&self, io: &Io, _: usize, item: usize, s: &mut Scratch) -> anyhow::Result<u64> {
        let path = path(item);
        let tag = (item as u64).to_le_bytes();
        let fd = io.meta(|fs| fs.open(&path, OpenFlags::CREATE, 0o644))?;
        let mut whole = std::mem::take(&mut s.bufs[0]);
        whole[..8].copy_from_slice(&tag);
        s.bufs[0] = io.pwrite(fd, whole, 0).await?;
        let mut tail = std::mem::take(&mut s.bufs[1]);
        tail[..8].copy_from_slice(&tag);
        s.bufs[1] = io.append(fd, tail).await?;
        let (n, back) = io.pread(fd, std::mem::take(&mut s.bufs[2]), 0).await?;
        let size = io.meta(|fs| fs.fstat(fd))?.size;
        io.meta(|fs| fs.close(fd))?;
        io.meta(|fs| fs.unlink(&path))?;
        // Spot checks: a file server does not compare what it serves.
        let ok = n == FILE_LEN + APPEND
            && size == n as u64
            && back[..8] == tag
            && back[FILE_LEN..FILE_LEN + 8] == tag
            && back[FILE_LEN / 2..][..8] == s.bufs[0][FILE_LEN / 2..][..8];
        s.bufs[2] = back;
        anyhow::ensure!(ok, "{path} read back other than what was written");
        Ok((2 * (FILE_LEN + APPEND)) as u64)
    }
}
