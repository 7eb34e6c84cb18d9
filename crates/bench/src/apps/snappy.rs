//! snappy: decompress pre-built snappy files into new files (EasyIO's Snappy: each worker
//! reads compressed data, decompresses it and writes it to a new file; reads of about 1 MB,
//! writes of 2 MB).

use switchyard_store::{Fs, OpenFlags};

use super::corpus;
use super::harness::{App, Io, Scratch};

/// Bytes of one decompressed file.
pub const BLOCK: usize = 2 << 20;

/// The prepared compressed files and the checksum of each one's decompressed content.
pub struct Snappy {
    inputs: Vec<String>,
    /// Longest compressed file.
    max_in: usize,
    checksums: Vec<u64>,
}

fn output(item: usize) -> String {
    format!("/snappy/out/{item:04}")
}

impl Snappy {
    /// Compresses `data` bytes of log text into files of one block each (untimed).
    pub fn prepare(fs: &Fs, data: u64) -> anyhow::Result<Snappy> {
        fs.mkdir("/snappy", 0o755)?;
        fs.mkdir("/snappy/in", 0o755)?;
        fs.mkdir("/snappy/out", 0o755)?;
        let files = (data as usize / BLOCK).max(1);
        let mut enc = snap::raw::Encoder::new();
        let (mut inputs, mut checksums, mut max_in) = (Vec::new(), Vec::new(), 0);
        for i in 0..files {
            let text = corpus::log_text(1 << 20 | i as u64, BLOCK);
            let packed = enc.compress_vec(&text)?;
            let path = format!("/snappy/in/{i:04}.sz");
            let fd = fs.open(&path, OpenFlags::CREATE, 0o644)?;
            fs.pwrite(fd, &packed, 0)?;
            fs.close(fd)?;
            max_in = max_in.max(packed.len());
            checksums.push(corpus::checksum(&text));
            inputs.push(path);
        }
        Ok(Snappy {
            inputs,
            max_in,
            checksums,
        })
    }
}

impl App for Snappy {
    fn items(&self) -> usize {
        self.inputs.len()
    }

    fn scratch(&self) -> Scratch {
        Scratch::with_bufs(&[self.max_in, BLOCK])
    }

    async fn op(&self, io: &Io, _: usize, item: usize, s: &mut Scratch) -> anyhow::Result<u64> {
        let fd = io.meta(|fs| fs.open(&self.inputs[item], OpenFlags::READ, 0))?;
        let (n, packed) = io.pread(fd, std::mem::take(&mut s.bufs[0]), 0).await?;
        io.meta(|fs| fs.close(fd))?;
        let mut out = std::mem::take(&mut s.bufs[1]);
        let len = snap::raw::Decoder::new().decompress(&packed[..n], &mut out)?;
        s.bufs[0] = packed;
        anyhow::ensure!(
            len == BLOCK,
            "{} decompressed to {len} bytes",
            self.inputs[item]
        );
        let fd = io.meta(|fs| fs.open(&output(item), OpenFlags::CREATE, 0o644))?;
        s.bufs[1] = io.pwrite(fd, out, 0).await?;
        io.meta(|fs| fs.close(fd))?;
        Ok((n + len) as u64)
    }

    fn after_run(&self, fs: &Fs) -> anyhow::Result<()> {
        for (i, &want) in self.checksums.iter().enumerate() {
            let path = output(i);
            let got = corpus::checksum(&fs.read_all(&path)?);
            anyhow::ensure!(got == want, "{path} does not hold the decompressed text");
            fs.unlink(&path)?;
        }
        Ok(())
    }
}
