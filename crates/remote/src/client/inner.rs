//! The client's work behind its calls: requests, the checked caches, one-sided and
//! in-message data, and path walks.

use std::sync::atomic::{AtomicU64, Ordering};

use switchyard_store::{
    components, Attr, Changes, DirEntry, Errno, Fd, OpenFlags, Owner, SetAttr, Stat, StatFs,
    MAX_FILE_SIZE, ROOT, S_IFDIR, S_IFLNK, S_IFREG,
};

use super::{
    errno, size_only, wait_with, DataPath, Inner, Open, READ_RETRIES, SYMLOOP_MAX, WORD_LINE,
};
use crate::proto::{Reply, Request, MAX_BYTES, MAX_PULL_RANGES};

/// Writes up to this many bytes travel inside their request even where the data path is
/// one-sided: a one-sided write takes two requests (reserve, then commit) around its put,
/// an in-message write one, and the server's copy of a few pages costs less than the
/// second round trip (measured by `bench preload`: 4 KiB random writes).
pub(super) const SMALL_WRITE: usize = 16 << 10;

/// Reads of at least this many bytes are pulled where the data path pulls; smaller ones are
/// gets (which UCX 1.13 serves by emulation on one host: the server's UCX copies them as it
/// progresses), because for them the pull's request costs the server more than the copy
/// (measured by `bench remote` on UCX 1.13: at 4 KiB and 128 KiB the server's CPU per GiB
/// is lower with gets, at 1 MiB and 2 MiB 2–6× lower with pulls).
pub(super) const PULL_FROM: usize = 256 << 10;

/// The first of the server's change words, mapped into this process ([`Node::mapped`]).
pub(super) struct MappedWords(pub(super) *const AtomicU64);

// SAFETY: the words are only loaded atomically, from whichever thread holds the `Inner` that
// keeps their mapping.
unsafe impl Send for MappedWords {}

impl Inner {
    pub(super) fn forget(&mut self) {
        self.names.clear();
        self.attrs.clear();
        self.maps.clear();
    }

    /// Whether data moves without the server copying it (one-sided or pulled), and caches
    /// are kept (checked by change words read one-sided).
    pub(super) fn one_sided(&self) -> bool {
        matches!(self.path, DataPath::OneSided(_) | DataPath::Pulled(_))
    }

    /// Sends a request and waits for its reply; an error reply is its errno.
    pub(super) fn call(&mut self, req: &Request) -> Result<Reply, Errno> {
        self.seq += 1;
        self.call_encoded(&req.encode(self.seq))
    }

    /// Sends the request encoded in `msg` (with sequence number `self.seq`) and waits for its
    /// reply; an error reply is its errno.
    pub(super) fn call_encoded(&mut self, msg: &[u8]) -> Result<Reply, Errno> {
        match Reply::decode(&self.send_raw(msg)?) {
            Ok((_, Reply::Error(e))) => Err(Errno(e)),
            Ok((_, r)) => Ok(r),
            Err(_) => Err(Errno::EIO),
        }
    }

    /// Sends `msg` (request `self.seq`) and returns its reply undecoded.
    fn send_raw(&mut self, msg: &[u8]) -> Result<Vec<u8>, Errno> {
        self.send_with(msg, <[u8]>::to_vec)
    }

    /// Sends `msg` (request `self.seq`) and lends its reply, undecoded and where it lies, to
    /// `f`.
    fn send_with<R>(&mut self, msg: &[u8], f: impl FnMut(&[u8]) -> R) -> Result<R, Errno> {
        self.stats.requests += 1;
        self.node.send(&self.ctl, &[], msg).map_err(errno)?;
        wait_with(&self.node, &self.ctl, Some(self.seq), self.timeout, f)
    }

