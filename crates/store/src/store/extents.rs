//! What a reader outside the store's locks needs to read a file's data in place: where its
//! bytes lie in the region, with the change word that says when that stops being true
//! ([`crate::changes`]), and where the data area is.

use super::data::for_each_run;
use super::Store;
use crate::changes::Changes;
use crate::error::{Errno, Error, Op};
use crate::format::{Attr, BLOCK};

/// Where a file's bytes lie: its attributes, the change word read with them, and the runs of
/// a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extents {
    /// The inode's attributes.
    pub attr: Attr,
    /// Its change word when these were read ([`Store::changes`]).
    pub change: u64,
    /// Runs of the range asked for, in file order, clipped to the file's size; a hole has
    /// no run (it reads as zeros).
    pub runs: Vec<Run>,
}

/// Bytes of a file that lie contiguously in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Offset in the file.
    pub file_offset: u64,
    /// Offset in the region.
    pub region_offset: u64,
    /// Bytes.
    pub len: u64,
}

/// What `lseek`'s `SEEK_DATA` and `SEEK_HOLE` look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// The first byte at or after the offset that lies in a mapped block.
    Data,
    /// The first byte at or after the offset that lies in a hole; the end of the file counts
    /// as one.
    Hole,
}

impl Extents {
    /// Where `lseek(off, SEEK_DATA)` or `lseek(off, SEEK_HOLE)` lands, on runs that cover the
    /// file from `off` (or earlier) to its end: data and holes at the granularity of blocks
    /// (a block that was written or allocated is data, zeros or not, as on ext4); `ENXIO` at
    /// or past the end of the file, and for data when none follows `off`.
    pub fn seek(&self, off: u64, to: Seek) -> Result<u64, Errno> {
        let size = self.attr.size;
        if off >= size {
            return Err(Errno::ENXIO);
        }
        let ahead = self.runs.iter().filter(|r| r.file_offset + r.len > off);
        match to {
            Seek::Data => ahead
                .map(|r| r.file_offset.max(off))
                .next()
                .ok_or(Errno::ENXIO),
            Seek::Hole => {
                let mut at = off;
                for r in ahead {
                    if r.file_offset > at {
                        break;
                    }
                    at = r.file_offset + r.len;
                }
                Ok(at.min(size))
            }
        }
    }
}

impl Store {
    /// Where `lseek(off, SEEK_DATA)` or `lseek(off, SEEK_HOLE)` lands in regular file `ino`
    /// (as [`Extents::seek`] on its map): found in the page map under the file's lock, with
    /// one lookup for data and a walk over the data run at `off` for a hole, not over the
    /// file to its end (`cp --sparse` asks at every run).
    pub fn seek(&self, ino: u64, off: u64, to: Seek) -> Result<u64, Error> {
        (|| -> Result<u64, Errno> {
            let g = self.slot(ino)?.read();
            let (inode, pages) = self.settled_file(&g)?;
            let size = inode.attr.size;
            if off >= size {
                return Err(Errno::ENXIO);
            }
            let first = off / BLOCK;
            match to {
                Seek::Data => match pages.range(first..).next() {
                    Some((&p, _)) if p * BLOCK < size => Ok((p * BLOCK).max(off)),
                    _ => Err(Errno::ENXIO),
                },
                Seek::Hole => {
                    let mut end = first;
                    for (&p, _) in pages.range(first..) {
                        if p != end {
                            break;
                        }
                        end += 1;
                    }
                    Ok((end * BLOCK).clamp(off, size))
                }
            }
        })()
        .map_err(Error::on(Op::Read, ino))
    }

    /// The runs of `[off, off + len)` of regular file `ino`, its attributes and its change
    /// word, all read under its lock. The runs stay the file's bytes as long as the change
    /// word of `ino` is unchanged.
    pub fn extents(&self, ino: u64, off: u64, len: u64) -> Result<Extents, Error> {
        (|| -> Result<Extents, Errno> {
            let g = self.slot(ino)?.read();
            let (inode, pages) = self.settled_file(&g)?;
            let change = self.changes.word(ino);
            let size = inode.attr.size;
            let n = if off >= size {
                0
            } else {
                (size - off).min(len)
            };
            let mut runs = Vec::new();
            for_each_run(pages, off, n as usize, |done, len, at| {
                if let Some(at) = at {
                    runs.push(Run {
                        file_offset: off + done as u64,
                        region_offset: at,
                        len: len as u64,
                    });
                }
            });
            Ok(Extents {
                attr: inode.attr,
                change,
                runs,
            })
        })()
        .map_err(Error::on(Op::Read, ino))
    }

    /// The change words of this mount ([`crate::Changes`]).
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// Begins a grace ([`crate::alloc::Grace`]): until it ends, no block freed from now on is
    /// taken again. A reader outside the store's locks (a server sending blocks of a client's
    /// extent map from its memory) takes one, then checks that the file's change word is
    /// still the one the map came with: if so, the map's blocks hold the file's bytes as of
    /// that check until the grace ends (data is copy-on-write, and the word is bumped before
    /// any block the file gives up is freed).
    pub fn grace(&self) -> crate::alloc::Grace<'_> {
        self.space.grace()
    }

    /// The data area: its offset in the region and its length. Every file byte (and every
    /// block a [`PreparedWrite`](crate::PreparedWrite) reserves) lies inside it; nothing else does.
    pub fn data_area(&self) -> (u64, u64) {
        let start = self.geo.data_block * BLOCK;
        (start, self.pm.len() - start)
    }
}
