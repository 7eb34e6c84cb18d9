//! The client's work behind its calls: requests, the checked caches, descriptors and path
//! walks (the data paths are modules of their own).

use std::sync::atomic::{AtomicU64, Ordering};

use switchyard_store::{
    components, Attr, Changes, DirEntry, Errno, Fd, OpenFlags, Owner, SetAttr, Stat, StatFs, ROOT,
    S_IFDIR, S_IFLNK, S_IFREG,
};

use super::wait::wait_with;
use super::{errno, size_only, DataPath, Inner, Open, SYMLOOP_MAX, WORD_LINE};
use crate::proto::{Reply, Request};

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
        matches!(self.conn.path, DataPath::OneSided(_) | DataPath::Pulled(_))
    }

    /// Sends a request and waits for its reply; an error reply is its errno.
    pub(super) fn call(&mut self, req: &Request) -> Result<Reply, Errno> {
        self.check_live(req)?;
        self.seq += 1;
        let reply = self.call_encoded(&req.encode(self.seq))?;
        self.note(req, &reply);
        Ok(reply)
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
    pub(super) fn send_with<R>(
        &mut self,
        msg: &[u8],
        f: impl FnMut(&[u8]) -> R,
    ) -> Result<R, Errno> {
        self.stats.requests += 1;
        self.conn
            .node
            .send(&self.conn.ctl, &[], msg)
            .map_err(errno)?;
        wait_with(
            &self.conn.node,
            &self.conn.ctl,
            Some(self.seq),
            self.timeout,
            f,
        )
    }

    /// The change word of `ino` now (one-sided): a load where the words are mapped into this
    /// process, else a get. The get covers the word's whole 64-byte line: UCX 1.13 moves
    /// gets as small as 8 bytes through the server's CPU (an active message it answers) even
    /// on `cma`, and a line-sized one directly.
    pub(super) fn word(&self, ino: u64) -> Result<u64, Errno> {
        if let Some(words) = &self.conn.changes_mapped {
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
        let at = self.conn.welcome.changes_addr + Changes::index(ino) as u64 * 8;
        let start = at & !(WORD_LINE as u64 - 1);
        self.conn
            .node
            .get(&self.conn.data, &mut line, start, &self.conn.changes_key)
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
