//! Writing file data, copy-on-write, in two phases: [`Store::prepare_write`] reserves fresh
//! blocks for the range and says where they are ([`PreparedWrite::targets`]); someone fills
//! them (the store through the mover, [`PreparedWrite::fill`], or another party with direct
//! access to the region); [`Store::commit_write`] completes the pages the write covers only in
//! part and publishes the blocks with one commit point. Until then nothing durable names the
//! blocks: dropping the preparation gives them back, and a crash leaves them free (the
//! allocator is rebuilt from the logs at every mount).
//!
//! Every write path runs these steps — reserve, fill, publish: the synchronous
//! [`Store::write`] through the public two phases (the fill runs without the file's lock, so
//! writers of one file copy in parallel and the commit orders them), appends and the
//! asynchronous API in one hold of the lock (an append's offset is the size when it commits;
//! an asynchronous write's copies may still run when it commits).

use std::sync::Arc;

use switchyard_engine::DurableRecord;
use switchyard_mover::{Direction, Hints};

use super::{now_ns, Order, Store, MAX_FILE_SIZE};
use crate::alloc::Extent;
use crate::error::{Errno, Error, Op};
use crate::format::{is_special, Entry, Seq, BLOCK};
use crate::inflight::{Part, PendingWrite};
use crate::inode::{Content, Inode};

/// A page of zeros: the source for the uncovered part of a partly written page that had no
/// data before.
static ZERO_PAGE: [u8; BLOCK as usize] = [0; BLOCK as usize];

/// Fresh blocks for one write of `len` bytes at file offset `off`, and what filling them left
/// for the commit.
pub(crate) struct Reservation {
    off: u64,
    len: u64,
    /// The blocks, in file order: extent `i` maps the pages that follow extent `i - 1`'s,
    /// from page `off / BLOCK` on.
    extents: Vec<Extent>,
    /// Per extent, the orderless engine copy its log entry names.
    seqs: Vec<Option<Seq>>,
    /// Copies still in flight (asynchronous orders).
    parts: Vec<Part>,
    /// Whether the size grows to the write's end (false only for blocks allocated past it).
    grow: bool,
}

/// Where one piece of a prepared write goes: `len` bytes from `offset` into the write land at
/// `region_offset` in the store's region ([`Store::region`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Offset into the write's bytes.
    pub offset: u64,
    /// Offset into the region, inside blocks reserved for this write alone.
    pub region_offset: u64,
    /// Bytes.
    pub len: u64,
}

/// Where the `len` bytes of a write at `off` go in `extents`: one contiguous piece per extent.
fn targets(off: u64, len: u64, extents: &[Extent]) -> impl Iterator<Item = Target> + '_ {
    let end = off + len;
    let mut pg = off / BLOCK;
    extents.iter().map(move |e| {
        let page_start = pg * BLOCK;
        let lo = off.max(page_start);
        let hi = end.min((pg + e.len) * BLOCK);
        pg += e.len;
        Target {
            offset: lo - off,
            region_offset: e.start * BLOCK + (lo - page_start),
            len: hi - lo,
        }
    })
}

impl Reservation {
    /// Where the write's bytes go: one contiguous piece per extent.
    fn targets(&self) -> impl Iterator<Item = Target> + '_ {
        targets(self.off, self.len, &self.extents)
    }

    /// The block reserved for file page `page` (which the write covers).
    fn block_of(&self, page: u64) -> u64 {
        let mut pg = self.off / BLOCK;
        for e in &self.extents {
            if page < pg + e.len {
                return e.start + (page - pg);
            }
            pg += e.len;
        }
        unreachable!("page {page} lies outside the write")
    }
}

/// A write whose blocks are reserved but not yet published ([`Store::prepare_write`]).
/// Dropping it uncommitted gives the blocks back; the file never shows them.
pub struct PreparedWrite<'s> {
    store: &'s Store,
    ino: u64,
    generation: u64,
    /// `None` once committed.
    res: Option<Reservation>,
    /// Whether [`PreparedWrite::fill`] wrote the blocks (flushed): otherwise the commit
    /// flushes them, as another party stored into them.
    pub(crate) filled: bool,
}