    /// The change word of `ino` now (one-sided): a load where the words are mapped into this
    /// process, else a get. The get covers the word's whole 64-byte line: UCX 1.13 moves
    /// gets as small as 8 bytes through the server's CPU (an active message it answers) even
    /// on `cma`, and a line-sized one directly.
    pub(super) fn word(&self, ino: u64) -> Result<u64, Errno> {
        if let Some(words) = &self.changes_mapped {
            // Whatever this thread read before (the blocks, by gets that completed) is read
            // before the word.
            std::sync::atomic::fence(Ordering::SeqCst);
            // SAFETY: the mapping holds `CHANGE_WORDS` words (the server's table) and lasts
            // as long as `changes_key`, which this `Inner` holds; the server only writes them
            // atomically.
            let w = unsafe { &*words.0.add(Changes::index(ino)) };
            return Ok(w.load(Ordering::SeqCst));
        }
        let mut line = [0u8; WORD_LINE];
        let at = self.welcome.changes_addr + Changes::index(ino) as u64 * 8;
        let start = at & !(WORD_LINE as u64 - 1);
        self.node
            .get(&self.data, &mut line, start, &self.changes_key)
            .map_err(errno)?;
        let i = (at - start) as usize;
        Ok(u64::from_le_bytes(
            line[i..i + 8].try_into().expect("8 bytes"),
        ))
    }

    pub(super) fn lookup(&mut self, parent: u64, name: &[u8]) -> Result<u64, Errno> {
        if !self.one_sided() {
            return Ok(self.lookup_rpc(parent, name, false)?.0);
        }
        let w = self.word(parent)?;
        let key = (parent, name.to_vec());
        if let Some(&(ino, seen)) = self.names.get(&key) {
            if seen == w {
                self.stats.cache_hits += 1;
                return Ok(ino);
            }
        }
        self.stats.cache_misses += 1;
        let (ino, _) = self.lookup_rpc(parent, name, false)?;
        self.names.insert(key, (ino, w));
        Ok(ino)
    }

    /// `name` in `parent`, held for the front end. A name the cache still vouches for (its
    /// directory's word unchanged) whose inode the front end already holds costs no
    /// request: the server's hold covers it.
    pub(super) fn lookup_held(&mut self, parent: u64, name: &[u8]) -> Result<(u64, Stat), Errno> {
        let word = if self.one_sided() {
            Some(self.word(parent)?)
        } else {
            None
        };
        let key = (parent, name.to_vec());
        if let (Some(w), Some(&(ino, seen))) = (word, self.names.get(&key)) {
            if seen == w && self.holds.get(&ino).is_some_and(|h| h.0 > 0) {
                let st = self.stat(ino)?;
                self.stats.cache_hits += 1;
                self.holds.get_mut(&ino).expect("held").0 += 1;
                return Ok((ino, st));
            }
        }
        self.stats.cache_misses += 1;
        let (ino, st) = self.lookup_rpc(parent, name, true)?;
        if let Some(w) = word {
            self.names.insert(key, (ino, w));
        }
        self.took(ino);
        Ok((ino, st))
    }

    /// Counts a hold the server took for the front end on `ino`.
    pub(super) fn took(&mut self, ino: u64) {
        let h = self.holds.entry(ino).or_default();
        h.0 += 1;
        h.1 += 1;
    }

    /// The front end forgot `n` holds on `ino`: once it has none, the server's go too.
    pub(super) fn forgot(&mut self, ino: u64, n: u64) -> Result<(), Errno> {
        let Some(h) = self.holds.get_mut(&ino) else {
            return Ok(());
        };
        h.0 = h.0.saturating_sub(n);
        if h.0 > 0 {
            return Ok(());
        }
        let (_, server) = self.holds.remove(&ino).expect("present");
        self.done(&Request::Forget { ino, n: server })
    }

    /// Asks the server for `name` in `parent`; `hold` takes a hold for this client.
    pub(super) fn lookup_rpc(
        &mut self,
        parent: u64,
        name: &[u8],
        hold: bool,
    ) -> Result<(u64, Stat), Errno> {
        match self.call(&Request::Lookup {
            parent,
            name: name.to_vec(),
            hold,
        })? {
            Reply::Entry { ino, stat } => Ok((ino, stat)),
            _ => Err(Errno::EIO),
        }
    }

    pub(super) fn getattr(&mut self, ino: u64) -> Result<Attr, Errno> {
        Ok(self.stat(ino)?.attr)
    }

