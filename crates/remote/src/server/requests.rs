//! Answering a client's requests: its proof of the key first, then requests about names,
//! opens, extended attributes and locks, and file data, each family by a function of its own.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use switchyard_store::{Errno, Inodes, Owner, RecordLock};

use super::{Peer, Server};
use crate::locks::LockKind;
use crate::proto::{Reply, Request, MAX_BYTES};

impl<'s> Server<'s, '_, '_> {
    /// The reply to `req`, and whether the connection stays.
    pub(super) fn answer(&mut self, peer: &mut Peer<'s>, req: Request) -> (Reply, bool) {
        let Some(writable) = peer.writable else {
            return self.authenticate(peer, req);
        };
        if req.mutates() && !writable {
            return (Reply::Error(libc::EROFS), true);
        }
        let reply = match self.execute(peer, req) {
            Ok(r) => r,
            Err(e) => Reply::Error(e.0),
        };
        (reply, true)
    }

    fn authenticate(&self, peer: &mut Peer<'s>, req: Request) -> (Reply, bool) {
        match req {
            Request::Auth { mac, write, uid } if self.opts.key.verify(&peer.challenge, &mac) => {
                let mut w = self.welcome.clone();
                if write {
                    // A reader gets the read-only key; a writer the writable one.
                    let Some(key) = &self.writer_key else {
                        return (Reply::Error(libc::EROFS), false);
                    };
                    w.data_key = key.clone();
                    w.writable = true;
                }
                peer.writable = Some(write);
                // Path rules never match here: a client names files by number.
                peer.tenant = self.store.mover().classes().of(uid, None);
                self.stats.authenticated.fetch_add(1, Ordering::Relaxed);
                (Reply::Welcome(w), true)
            }
            // A wrong proof, or any request before the proof.
            _ => (Reply::Error(libc::EACCES), false),
        }
    }

    /// Answers a request, by its family: names and attributes, opens and the store as a
    /// whole, extended attributes and record locks, or file data.
    fn execute(&mut self, peer: &mut Peer<'s>, req: Request) -> Result<Reply, Errno> {
        match req {
            Request::Auth { .. } => Ok(Reply::Error(libc::EALREADY)),
            Request::Lookup { .. }
            | Request::Getattr { .. }
            | Request::Readdir { .. }
            | Request::Make { .. }
            | Request::Link { .. }
            | Request::Remove { .. }
            | Request::Rename { .. }
            | Request::Readlink { .. }
            | Request::Setattr { .. } => self.names(peer, req),
            Request::Open { .. }
            | Request::Close { .. }
            | Request::Forget { .. }
            | Request::Hold { .. }
            | Request::Fsync { .. }
            | Request::Sync
            | Request::Statfs
            | Request::Counters => self.opens_and_store(peer, req),
            Request::Setxattr { .. }
            | Request::Getxattr { .. }
            | Request::Listxattr { .. }
            | Request::Removexattr { .. }
            | Request::Lock { .. }
            | Request::TestLock { .. }
            | Request::Unlock { .. } => self.attributes_and_locks(peer, req),
            data => self.data(peer, data),
        }
    }

