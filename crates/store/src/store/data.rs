//! File data: reads, copy-on-write writes and appends through the mover, and attribute
//! changes that touch data (truncate).

use super::*;

/// Splits the `n` bytes of a file at `off` into runs, each either mapped to contiguous blocks
/// (one mover request; `f` gets the region offset) or a hole (`None`); `f` also gets the run's
/// offset into the read and its length.
pub(crate) fn for_each_run(
    pages: &BTreeMap<u64, u64>,
    off: u64,
    n: usize,
    mut f: impl FnMut(usize, usize, Option<u64>),
) {
    let mut done = 0usize;
    while done < n {
        let pos = off + done as u64;
        let pg = pos / BLOCK;
        let in_page = pos % BLOCK;
        let mut len = ((BLOCK - in_page) as usize).min(n - done);
        let at = pages.get(&pg).map(|&b| {
            // Extend over pages whose blocks are contiguous.
            let mut next = pg + 1;
            while done + len < n && pages.get(&next) == Some(&(b + (next - pg))) {
                len = (len + BLOCK as usize).min(n - done);
                next += 1;
            }
            b * BLOCK + in_page
        });
        f(done, len, at);
        done += len;
    }
}

impl Store {
    /// Data blocks (of [`BLOCK`] bytes) that inode `ino` maps: what `stat` counts as its
    /// allocated space (holes take none; a symlink's target counts; a directory's and every
    /// inode's log pages do not).
    pub fn data_blocks(&self, ino: u64) -> Result<u64, Errno> {
        let g = self.slot(ino)?.read();
        match &g.as_ref().ok_or(Errno::ENOENT)?.content {
            Content::File(pages) => Ok(pages.len() as u64),
            Content::Dir(_) => Ok(0),
        }
    }

    /// Reads up to `buf.len()` bytes at `off`; returns how many (0 at or past the end).
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let g = self.slot(ino)?.read();
        let inode = g.as_ref().ok_or(Errno::ENOENT)?;
        if let Some(p) = &inode.pending {
            self.wait_settled(p);
        }
        let Content::File(pages) = &inode.content else {
            return Err(Errno::EISDIR);
        };
        let size = inode.attr.size;
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (size - off).min(buf.len() as u64) as usize;
        for_each_run(pages, off, n, |done, len, at| match at {
            Some(at) => {
                let src = self.pm.ptr(at, len as u64);
                // SAFETY: (1) `src` lies in blocks this inode maps, which no one writes while we
                // hold its read lock (writes go to fresh blocks under the write lock); (2)
                // `buf[done..done + len]` is in bounds and exclusively ours.
                unsafe {
                    self.mover
                        .copy_raw(buf.as_mut_ptr().add(done), src, len, Hints::read())
                };
            }
            None => buf[done..done + len].fill(0),
        });
        Ok(n)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let attr = self.getattr(ino)?;
        if attr.kind() != S_IFLNK {
            return Err(Errno::EINVAL);
        }
        let mut buf = vec![0u8; attr.size as usize];
        let n = self.read(ino, 0, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    // ---- writing one file ---------------------------------------------------------------

    /// Writes `data` at `off` (copy-on-write: new blocks, then one commit). Returns the bytes
    /// written (all of them, or an error with nothing changed).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        self.check_writable()?;
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        self.write_locked(inode, off, data, Order::Sync)
    }

    /// Appends `data` at the end of the file, atomically with finding the end. Returns the
    /// offset it was written at.
    pub fn append(&self, ino: u64, data: &[u8]) -> Result<u64, Errno> {
        self.check_writable()?;
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        let off = inode.attr.size;
        self.write_locked(inode, off, data, Order::Sync)?;
        Ok(off)
    }