    /// What `ino` is: from the cache while its change word holds, else from the server.
    pub(super) fn stat(&mut self, ino: u64) -> Result<Stat, Errno> {
        if !self.one_sided() {
            return self.stat_rpc(ino);
        }
        let w = self.word(ino)?;
        if let Some(&(a, seen)) = self.attrs.get(&ino) {
            if seen == w {
                self.stats.cache_hits += 1;
                return Ok(a);
            }
        }
        self.stats.cache_misses += 1;
        let a = self.stat_rpc(ino)?;
        self.attrs.insert(ino, (a, w));
        Ok(a)
    }

    fn stat_rpc(&mut self, ino: u64) -> Result<Stat, Errno> {
        stat_of(self.call(&Request::Getattr { ino })?)
    }

    pub(super) fn readlink(&mut self, ino: u64) -> Result<Vec<u8>, Errno> {
        match self.call(&Request::Readlink { ino })? {
            Reply::Bytes(b) => Ok(b),
            _ => Err(Errno::EIO),
        }
    }

    pub(super) fn setattr(&mut self, ino: u64, set: SetAttr) -> Result<Stat, Errno> {
        self.maps.remove(&ino);
        self.attrs.remove(&ino);
        stat_of(self.call(&Request::Setattr { ino, set })?)
    }

    /// Sends a request whose reply carries nothing.
    pub(super) fn done(&mut self, req: &Request) -> Result<(), Errno> {
        self.call(req).map(|_| ())
    }