    /// Answers a request about names and attributes.
    fn names(&mut self, peer: &mut Peer<'s>, req: Request) -> Result<Reply, Errno> {
        let s = self.store;
        let entry = |(ino, stat)| Reply::Entry { ino, stat };
        Ok(match req {
            Request::Lookup { parent, name, hold } => {
                if hold {
                    let r = Inodes::lookup(s, parent, &name)?;
                    *peer.holds.entry(r.0).or_default() += 1;
                    entry(r)
                } else {
                    let (ino, _) = s.lookup(parent, &name)?;
                    entry((ino, s.stat(ino)?))
                }
            }
            Request::Getattr { ino } => Reply::Stat(s.stat(ino)?),
            Request::Readdir { ino } => Reply::Dir(s.readdir(ino)?),
            Request::Make {
                parent,
                name,
                mode,
                rdev,
                target,
                uid,
                gid,
                umask,
                hold,
            } => {
                let owner = Owner { uid, gid };
                let made = Inodes::make(s, parent, &name, mode, rdev, &target, owner, umask);
                let (ino, stat) = made?;
                self.held(peer, ino, hold);
                entry((ino, stat))
            }
            Request::Link {
                ino,
                parent,
                name,
                hold,
            } => {
                let stat = Inodes::link(s, ino, parent, &name)?;
                self.held(peer, ino, hold);
                Reply::Stat(stat)
            }
            Request::Remove { parent, name, dir } => {
                Inodes::remove(s, parent, &name, dir)?;
                Reply::Done
            }
            Request::Rename {
                parent,
                name,
                new_parent,
                new_name,
                how,
            } => {
                Inodes::rename(s, parent, &name, new_parent, &new_name, how)?;
                Reply::Done
            }
            Request::Readlink { ino } => Reply::Bytes(s.readlink(ino)?),
            Request::Setattr { ino, set } => Reply::Stat(Inodes::setattr(s, ino, set)?),
            // Every other request is answered by `execute`.
            _ => return Err(Errno::EINVAL),
        })
    }

    /// Answers a request about open files and holds, or about the store as a whole.
    fn opens_and_store(&mut self, peer: &mut Peer<'s>, req: Request) -> Result<Reply, Errno> {
        let s = self.store;
        Ok(match req {
            Request::Open { ino } => {
                s.open(ino)?;
                *peer.opens.entry(ino).or_default() += 1;
                Reply::Stat(s.stat(ino)?)
            }
            Request::Close { ino } => {
                take(&mut peer.opens, ino, 1)?;
                s.release(ino)?;
                Reply::Done
            }
            Request::Forget { ino, n } => {
                take(&mut peer.holds, ino, n)?;
                s.release_holds(ino, n)?;
                Reply::Done
            }
            Request::Hold { ino, generation } => {
                let stale = |e: Errno| if e == Errno::ENOENT { Errno::ESTALE } else { e };
                s.hold(ino).map_err(|e| stale(e.errno))?;
                if s.generation(ino).ok() != Some(generation) {
                    let _ = s.release_holds(ino, 1);
                    return Err(Errno::ESTALE);
                }
                *peer.holds.entry(ino).or_default() += 1;
                Reply::Done
            }
            Request::Fsync { ino } => {
                s.fsync(ino)?;
                Reply::Done
            }
            Request::Sync => {
                s.sync()?;
                Reply::Done
            }
            Request::Statfs => Reply::StatFs(s.statfs()),
            Request::Counters => Reply::Counters(
                self.stats
                    .rows()
                    .into_iter()
                    .map(|(n, v)| (n.as_bytes().to_vec(), v))
                    .collect(),
            ),
            // Every other request is answered by `execute`.
            _ => return Err(Errno::EINVAL),
        })
    }

    /// Answers a request about extended attributes or record locks.
    fn attributes_and_locks(&mut self, peer: &mut Peer<'s>, req: Request) -> Result<Reply, Errno> {
        let s = self.store;
        Ok(match req {
            Request::Lock {
                ino,
                owner,
                lock,
                wait,
            } => {
                s.getattr(ino)?;
                let kind = lock_kind(lock.kind);
                let holder = (peer.ep.id(), owner);
                let (start, end, pid) = (lock.start, lock.end, lock.pid);
                match kind {
                    Some(k) if wait => {
                        let now = std::time::Instant::now();
                        self.locks
                            .set_waiting(ino, holder, start, end, k, pid, now)?
                    }
                    _ => self.locks.set(ino, holder, start, end, kind, pid)?,
                }
                Reply::Done
            }
            Request::TestLock { ino, owner, lock } => {
                s.getattr(ino)?;
                let holder = (peer.ep.id(), owner);
                let kind = lock_kind(lock.kind).unwrap_or(LockKind::Read);
                Reply::Lock(
                    match self.locks.conflict(ino, holder, lock.start, lock.end, kind) {
                        Some(h) => RecordLock {
                            start: h.start,
                            end: h.end,
                            kind: match h.kind {
                                LockKind::Read => libc::F_RDLCK,
                                LockKind::Write => libc::F_WRLCK,
                            },
                            pid: h.pid,
                        },
                        None => RecordLock {
                            kind: libc::F_UNLCK,
                            ..lock
                        },
                    },
                )
            }
            Request::Unlock { ino, owner } => {
                self.locks.release_holder(ino, (peer.ep.id(), owner));
                Reply::Done
            }
            Request::Setxattr {
                ino,
                name,
                value,
                mode,
            } => {
                s.setxattr(ino, &name, &value, mode)?;
                Reply::Done
            }
            Request::Getxattr { ino, name } => Reply::Bytes(s.getxattr(ino, &name)?),
            Request::Listxattr { ino } => Reply::Bytes(s.listxattr(ino)?),
            Request::Removexattr { ino, name } => {
                s.removexattr(ino, &name)?;
                Reply::Done
            }
            // Every other request is answered by `execute`.
            _ => return Err(Errno::EINVAL),
        })
    }