    /// Writes `data` at `off` into the locked `inode`. With [`Order::Orderless`], the engine
    /// copies that are still running when the metadata commits are left in `inode.pending`.
    pub(crate) fn write_locked(
        &self,
        inode: &mut Inode,
        off: u64,
        data: &[u8],
        order: Order,
    ) -> Result<usize, Errno> {
        debug_assert!(inode.pending.is_none(), "the caller settled the last write");
        if !matches!(inode.content, Content::File(_)) {
            return Err(Errno::EISDIR);
        }
        if is_special(inode.attr.kind()) {
            // A FIFO's, socket's or device's I/O never reaches the store.
            return Err(Errno::EINVAL);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let extents = self.alloc_data((end - 1) / BLOCK - off / BLOCK + 1)?;
        let (entries, parts) = self.fill_blocks(inode, off, data, order, &extents);
        self.publish_write(inode, extents, &entries, parts)?;
        Ok(data.len())
    }

    /// Fills `extents`, new blocks for the file's pages from `off / BLOCK` on, with `data` at
    /// `off`: whole pages straight from `data` ([`Store::copy_run`]), edge pages assembled
    /// from the old page (or zeros) and the new bytes. Returns the log entries that map the
    /// blocks and the copies still in flight (asynchronous orders).
    fn fill_blocks(
        &self,
        inode: &Inode,
        off: u64,
        data: &[u8],
        order: Order,
        extents: &[Extent],
    ) -> (Vec<Entry>, Vec<Part>) {
        let Content::File(pages) = &inode.content else {
            unreachable!("the caller checked it is a file");
        };
        let end = off + data.len() as u64;
        let old_size = inode.attr.size;
        // The commit's first fence drains these copies with the log entries.
        let hints = Hints {
            defer_fence: true,
            ..Hints::write()
        };
        let mut pg = off / BLOCK;
        let mut entries = Vec::with_capacity(extents.len() + 1);
        let mut parts = Vec::new();
        let mtime = now_ns();
        for e in extents {
            let mut k = 0;
            let mut seq = None;
            while k < e.len {
                let p = pg + k;
                let block = e.start + k;
                let page_start = p * BLOCK;
                let lo = off.max(page_start);
                let hi = end.min(page_start + BLOCK);
                if lo == page_start && hi == page_start + BLOCK {
                    // A run of whole pages.
                    let mut run = 1;
                    while k + run < e.len && end >= (p + run + 1) * BLOCK {
                        run += 1;
                    }
                    let src = &data[(page_start - off) as usize..][..(run * BLOCK) as usize];
                    let dst = self.pm.ptr(block * BLOCK, run * BLOCK);
                    // SAFETY: `dst` is a run of blocks just allocated to this write, referenced
                    // by nothing durable yet, `src.len()` bytes long; `src` outlives the copy
                    // (the asynchronous API keeps the caller's buffer until it settles).
                    let (s, part) = unsafe { self.copy_run(dst, src, order, hints) };
                    if s.is_some() {
                        seq = s;
                    }
                    parts.extend(part);
                    k += run;
                    continue;
                }
                let mut page = [0u8; BLOCK as usize];
                if let Some(&ob) = pages.get(&p) {
                    if page_start < old_size {
                        page.copy_from_slice(self.pm.bytes(ob * BLOCK, BLOCK));
                    }
                }
                page[(lo - page_start) as usize..(hi - page_start) as usize]
                    .copy_from_slice(&data[(lo - off) as usize..(hi - off) as usize]);
                let dst = self.pm.ptr(block * BLOCK, BLOCK);
                // SAFETY: `dst` is a block just allocated to this write, referenced by nothing
                // durable yet; `page` is a local buffer.
                unsafe { self.mover.copy_raw(dst, page.as_ptr(), page.len(), hints) };
                k += 1;
            }
            entries.push(Entry::Write {
                pgoff: pg,
                block: e.start,
                count: e.len,
                size: old_size.max(end),
                mtime,
                seq,
            });
            pg += e.len;
        }
        (entries, parts)
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
        let seq = (!self.faults.unrecorded_orderless.load(Ordering::Relaxed)).then_some(Seq {
            generation: self.geo.mount_count,
            channel: channel as u32,
            position,
        });
        let part = Part {
            recorded: (channel, position),
            copy: t.detach(),
            expected_ns: switchyard_rt::expected_finish(&self.mover, Direction::ToSlow, src.len()),
        };
        (seq, Some(part))
    }

    /// Publishes a filled write: appends `entries` to the log and commits them (the tail
    /// store), retires the blocks they replace, and leaves copies in flight as the inode's
    /// pending write (settled by whoever locks it next). If the log cannot take the entries,
    /// nothing is visible: the copies are waited for and `extents` given back.
    fn publish_write(
        &self,
        inode: &mut Inode,
        extents: Vec<Extent>,
        entries: &[Entry],
        parts: Vec<Part>,
    ) -> Result<(), Errno> {
        let a = match self.append_log(inode, entries) {
            Ok(a) => a,
            Err(err) => {
                for mut p in parts {
                    self.mover.wait_detached(&mut p.copy);
                }
                for e in extents {
                    self.alloc.free(e);
                }
                return Err(err);
            }
        };
        let mut freed = Vec::new();
        self.commit_one(inode, a, entries, &mut freed);
        self.retire(inode, freed);
        if parts.is_empty() {
            self.maybe_compact(inode);
        } else {
            let seqs = parts.iter().map(|p| p.recorded).collect();
            inode.pending = Some(Arc::new(PendingWrite::new(parts, seqs)));
        }
        Ok(())
    }

    /// Changes attributes; a size change truncates (freeing whole pages past the end and
    /// zeroing the rest of the last page, copy-on-write) or extends with a hole.
    pub fn setattr(&self, ino: u64, s: SetAttr) -> Result<Attr, Errno> {
        self.check_writable()?;
        let mut g = self.lock(ino)?;
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        let mut attr = inode.attr;
        let t = now_ns();
        let mut entries = Vec::new();
        let mut extent = None;
        if let Some(size) = s.size {
            let Content::File(pages) = &inode.content else {
                return Err(Errno::EISDIR);
            };
            if is_special(attr.kind()) {
                return Err(Errno::EINVAL);
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            if size < attr.size && size % BLOCK != 0 {
                if let Some(&ob) = pages.get(&(size / BLOCK)) {
                    let e = self.alloc.alloc(1)?[0];
                    let mut page = [0u8; BLOCK as usize];
                    let keep = (size % BLOCK) as usize;
                    page[..keep].copy_from_slice(&self.pm.bytes(ob * BLOCK, BLOCK)[..keep]);
                    self.pm.write(e.start * BLOCK, &page);
                    entries.push(Entry::Write {
                        pgoff: size / BLOCK,
                        block: e.start,
                        count: 1,
                        size,
                        mtime: t,
                        seq: None,
                    });
                    extent = Some(e);
                }
            }
            attr.size = size;
            attr.mtime = t;
        }
        if let Some(m) = s.mode {
            attr.mode = (attr.mode & S_IFMT) | (m & 0o7777);
        }
        attr.uid = s.uid.unwrap_or(attr.uid);
        attr.gid = s.gid.unwrap_or(attr.gid);
        attr.atime = s.atime.unwrap_or(attr.atime);
        attr.mtime = s.mtime.unwrap_or(attr.mtime);
        attr.ctime = t;
        entries.push(Entry::Attr(attr));
        let a = match self.append_log(inode, &entries) {
            Ok(a) => a,
            Err(e) => {
                if let Some(x) = extent {
                    self.alloc.free(x);
                }
                return Err(e);
            }
        };
        let mut freed = Vec::new();
        self.commit_one(inode, a, &entries, &mut freed);
        self.retire(inode, freed);
        self.maybe_compact(inode);
        Ok(inode.attr)
    }

    /// Checks that `ino` exists and waits for its asynchronous write, if one is still copying:
    /// every synchronous operation is already durable when it returns.
    pub fn fsync(&self, ino: u64) -> Result<(), Errno> {
        let g = self.lock(ino)?;
        g.as_ref().map(|_| ()).ok_or(Errno::ENOENT)
    }
}