impl PreparedWrite<'_> {
    /// The file.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The file offset the write starts at.
    pub fn offset(&self) -> u64 {
        self.reservation().off
    }

    /// Bytes the write covers.
    pub fn len(&self) -> u64 {
        self.reservation().len
    }

    /// Whether the write covers no bytes (its commit changes nothing).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where each piece of the write's bytes goes, in order, covering `[0, len)` once. Each
    /// lies in blocks reserved for this write alone, which nothing reads before the commit;
    /// the parts of a partly covered page outside the write are filled by the commit.
    pub fn targets(&self) -> Vec<Target> {
        self.reservation().targets().collect()
    }

    /// Copies `data` (exactly [`PreparedWrite::len`] bytes) into the reserved blocks through
    /// the mover, flushed: the local way to fill a preparation.
    pub fn fill(&mut self, data: &[u8]) -> Result<(), Error> {
        let res = self.res.as_mut().expect("an uncommitted preparation");
        if data.len() as u64 != res.len {
            return Err(Error::on(Op::Write, self.ino)(Errno::EINVAL));
        }
        self.store.fill(res, data, Order::Sync);
        self.filled = true;
        Ok(())
    }

    fn reservation(&self) -> &Reservation {
        self.res.as_ref().expect("an uncommitted preparation")
    }
}

impl Drop for PreparedWrite<'_> {
    fn drop(&mut self) {
        if let Some(res) = self.res.take() {
            self.store.abandon(res);
        }
    }
}

impl std::fmt::Debug for PreparedWrite<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedWrite")
            .field("ino", &self.ino)
            .field("offset", &self.res.as_ref().map(|r| r.off))
            .field("len", &self.res.as_ref().map(|r| r.len))
            .finish()
    }
}