    /// Makes `name` in `parent` owned by `owner`, made by a creator with `umask`; `hold`
    /// takes a hold for this client.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_in(
        &mut self,
        parent: u64,
        name: Vec<u8>,
        mode: u32,
        rdev: u64,
        target: Vec<u8>,
        (owner, umask): (Owner, u32),
        hold: bool,
    ) -> Result<(u64, Stat), Errno> {
        match self.call(&Request::Make {
            parent,
            name,
            mode,
            rdev,
            target,
            uid: owner.uid,
            gid: owner.gid,
            umask,
            hold,
        })? {
            Reply::Entry { ino, stat } => Ok((ino, stat)),
            _ => Err(Errno::EIO),
        }
    }

    pub(super) fn readdir(&mut self, ino: u64) -> Result<Vec<DirEntry>, Errno> {
        match self.call(&Request::Readdir { ino })? {
            Reply::Dir(es) => Ok(es),
            _ => Err(Errno::EIO),
        }
    }

    pub(super) fn statfs(&mut self) -> Result<StatFs, Errno> {
        match self.call(&Request::Statfs)? {
            Reply::StatFs(s) => Ok(s),
            _ => Err(Errno::EIO),
        }
    }

    /// Appends `data` at the end of `ino` atomically (inside messages, one piece each
    /// [`MAX_BYTES`]); where the first byte went.
    pub(super) fn append(&mut self, ino: u64, data: &[u8]) -> Result<u64, Errno> {
        self.maps.remove(&ino);
        self.attrs.remove(&ino);
        let mut first = None;
        for piece in data.chunks(MAX_BYTES) {
            let at = match self.call(&Request::Append {
                ino,
                data: piece.to_vec(),
            })? {
                Reply::Written(at) => at,
                _ => return Err(Errno::EIO),
            };
            self.stats.message_bytes += piece.len() as u64;
            first.get_or_insert(at);
        }
        match first {
            Some(at) => Ok(at),
            None => Ok(self.stat(ino)?.attr.size),
        }
    }

    // ---- data ---------------------------------------------------------------------------

    /// The cached map of `ino`, or a fresh one.
    /// Caches the map of `ino` if it is not cached (the cache is checked where it is used).
    pub(super) fn cache_map(&mut self, ino: u64) -> Result<(), Errno> {
        if self.maps.contains_key(&ino) {
            self.stats.cache_hits += 1;
            return Ok(());
        }
        self.stats.cache_misses += 1;
        match self.call(&Request::Map {
            ino,
            off: 0,
            len: u64::MAX,
        })? {
            Reply::Map(m) => {
                self.maps.insert(ino, m);
                Ok(())
            }
            _ => Err(Errno::EIO),
        }
    }

    pub(super) fn read(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        if off > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        if !self.one_sided() {
            return self.read_in_messages(ino, off, buf);
        }
        // A pull carries at most MAX_BYTES: a longer read takes several.
        let window = match self.path {
            DataPath::Pulled(_) => MAX_BYTES,
            _ => buf.len().max(1),
        };
        let mut done = 0;
        'windows: loop {
            let want = (buf.len() - done).min(window);
            let at = off + done as u64;
            for _ in 0..READ_RETRIES {
                if let Some(n) = self.read_one_sided(ino, at, &mut buf[done..done + want])? {
                    done += n;
                    if n < want || done == buf.len() {
                        return Ok(done);
                    }
                    continue 'windows;
                }
                self.stats.read_retries += 1;
                self.maps.remove(&ino);
            }
            let n = self.read_in_messages(ino, at, &mut buf[done..])?;
            return Ok(done + n);
        }
    }

    /// One attempt at a one-sided read on the cached map: `None` if the file changed.
    pub(super) fn read_one_sided(
        &mut self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<Option<usize>, Errno> {
        self.cache_map(ino)?;
        let m = &self.maps[&ino];
        if m.attr.kind() == S_IFDIR {
            return Err(Errno::EISDIR);
        }
        let n = m.attr.size.saturating_sub(off).min(buf.len() as u64) as usize;
        let out = &mut buf[..n];
        let (start, base) = (self.welcome.data_start, self.welcome.data_addr);
        // (offset in `out`, length, remote address) of each range to get: runs that follow
        // each other both in the file and in the region are one get (a file written in large
        // pieces is mapped in many runs that lie end to end, and every get is a transfer of
        // its own: a system call each over cma).
        let mut ranges: Vec<(usize, usize, u64)> = Vec::new();
        // Runs are in file order: start at the first that ends past `off`.
        let first = m.runs.partition_point(|r| r.file_offset + r.len <= off);
        for r in &m.runs[first..] {
            if r.file_offset >= off + n as u64 {
                break;
            }
            let (lo, hi) = (
                r.file_offset.max(off),
                (r.file_offset + r.len).min(off + n as u64),
            );
            let (at, len) = ((lo - off) as usize, (hi - lo) as usize);
            let remote = base + (r.region_offset - start) + (lo - r.file_offset);
            match ranges.last_mut() {
                Some((a, l, rem)) if *a + *l == at && *rem + *l as u64 == remote => *l += len,
                _ => ranges.push((at, len, remote)),
            }
        }
        let mut pieces: Vec<(&mut [u8], u64)> = Vec::with_capacity(ranges.len());
        let mut rest = &mut out[..];
        let mut at = 0;
        for (a, len, remote) in ranges {
            // A hole reads as zeros.
            let (hole, tail) = std::mem::take(&mut rest).split_at_mut(a - at);
            hole.fill(0);
            let (piece, tail) = tail.split_at_mut(len);
            pieces.push((piece, remote));
            rest = tail;
            at = a + len;
        }
        rest.fill(0);
        let change = m.change;
        if matches!(self.path, DataPath::Pulled(_)) && n >= PULL_FROM && !pieces.is_empty() {
            // The server sends the pieces only if the map is still the file's (`change`).
            for group in pieces.chunks_mut(MAX_PULL_RANGES) {
                self.seq += 1;
                self.stats.requests += 1;
                let req = Request::Pull {
                    token: self.token,
                    ino,
                    change,
                    ranges: group
                        .iter()
                        .map(|(b, at)| (at - base, b.len() as u64))
                        .collect(),
                };
                let link = (&self.data, &self.ctl);
                if !super::pull::pull(&self.node, link, self.timeout, &req, self.seq, group)? {
                    return Ok(None);
                }
            }
        } else {
            if !pieces.is_empty() {
                self.node
                    .get_many(&self.data, &mut pieces, &self.data_key)
                    .map_err(errno)?;
            }
            if self.word(ino)? != change {
                return Ok(None);
            }
        }
        self.stats.one_sided_bytes += n as u64;
        Ok(Some(n))
    }

    pub(super) fn read_in_messages(
        &mut self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(MAX_BYTES);
            let to = &mut buf[done..done + want];
            // The data is copied once, from the message (where UCX received it) into `buf`.
            let n = self.read_message(ino, off + done as u64, want, |b| {
                to[..b.len()].copy_from_slice(b);
                b.len()
            })?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// [`Inodes::read_lent`](switchyard_store::Inodes::read_lent): on the in-message path, a
    /// read of at most [`MAX_BYTES`] is one reply, lent to `give` where UCX received it.
    pub(super) fn read_lent(
        &mut self,
        ino: u64,
        off: u64,
        len: usize,
        give: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, Errno> {
        if self.one_sided() || len > MAX_BYTES {
            return Ok(false);
        }
        if off > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        self.read_message(ino, off, len, give)?;
        Ok(true)
    }

    /// One in-message read of `len` (at most [`MAX_BYTES`]) bytes at `off` of `ino`: its
    /// bytes, lent to `take` where UCX received them; what `take` returns.
    fn read_message<R>(
        &mut self,
        ino: u64,
        off: u64,
        len: usize,
        mut take: impl FnMut(&[u8]) -> R,
    ) -> Result<R, Errno> {
        self.seq += 1;
        let req = Request::Read {
            ino,
            off,
            len: len as u64,
        };
        let (n, r) =
            self.send_with(&req.encode(self.seq), |body| match Reply::bytes_of(body) {
                Some((_, b)) if b.len() <= len => Ok((b.len(), take(b))),
                Some(_) => Err(Errno::EIO),
                None => match Reply::decode(body) {
                    Ok((_, Reply::Error(e))) => Err(Errno(e)),
                    _ => Err(Errno::EIO),
                },
            })??;
        self.stats.message_bytes += n as u64;
        Ok(r)
    }

    /// Writes `data` at `off`: one-sided (reserve, put, flush, commit: two requests) when it
    /// is larger than [`SMALL_WRITE`], else inside one request, whose bytes the server
    /// copies — one round trip instead of two, for a copy of a few pages.
    pub(super) fn write(&mut self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        self.maps.remove(&ino);
        self.attrs.remove(&ino);
        let mut done = 0;
        while done < data.len() {
            let piece = &data[done..(done + MAX_BYTES).min(data.len())];
            let at = off + done as u64;
            let written = if self.one_sided() && piece.len() > SMALL_WRITE {
                match self.write_one_sided(ino, at, piece) {
                    // No room for the whole piece's blocks: the server writes what fits.
                    Err(e) if e == Errno::ENOSPC => self.write_in_message(ino, at, piece),
                    r => r,
                }
            } else {
                self.write_in_message(ino, at, piece)
            };
            let n = match written {
                Ok(n) => n,
                // As write(2): the bytes written before the store filled up.
                Err(e) if e == Errno::ENOSPC && done > 0 => break,
                Err(e) => return Err(e),
            };
            done += n;
            if n < piece.len() {
                break;
            }
        }
        Ok(done)
    }

    /// Writes `data` at `off` inside one message; the bytes the server wrote (fewer where
    /// the store had no room for all of them).
    fn write_in_message(&mut self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        self.seq += 1;
        let msg = Request::encode_write(self.seq, ino, off, data);
        let n = match self.call_encoded(&msg)? {
            Reply::Written(n) => (n as usize).min(data.len()),
            _ => return Err(Errno::EIO),
        };
        self.stats.message_bytes += n as u64;
        Ok(n)
    }

    /// Reserve, put, flush, commit.
    pub(super) fn write_one_sided(
        &mut self,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> Result<usize, Errno> {
        let Reply::Prepared { id, targets } = self.call(&Request::Prepare {
            ino,
            off,
            len: data.len() as u64,
        })?
        else {
            return Err(Errno::EIO);
        };
        let (start, base) = (self.welcome.data_start, self.welcome.data_addr);
        let put = (|| {
            for t in &targets {
                let src = data
                    .get(t.offset as usize..(t.offset + t.len) as usize)
                    .ok_or(Errno::EIO)?;
                if t.region_offset < start
                    || t.region_offset + t.len > start + self.welcome.data_len
                {
                    return Err(Errno::EIO);
                }
                let remote = base + (t.region_offset - start);
                self.node
                    .put(&self.data, src, remote, &self.data_key)
                    .map_err(errno)?;
            }
            // Remote completion: every byte is in the server's memory before the commit.
            self.node.flush(&self.data).map_err(errno)
        })();
        if let Err(e) = put {
            let _ = self.call(&Request::Abort { id });
            return Err(e);
        }
        match self.call(&Request::Commit { id })? {
            Reply::Written(n) => {
                self.stats.one_sided_bytes += n;
                Ok(n as usize)
            }
            _ => Err(Errno::EIO),
        }
    }

    // ---- paths --------------------------------------------------------------------------

    /// Reads through descriptor `fd`: at `at`, or at its offset, which it then advances.
    pub(super) fn read_fd(
        &mut self,
        fd: Fd,
        buf: &mut [u8],
        at: Option<u64>,
    ) -> Result<usize, Errno> {
        let (ino, offset) = self.file(fd, false)?;
        let n = self.read(ino, at.unwrap_or(offset), buf)?;
        if at.is_none() {
            self.fds.get_mut(&fd.0).expect("checked").offset = offset + n as u64;
        }
        Ok(n)
    }

    /// Writes through descriptor `fd`: at `at`, or at its offset (the end, for an append
    /// descriptor), which it then advances.
    pub(super) fn write_fd(
        &mut self,
        fd: Fd,
        data: &[u8],
        at: Option<u64>,
    ) -> Result<usize, Errno> {
        let (ino, offset) = self.file(fd, true)?;
        if let Some(off) = at {
            return self.write(ino, off, data);
        }
        let (off, n) = if self.fds[&fd.0].flags.append {
            (self.append(ino, data)?, data.len())
        } else {
            (offset, self.write(ino, offset, data)?)
        };
        self.fds.get_mut(&fd.0).expect("checked").offset = off + n as u64;
        Ok(n)
    }

    pub(super) fn file(&self, fd: Fd, write: bool) -> Result<(u64, u64), Errno> {
        let f = self.fds.get(&fd.0).ok_or(Errno::EBADF)?;
        if (write && !f.flags.write) || (!write && !f.flags.read) {
            return Err(Errno::EBADF);
        }
        Ok((f.ino, f.offset))
    }

    pub(super) fn open(&mut self, path: &str, flags: OpenFlags, mode: u32) -> Result<Fd, Errno> {
        let (ino, _) = self.open_ino(path, flags, mode)?;
        let fd = self.next_fd;
        self.next_fd += 1;
        self.fds.insert(
            fd,
            Open {
                ino,
                flags,
                offset: 0,
            },
        );
        Ok(Fd(fd))
    }

    /// Opens (or creates) `path` on the server: the inode and what it is after the open.
    pub(super) fn open_ino(
        &mut self,
        path: &str,
        flags: OpenFlags,
        mode: u32,
    ) -> Result<(u64, Stat), Errno> {
        let (parent, name) = self.parent_of(path, &mut 0)?;
        let ino = match name {
            None => ROOT,
            Some(name) => self.open_in(parent, name, flags, mode)?,
        };
        let mut stat = stat_of(self.call(&Request::Open { ino })?)?;
        let attr = stat.attr;
        if attr.kind() == S_IFDIR && flags.write {
            let _ = self.call(&Request::Close { ino });
            return Err(Errno::EISDIR);
        }
        if flags.truncate && flags.write && attr.kind() == S_IFREG && attr.size > 0 {
            match self.setattr(ino, size_only(0)) {
                Ok(s) => stat = s,
                Err(e) => {
                    let _ = self.call(&Request::Close { ino });
                    return Err(e);
                }
            }
        }
        Ok((ino, stat))
    }

    /// The inode that `name` in `parent` names for an open, created where it is missing and
    /// `flags` say so. Another process may create the name between this lookup and this
    /// create: an open without `O_EXCL` then opens what it made, as open(2) does (it never
    /// fails with EEXIST), looking the name up again a few times if it keeps changing.
    fn open_in(
        &mut self,
        parent: u64,
        name: Vec<u8>,
        flags: OpenFlags,
        mode: u32,
    ) -> Result<u64, Errno> {
        const TRIES: u32 = 8;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.lookup(parent, &name) {
                Ok(_) if flags.create && flags.exclusive => return Err(Errno::EEXIST),
                Ok(ino) => {
                    let a = self.getattr(ino)?;
                    return if a.kind() == S_IFLNK {
                        self.follow(parent, ino, &mut 0)
                    } else {
                        Ok(ino)
                    };
                }
                Err(e) if e == Errno::ENOENT && flags.create => {
                    let mode = S_IFREG | (mode & 0o7777);
                    let owner = Owner::current();
                    let made =
                        self.make_in(parent, name.clone(), mode, 0, Vec::new(), (owner, 0), false);
                    match made {
                        Ok((ino, _)) => return Ok(ino),
                        Err(e) if e == Errno::EEXIST && !flags.exclusive && tries < TRIES => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn make(&mut self, path: &str, mode: u32, target: Vec<u8>) -> Result<u64, Errno> {
        let (parent, name) = self.parent_and_name(path)?;
        let owner = Owner::current();
        Ok(self
            .make_in(parent, name, mode, 0, target, (owner, 0), false)?
            .0)
    }

    pub(super) fn remove(&mut self, path: &str, dir: bool) -> Result<(), Errno> {
        let (parent, name) = self.parent_and_name(path)?;
        self.call(&Request::Remove { parent, name, dir })
            .map(|_| ())
    }

    /// Resolves `path` to (parent directory, last name); the name is `None` for the root.
    pub(super) fn parent_of(
        &mut self,
        path: &str,
        depth: &mut u32,
    ) -> Result<(u64, Option<Vec<u8>>), Errno> {
        let comps = components(path)?;
        let Some((last, dirs)) = comps.split_last() else {
            return Ok((ROOT, None));
        };
        let mut dir = ROOT;
        for c in dirs {
            dir = self.step(dir, c, depth)?;
            if self.getattr(dir)?.kind() != S_IFDIR {
                return Err(Errno::ENOTDIR);
            }
        }
        Ok((dir, Some(last.to_vec())))
    }

    pub(super) fn step(&mut self, dir: u64, name: &[u8], depth: &mut u32) -> Result<u64, Errno> {
        let ino = self.lookup(dir, name)?;
        if self.getattr(ino)?.kind() == S_IFLNK {
            return self.follow(dir, ino, depth);
        }
        Ok(ino)
    }

    pub(super) fn follow(&mut self, dir: u64, link: u64, depth: &mut u32) -> Result<u64, Errno> {
        *depth += 1;
        if *depth > SYMLOOP_MAX {
            return Err(Errno::ELOOP);
        }
        let target = String::from_utf8(self.readlink(link)?).map_err(|_| Errno::EINVAL)?;
        let mut cur = if target.starts_with('/') { ROOT } else { dir };
        // An absolute target through where the store appears names a path in the store.
        let target = match &self.link_root {
            Some(root) => match target.as_bytes().strip_prefix(root.as_slice()) {
                Some([]) => "/".to_string(),
                Some(rest) if rest.starts_with(b"/") => target[root.len()..].to_string(),
                _ => target,
            },
            None => target,
        };
        for c in components(&target)? {
            if self.getattr(cur)?.kind() != S_IFDIR {
                return Err(Errno::ENOTDIR);
            }
            cur = self.step(cur, c, depth)?;
        }
        Ok(cur)
    }

    pub(super) fn resolve(&mut self, path: &str, follow: bool) -> Result<u64, Errno> {
        let mut depth = 0;
        let (dir, last) = self.parent_of(path, &mut depth)?;
        let Some(last) = last else { return Ok(ROOT) };
        let ino = self.lookup(dir, &last)?;
        if follow && self.getattr(ino)?.kind() == S_IFLNK {
            return self.follow(dir, ino, &mut depth);
        }
        Ok(ino)
    }

    pub(super) fn parent_and_name(&mut self, path: &str) -> Result<(u64, Vec<u8>), Errno> {
        let (dir, last) = self.parent_of(path, &mut 0)?;
        Ok((dir, last.ok_or(Errno::EEXIST)?))
    }
}

/// The stat a reply carries.
fn stat_of(r: Reply) -> Result<Stat, Errno> {
    match r {
        Reply::Stat(s) => Ok(s),
        _ => Err(Errno::EIO),
    }
}