    /// Answers a request about file data.
    fn data(&mut self, peer: &mut Peer<'s>, req: Request) -> Result<Reply, Errno> {
        let s = self.store;
        let moved = |n: usize| {
            self.stats
                .message_bytes
                .fetch_add(n as u64, Ordering::Relaxed);
        };
        Ok(match req {
            Request::Map { ino, off, len } => {
                peer.caches_maps = true;
                Reply::Map(s.extents(ino, off, len)?)
            }
            Request::Seek { ino, off, to } => Reply::Offset(s.seek(ino, off, to)?),
            Request::Prepare { ino, off, len } => {
                if len as usize > MAX_BYTES {
                    return Err(Errno::EINVAL);
                }
                let w = s.prepare_write(ino, off, len)?;
                let targets = w.targets();
                let id = self.next_id;
                self.next_id += 1;
                peer.prepared.insert(id, w);
                Reply::Prepared { id, targets }
            }
            Request::Commit { id } => {
                let w = peer.prepared.remove(&id).ok_or(Errno::EINVAL)?;
                let n = s.commit_write(w)?;
                self.stats
                    .committed_bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
                Reply::Written(n as u64)
            }
            Request::Abort { id } => {
                peer.prepared.remove(&id).ok_or(Errno::EINVAL)?;
                self.stats.abandoned.fetch_add(1, Ordering::Relaxed);
                Reply::Done
            }
            Request::Append { ino, data } => {
                let at = s.append(ino, &data)?;
                moved(data.len());
                Reply::Written(at)
            }
            Request::Fallocate { ino, off, len, how } => {
                s.fallocate(ino, off, len, how)?;
                Reply::Done
            }
            // Every other request is answered by `execute`.
            _ => return Err(Errno::EINVAL),
        })
    }

    /// Counts a hold `make` or `link` took for `peer`, or gives it back if the client did not
    /// ask for one.
    fn held(&self, peer: &mut Peer<'s>, ino: u64, hold: bool) {
        if hold {
            *peer.holds.entry(ino).or_default() += 1;
        } else {
            let _ = self.store.release_holds(ino, 1);
        }
    }
}

/// The lock an `fcntl` lock type asks for (`None`: unlock).
fn lock_kind(kind: i32) -> Option<LockKind> {
    match kind {
        libc::F_RDLCK => Some(LockKind::Read),
        libc::F_WRLCK => Some(LockKind::Write),
        _ => None,
    }
}

/// Takes `n` from `ino`'s count in `counts` (EBADF if it has fewer), dropping it at zero.
fn take(counts: &mut HashMap<u64, u64>, ino: u64, n: u64) -> Result<(), Errno> {
    let c = counts.get_mut(&ino).ok_or(Errno::EBADF)?;
    *c = c.checked_sub(n).ok_or(Errno::EBADF)?;
    if *c == 0 {
        counts.remove(&ino);
    }
    Ok(())
}