impl Store {
    /// Writes `data` at `off` (copy-on-write: new blocks, then one commit). Returns the bytes
    /// written: all of them, or an error with nothing changed; or, where the store has no
    /// room for the whole write's new blocks, as many as fit, as write(2) says (each piece
    /// one commit; an overwrite goes even on a full store, a page at a time on a block
    /// borrowed from the log pages' reserve, since it gives one back).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Error> {
        (|| -> Result<usize, Errno> {
            let mut p = match self.prepare_write(ino, off, data.len() as u64) {
                Ok(p) => p,
                Err(e) if e.errno == Errno::ENOSPC => return self.write_in_pieces(ino, off, data),
                Err(e) => return Err(e.errno),
            };
            p.fill(data)?;
            Ok(self.commit_write(p)?)
        })()
        .map_err(Error::on(Op::Write, ino))
    }

    /// A write the store has no room for in one piece, as POSIX write(2) says: "only as many
    /// bytes as there is room for shall be written". It goes in pieces of the room there is,
    /// each atomic and durable (one commit), and returns the bytes written (`ENOSPC` if none
    /// were). An overwrite takes a block and gives one back with each piece, so on a store
    /// with no room left it still goes, a page at a time on a block borrowed from the log
    /// pages' reserve (at most half of it), as ext4 overwrites a full disk's files in place: a
    /// program that fills the store can still rewrite a file it had written or allocated.
    /// Before, such a write failed whole with ENOSPC.
    fn write_in_pieces(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let mut done = 0usize;
        while done < data.len() {
            let at = off + done as u64;
            let room = self.space.data_room();
            let borrow = room == 0
                && self.space.free_blocks() > self.space.metadata_blocks() / 2
                && self.maps_page(ino, at / BLOCK)?;
            let pages = match (room, borrow) {
                (0, false) => break,
                (0, true) => 1,
                (n, _) => n,
            };
            let end = (at / BLOCK).saturating_add(pages).saturating_mul(BLOCK);
            let n = (end.saturating_sub(at) as usize).min(data.len() - done);
            let mut p = match self.prepare_from(ino, at, n as u64, borrow) {
                Ok(p) => p,
                Err(Errno::ENOSPC) => break, // taken meanwhile
                Err(e) => return Err(e),
            };
            p.fill(&data[done..done + n])?;
            self.commit_prepared(p)?;
            done += n;
        }
        if done == 0 {
            return Err(Errno::ENOSPC);
        }
        Ok(done)
    }

    /// Whether file `ino` maps page `page` (a write there replaces a block).
    fn maps_page(&self, ino: u64, page: u64) -> Result<bool, Errno> {
        let g = self.slot(ino)?.read();
        match &g.as_ref().ok_or(Errno::ENOENT)?.content {
            Content::File(pages) => Ok(pages.contains_key(&page)),
            Content::Dir(_) => Err(Errno::EISDIR),
        }
    }

    /// Appends `data` at the end of the file, atomically with finding the end. Returns the
    /// offset it was written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> Result<u64, Error> {
        (|| -> Result<u64, Errno> {
            self.check_writable()?;
            let mut g = self.lock(ino)?;
            let inode = g.as_mut().ok_or(Errno::ENOENT)?;
            let off = inode.attr.size;
            self.write_locked(inode, off, data, Order::Sync)?;
            Ok(off)
        })()
        .map_err(Error::on(Op::Append, ino))
    }

    /// The first phase of a write of `len` bytes at `off` to file `ino`: reserves fresh
    /// blocks for every page the range touches and returns them, to be filled and then
    /// published with [`Store::commit_write`]. The file does not change until then; errors
    /// are those of a write (`EISDIR`, `EINVAL` for a special file, `EFBIG`, `ENOSPC`, `EROFS`).
    pub fn prepare_write(&self, ino: u64, off: u64, len: u64) -> Result<PreparedWrite<'_>, Error> {
        self.prepare_from(ino, off, len, false)
            .map_err(Error::on(Op::PrepareWrite, ino))
    }

    /// [`Store::prepare_write`], its blocks also from the log pages' reserve with `borrow`.
    fn prepare_from(
        &self,
        ino: u64,
        off: u64,
        len: u64,
        borrow: bool,
    ) -> Result<PreparedWrite<'_>, Errno> {
        self.check_writable()?;
        let g = self.slot(ino)?.read();
        let inode = g.as_ref().ok_or(Errno::ENOENT)?;
        let res = self.reserve_from(inode, off, len, borrow)?;
        Ok(PreparedWrite {
            store: self,
            ino,
            generation: self.slot_generation(ino),
            res: Some(res),
            filled: false,
        })
    }

    /// The second phase: completes the partly covered pages from the file as it is now,
    /// makes the blocks durable (flushing them unless [`PreparedWrite::fill`] wrote them) and
    /// publishes them with one commit point, after which the write is durable and every
    /// reader sees all of it. Returns the bytes written. Fails with `ESTALE` if the file was
    /// deleted and its number given to another since the preparation; on any error the
    /// blocks go back and the file is unchanged.
    pub fn commit_write(&self, p: PreparedWrite<'_>) -> Result<usize, Error> {
        let ino = p.ino;
        self.commit_prepared(p)
            .map_err(Error::on(Op::CommitWrite, ino))
    }

    fn commit_prepared(&self, mut p: PreparedWrite<'_>) -> Result<usize, Errno> {
        if !std::ptr::eq(p.store, self) {
            return Err(Errno::EINVAL);
        }
        self.check_writable()?;
        let mut g = self.lock(p.ino)?;
        if g.is_none() || self.slot_generation(p.ino) != p.generation {
            return Err(Errno::ESTALE);
        }
        let res = p.res.take().expect("an uncommitted preparation");
        if !p.filled {
            for t in res.targets() {
                self.pm.flush(t.region_offset, t.len);
            }
        }
        let n = res.len as usize;
        let inode = g.as_mut().expect("checked above");
        self.publish_write(inode, res)?;
        Ok(n)
    }

    /// Writes `data` at `off` into the locked `inode`: reserve, fill and publish in one hold
    /// of its lock. With [`Order::Orderless`], the engine copies that are still running when
    /// the metadata commits are left in `inode.pending`.
    pub(crate) fn write_locked(
        &self,
        inode: &mut Inode,
        off: u64,
        data: &[u8],
        order: Order,
    ) -> Result<usize, Errno> {
        self.write_sized(inode, off, data, order, true)
    }

    /// [`Store::write_locked`], but the size stays where it is even where `data` ends past
    /// it (`grow` false): blocks allocated past the end (`FALLOC_FL_KEEP_SIZE`), which no read
    /// sees until the size reaches them.
    pub(crate) fn write_sized(
        &self,
        inode: &mut Inode,
        off: u64,
        data: &[u8],
        order: Order,
        grow: bool,
    ) -> Result<usize, Errno> {
        debug_assert!(inode.pending.is_none(), "the caller settled the last write");
        let mut res = self.reserve(inode, off, data.len() as u64)?;
        res.grow = grow;
        self.fill(&mut res, data, order);
        self.publish_write(inode, res)?;
        Ok(data.len())
    }

    /// Checks that `inode` takes a write of `len` bytes at `off` and reserves a fresh block
    /// for every page the range touches.
    fn reserve(&self, inode: &Inode, off: u64, len: u64) -> Result<Reservation, Errno> {
        self.reserve_from(inode, off, len, false)
    }

    /// [`Store::reserve`], from the log pages' reserve too with `borrow` (a write that gives
    /// back as many blocks as it takes).
    fn reserve_from(
        &self,
        inode: &Inode,
        off: u64,
        len: u64,
        borrow: bool,
    ) -> Result<Reservation, Errno> {
        if !matches!(inode.content, Content::File(_)) {
            return Err(Errno::EISDIR);
        }
        if is_special(inode.attr.kind()) {
            // A FIFO's, socket's or device's I/O never reaches the store.
            return Err(Errno::EINVAL);
        }
        let extents = if len == 0 {
            Vec::new()
        } else {
            let end = off
                .checked_add(len)
                .filter(|&e| e <= MAX_FILE_SIZE)
                .ok_or(Errno::EFBIG)?;
            let pages = (end - 1) / BLOCK - off / BLOCK + 1;
            if borrow {
                self.space.take(pages)?
            } else {
                self.space.alloc_data(pages)?
            }
        };
        Ok(Reservation {
            off,
            len,
            seqs: vec![None; extents.len()],
            extents,
            parts: Vec::new(),
            grow: true,
        })
    }

    /// Copies `data` into the reserved blocks on `order`'s path: runs of whole pages through
    /// [`Store::copy_run`], the covered part of a partly written first or last page through
    /// the CPU. Flushed; the commit's first fence makes them durable.
    fn fill(&self, res: &mut Reservation, data: &[u8], order: Order) {
        debug_assert_eq!(data.len() as u64, res.len);
        // The commit's first fence drains these copies with the log entries.
        let hints = Hints {
            defer_fence: true,
            ..Hints::write()
        };
        let Reservation {
            off,
            len,
            extents,
            seqs,
            parts,
            ..
        } = res;
        for (i, t) in targets(*off, *len, extents).enumerate() {
            let src = &data[t.offset as usize..][..t.len as usize];
            let head = ((BLOCK - t.region_offset % BLOCK) % BLOCK).min(t.len) as usize;
            let body = (src.len() - head) / BLOCK as usize * BLOCK as usize;
            let pieces = [
                (0, head, false),
                (head, body, true),
                (head + body, src.len() - head - body, false),
            ];
            for (at, len, whole_pages) in pieces {
                if len == 0 {
                    continue;
                }
                let dst = self.pm.ptr(t.region_offset + at as u64, len as u64);
                let piece = &src[at..at + len];
                if whole_pages {
                    // SAFETY: `dst` lies in blocks reserved for this write, which nothing
                    // durable names yet, `piece.len()` bytes long; `data` outlives the copy
                    // (the asynchronous API keeps the caller's buffer until it settles).
                    let (seq, part) = unsafe { self.copy_run(dst, piece, order, hints) };
                    if seq.is_some() {
                        seqs[i] = seq;
                    }
                    parts.extend(part);
                } else {
                    // SAFETY: as above; the copy is done when this returns.
                    unsafe { self.mover.copy_raw(dst, piece.as_ptr(), len, hints) };
                }
            }
        }
    }

    /// Copies one run of whole pages from `src` to `dst` on `order`'s path: synchronously,
    /// or submitted to the engine, recorded in a durable completion record for an orderless
    /// write. Returns the sequence the run's log entry names (an orderless copy's record) and
    /// the copy still in flight, if any; an unrecorded asynchronous copy is waited for, as its
    /// entry may only commit once it is done.
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of `src.len()` bytes that nothing else reads or writes until
    /// the copy is done, and `src` stays valid until then: settled before the blocks are freed
    /// (level 2) and before the caller's buffer is released.
    unsafe fn copy_run(
        &self,
        dst: *mut u8,
        src: &[u8],
        order: Order,
        hints: Hints,
    ) -> (Option<Seq>, Option<Part>) {
        if order == Order::Sync {
            // SAFETY: forwarded from this function's contract.
            unsafe { self.mover.copy_raw(dst, src.as_ptr(), src.len(), hints) };
            return (None, None);
        }
        let records: &[DurableRecord] = match order {
            Order::Orderless => &self.records,
            _ => &[],
        };
        // SAFETY: forwarded from this function's contract.
        let t = unsafe {
            self.mover
                .submit_recorded(dst, src.as_ptr(), src.len(), hints, records)
        };
        let Some((channel, position)) = t.recorded() else {
            t.wait();
            return (None, None);
        };
        // The injected bug leaves the entry without its copy's name.
        let seq = (!self.leaves_orderless_unrecorded()).then_some(Seq {
            generation: self.geo.mount_count,
            channel: channel as u32,
            position,
        });
        let part = Part {
            recorded: (channel, position),
            copy: t.detach(),
            expected_ns: self.mover.expected_finish(Direction::ToSlow, src.len()),
        };
        (seq, Some(part))
    }

    /// Fills the parts of the write's first and last page that it does not cover: from the
    /// file's page as it is now (under the lock), or zeros where it has none.
    fn complete_edges(&self, inode: &Inode, res: &Reservation) {
        let Content::File(pages) = &inode.content else {
            unreachable!("the caller checked it is a file");
        };
        let hints = Hints {
            defer_fence: true,
            ..Hints::write()
        };
        let end = res.off + res.len;
        let (first, last) = (res.off / BLOCK, (end - 1) / BLOCK);
        let edges = if first == last {
            &[first][..]
        } else {
            &[first, last][..]
        };
        for &page in edges {
            let page_start = page * BLOCK;
            let lo = res.off.max(page_start) - page_start;
            let hi = end.min(page_start + BLOCK) - page_start;
            let old = pages
                .get(&page)
                .filter(|_| page_start < inode.attr.size)
                .map(|&b| b * BLOCK);
            let block = res.block_of(page) * BLOCK;
            for (a, b) in [(0, lo), (hi, BLOCK)] {
                if a == b {
                    continue;
                }
                let src = match old {
                    Some(at) => self.pm.ptr(at + a, b - a).cast_const(),
                    None => ZERO_PAGE[a as usize..].as_ptr(),
                };
                // SAFETY: the destination is the uncovered part of a block reserved for this
                // write (the fill wrote only the covered part); the source is the file's
                // current page, which no one writes while we hold its lock, or zeros.
                unsafe {
                    self.mover
                        .copy_raw(self.pm.ptr(block + a, b - a), src, (b - a) as usize, hints)
                };
            }
        }
    }

    /// Publishes a filled write into the locked `inode`: completes its edge pages, appends
    /// one log entry per extent and commits them (the tail store), retires the blocks they
    /// replace, and leaves copies in flight as the inode's pending write (settled by whoever
    /// locks it next). If the log cannot take the entries, nothing is visible: the copies are
    /// waited for and the blocks given back.
    fn publish_write(&self, inode: &mut Inode, res: Reservation) -> Result<(), Errno> {
        if res.len == 0 {
            return Ok(());
        }
        if !matches!(inode.content, Content::File(_)) {
            self.abandon(res);
            return Err(Errno::EISDIR);
        }
        self.complete_edges(inode, &res);
        let size = if res.grow {
            inode.attr.size.max(res.off + res.len)
        } else {
            inode.attr.size
        };
        let mtime = now_ns();
        let mut pgoff = res.off / BLOCK;
        let entries: Vec<Entry> = res
            .extents
            .iter()
            .zip(&res.seqs)
            .map(|(e, &seq)| {
                let entry = Entry::Write {
                    pgoff,
                    block: e.start,
                    count: e.len,
                    size,
                    mtime,
                    seq,
                };
                pgoff += e.len;
                entry
            })
            .collect();
        let a = match self.append_log(inode, &entries) {
            Ok(a) => a,
            Err(err) => {
                self.abandon(res);
                return Err(err);
            }
        };
        let mut freed = Vec::new();
        self.commit_one(inode, a, &entries, &mut freed);
        self.retire(inode, freed);
        if res.parts.is_empty() {
            self.maybe_compact(inode);
        } else {
            let seqs = res.parts.iter().map(|p| p.recorded).collect();
            inode.pending = Some(Arc::new(PendingWrite::new(res.parts, seqs)));
        }
        Ok(())
    }

    /// Gives back the blocks of a write that will not be published, once its copies are done.
    fn abandon(&self, res: Reservation) {
        for mut p in res.parts {
            self.mover.wait_detached(&mut p.copy);
        }
        for e in res.extents {
            self.space.free(e);
        }
    }
}
