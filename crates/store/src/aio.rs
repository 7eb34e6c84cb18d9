//! The asynchronous API (EasyIO §4): `read`, `write`, `pread`, `pwrite` and `append` as
//! futures, next to the synchronous calls, with the same semantics and errors.
//!
//! A future does its whole operation in its first poll — the same code path as the
//! synchronous call — except that engine copies are submitted instead of waited for:
//!
//! - requests the mover keeps on the CPU (below the tuned threshold, or when the engine is
//!   busy) complete inline, so the first poll returns `Ready`;
//! - a write commits its metadata while its engine copies run (orderless write, §4.2): the log
//!   entry names each copy's channel and position, and the channel's durable completion record
//!   says after a crash whether the copy finished. The file's lock is released at the commit;
//!   the next operation on the file settles the copies first (two-level locking, §4.3,
//!   `crate::inflight`);
//! - a read submits its copies under the file's read lock and releases it at once; later
//!   writes never wait for it.
//!
//! While copies run the task yields; it is woken when they finish — by the `switchyard_rt`
//! executor, which checks completions between tasks, or elsewhere (tokio, …) by the engine's
//! worker ([`switchyard_rt::wake_when_finished`]). The future is ready only when every copy it
//! issued has finished (and a partial completion has been repaired): a write that returned is
//! durable, as a synchronous one.
//!
//! Buffers are owned ([`IoBuf`]: a `Vec<u8>`, or memory a caller lends, as the C library's
//! callers do) and handed back with the result, so that no engine copy can outlive the memory
//! it reads or writes: dropping a future waits for its copies, and leaking one leaks its buffer
//! with it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use switchyard_mover::{qos, Detached, Hints};

use crate::error::Errno;
use crate::fs::{Access, Fd, Fs};
use crate::inflight::{gate, PendingWrite, Readers};
use crate::inode::Content;
use crate::store::{for_each_run, Order, Store};

/// A buffer an asynchronous call owns until it completes and hands back with its result.
///
/// # Safety
/// `as_ptr` and `as_mut_ptr` point to `len()` bytes that stay valid, and in place however the
/// value moves, for as long as the value lives; nothing else reads or writes them meanwhile.
pub unsafe trait IoBuf: Default + Unpin {
    /// The first byte.
    fn as_ptr(&self) -> *const u8;
    /// The first byte, for writing.
    fn as_mut_ptr(&mut self) -> *mut u8;
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Whether it has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Its bytes.
    fn as_slice(&self) -> &[u8] {
        if self.is_empty() {
            return &[];
        }
        // SAFETY: the trait's contract: `len()` valid bytes at `as_ptr()` while `self`
        // lives, which the borrow keeps, and no one else writes them.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }
    /// Its bytes, for writing.
    fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.is_empty() {
            return &mut [];
        }
        // SAFETY: as `as_slice`, and the exclusive borrow makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.len()) }
    }
}

// SAFETY: a Vec's bytes live on the heap, in place however the Vec moves, while it lives.
unsafe impl IoBuf for Vec<u8> {
    fn as_ptr(&self) -> *const u8 {
        <[u8]>::as_ptr(self)
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        <[u8]>::as_mut_ptr(self)
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

/// Where an asynchronous request lands.
enum At {
    /// At this offset.
    Offset(u64),
    /// At the end of the file (append).
    End,
    /// At a descriptor's offset, which the request advances; `append` writes at the end.
    Cursor {
        cursor: Arc<Mutex<u64>>,
        append: bool,
    },
}

/// How an asynchronous write orders its data and metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOrder {
    /// Commit the metadata while the engine copies (the default; EasyIO §4.2).
    Orderless,
    /// Commit the metadata only after the copy completes (EasyIO's "Naive" baseline).
    Ordered,
}

impl Store {
    /// Reads up to `buf.len()` bytes at `off` (as [`Store::read`]); resolves to the count and
    /// the buffer.
    pub fn read_async<B: IoBuf>(&self, ino: u64, off: u64, buf: B) -> ReadFuture<'_, B> {
        ReadFuture::new(self, Ok((ino, At::Offset(off))), buf, 0)
    }

    /// Writes `data` at `off` (as [`Store::write`]); resolves to the offset written at (all of
    /// `data`) and the buffer.
    pub fn write_async<B: IoBuf>(&self, ino: u64, off: u64, data: B) -> WriteFuture<'_, B> {
        self.write_async_ordered(ino, off, data, WriteOrder::Orderless)
    }

    /// [`Store::write_async`] with the given ordering of data and metadata.
    pub fn write_async_ordered<B: IoBuf>(
        &self,
        ino: u64,
        off: u64,
        data: B,
        order: WriteOrder,
    ) -> WriteFuture<'_, B> {
        WriteFuture::new(self, Ok((ino, At::Offset(off))), data, order, 0)
    }

    /// Appends `data` (as [`Store::append`]); resolves to the offset it landed at.
    pub fn append_async<B: IoBuf>(&self, ino: u64, data: B) -> WriteFuture<'_, B> {
        WriteFuture::new(self, Ok((ino, At::End)), data, WriteOrder::Orderless, 0)
    }

    /// Arranges for `waker` to be woken when `p`'s first unfinished copy finishes.
    fn wake_on(&self, p: &PendingWrite, waker: &Waker) {
        let Some(parts) = p.parts.try_lock() else {
            // Someone is settling it right now: look again soon.
            waker.wake_by_ref();
            return;
        };
        // The first copy still running (an earlier one may be finished but not yet settled).
        match parts.iter().find_map(|part| {
            let probe = part.copy.probe().filter(|p| !p.is_finished())?;
            Some((probe, part.expected_ns))
        }) {
            Some((probe, expected_ns)) => {
                switchyard_rt::wake_when_finished(probe, expected_ns, waker)
            }
            None => waker.wake_by_ref(),
        }
    }
}

impl Fs {
    /// Reads at the descriptor's offset and advances it (as [`Fs::read`]).
    pub fn read_async<B: IoBuf>(&self, fd: Fd, buf: B) -> ReadFuture<'_, B> {
        let mut tenant = 0;
        let at = self.open_for(fd, Access::Read, None).map(|f| {
            tenant = f.tenant();
            let cursor = At::Cursor {
                cursor: f.offset.clone(),
                append: false,
            };
            (f.ino, cursor)
        });
        ReadFuture::new(self.store(), at, buf, tenant)
    }

    /// Reads at `off` without moving the descriptor's offset (as [`Fs::pread`]).
    pub fn pread_async<B: IoBuf>(&self, fd: Fd, buf: B, off: u64) -> ReadFuture<'_, B> {
        let mut tenant = 0;
        let at = self.open_for(fd, Access::Read, Some(off)).map(|f| {
            tenant = f.tenant();
            (f.ino, At::Offset(off))
        });
        ReadFuture::new(self.store(), at, buf, tenant)
    }

    /// Writes at the descriptor's offset (or the end, with `append`) and advances it (as
    /// [`Fs::write`]); resolves to the offset written at.
    pub fn write_async<B: IoBuf>(&self, fd: Fd, data: B) -> WriteFuture<'_, B> {
        let mut tenant = 0;
        let at = self.open_for(fd, Access::Write, None).map(|f| {
            tenant = f.tenant();
            let cursor = At::Cursor {
                cursor: f.offset.clone(),
                append: f.flags.append,
            };
            (f.ino, cursor)
        });
        WriteFuture::new(self.store(), at, data, WriteOrder::Orderless, tenant)
    }

    /// Writes at `off` without moving the descriptor's offset (`append` still appends) (as
    /// [`Fs::pwrite`]); resolves to the offset written at.
    pub fn pwrite_async<B: IoBuf>(&self, fd: Fd, data: B, off: u64) -> WriteFuture<'_, B> {
        let mut tenant = 0;
        let at = self.open_for(fd, Access::Write, Some(off)).map(|f| {
            tenant = f.tenant();
            let at = if f.flags.append {
                At::End
            } else {
                At::Offset(off)
            };
            (f.ino, at)
        });
        WriteFuture::new(self.store(), at, data, WriteOrder::Orderless, tenant)
    }

    /// Appends at the end (as [`Fs::append`]); resolves to the offset it landed at.
    pub fn append_async<B: IoBuf>(&self, fd: Fd, data: B) -> WriteFuture<'_, B> {
        let mut tenant = 0;
        let at = self.open_for(fd, Access::Write, None).map(|f| {
            tenant = f.tenant();
            (f.ino, At::End)
        });
        WriteFuture::new(self.store(), at, data, WriteOrder::Orderless, tenant)
    }
}

/// `tenant`, or where it is 0 the tenant of the thread that makes the future (its copies
/// carry it wherever the future is polled).
fn or_current(tenant: u16) -> u16 {
    if tenant == 0 {
        qos::current()
    } else {
        tenant
    }
}

enum WriteState {
    Start {
        ino: u64,
        at: At,
    },
    Failed(Errno),
    Copying {
        pending: Arc<PendingWrite>,
        off: u64,
    },
    Done,
}

/// An asynchronous write (see the module docs). Output: the offset written at, and the buffer.
pub struct WriteFuture<'s, B: IoBuf = Vec<u8>> {
    store: &'s Store,
    data: B,
    order: Order,
    state: WriteState,
    /// The tenant its copies carry, wherever it is polled.
    tenant: u16,
}

impl<'s, B: IoBuf> WriteFuture<'s, B> {
    fn new(
        store: &'s Store,
        at: Result<(u64, At), Errno>,
        data: B,
        order: WriteOrder,
        tenant: u16,
    ) -> WriteFuture<'s, B> {
        WriteFuture {
            store,
            data,
            tenant: or_current(tenant),
            order: match order {
                // On page media a commit is a ring record the next sync makes durable, and
                // only a finished copy is sure to be in what that sync writes back.
                WriteOrder::Orderless if store.on_page_media() => Order::Ordered,
                WriteOrder::Orderless => Order::Orderless,
                WriteOrder::Ordered => Order::Ordered,
            },
            state: match at {
                Ok((ino, at)) => WriteState::Start { ino, at },
                Err(e) => WriteState::Failed(e),
            },
        }
    }

    /// Locks, writes and commits: the offset written at and the copies still running; or
    /// `Err` with the file's last write when its copy must finish first.
    #[allow(clippy::type_complexity)]
    fn start(
        &mut self,
        ino: u64,
        at: &At,
    ) -> Result<Result<(u64, Option<Arc<PendingWrite>>), Arc<PendingWrite>>, Errno> {
        let store = self.store;
        store.check_writable()?;
        // The descriptor's offset before the inode (the synchronous calls' order).
        let mut cursor = match at {
            At::Cursor { cursor, .. } => Some(cursor.lock()),
            _ => None,
        };
        let mut g = match store.try_lock(ino)? {
            Ok(g) => g,
            Err(p) => return Ok(Err(p)),
        };
        let inode = g.as_mut().ok_or(Errno::ENOENT)?;
        let off = match (at, &cursor) {
            (At::Offset(o), _) => *o,
            (At::End, _) | (At::Cursor { append: true, .. }, _) => inode.attr.size,
            (At::Cursor { .. }, Some(c)) => **c,
            (At::Cursor { .. }, None) => unreachable!("locked above"),
        };
        store.write_locked(inode, off, self.data.as_slice(), self.order)?;
        if let Some(c) = cursor.as_mut() {
            **c = off + self.data.len() as u64;
        }
        Ok(Ok((off, inode.pending.clone())))
    }
}

impl<B: IoBuf> Future for WriteFuture<'_, B> {
    type Output = (Result<u64, Errno>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let _tenant = qos::enter(this.tenant);
        let store = this.store;
        loop {
            match std::mem::replace(&mut this.state, WriteState::Done) {
                WriteState::Failed(e) => {
                    return Poll::Ready((Err(e), std::mem::take(&mut this.data)))
                }
                WriteState::Start { ino, at } => match this.start(ino, &at) {
                    Err(e) => return Poll::Ready((Err(e), std::mem::take(&mut this.data))),
                    Ok(Err(p)) => {
                        // Level 2: the file's last write is still copying.
                        store.wake_on(&p, cx.waker());
                        this.state = WriteState::Start { ino, at };
                        return Poll::Pending;
                    }
                    Ok(Ok((off, None))) => {
                        return Poll::Ready((Ok(off), std::mem::take(&mut this.data)))
                    }
                    Ok(Ok((off, Some(pending)))) => {
                        this.state = WriteState::Copying { pending, off };
                    }
                },
                WriteState::Copying { pending, off } => {
                    if store.try_settle_own(&pending) {
                        return Poll::Ready((Ok(off), std::mem::take(&mut this.data)));
                    }
                    store.wake_on(&pending, cx.waker());
                    this.state = WriteState::Copying { pending, off };
                    return Poll::Pending;
                }
                WriteState::Done => panic!("a WriteFuture polled after it completed"),
            }
        }
    }
}

impl<B: IoBuf> Drop for WriteFuture<'_, B> {
    fn drop(&mut self) {
        // The engine may still be reading `data`.
        if let WriteState::Copying { pending, .. } = &self.state {
            self.store.wait_settled(pending);
        }
    }
}

enum ReadState {
    Start {
        ino: u64,
        at: At,
    },
    Failed(Errno),
    Copying {
        parts: Vec<(Detached, u64)>,
        readers: Arc<Readers>,
        n: usize,
    },
    Done,
}

/// An asynchronous read (see the module docs). Output: the bytes read, and the buffer.
pub struct ReadFuture<'s, B: IoBuf = Vec<u8>> {
    store: &'s Store,
    buf: B,
    state: ReadState,
    /// The tenant its copies carry, wherever it is polled.
    tenant: u16,
}

impl<'s, B: IoBuf> ReadFuture<'s, B> {
    fn new(
        store: &'s Store,
        at: Result<(u64, At), Errno>,
        buf: B,
        tenant: u16,
    ) -> ReadFuture<'s, B> {
        ReadFuture {
            store,
            buf,
            tenant: or_current(tenant),
            state: match at {
                Ok((ino, at)) => ReadState::Start { ino, at },
                Err(e) => ReadState::Failed(e),
            },
        }
    }

    /// Submits the copies under the read lock; `Err(Some(p))` when `p`, the file's last
    /// write, must finish first.
    #[allow(clippy::type_complexity)]
    fn start(
        &mut self,
        ino: u64,
        at: &At,
    ) -> Result<(Vec<(Detached, u64)>, Arc<Readers>, usize), Option<Arc<PendingWrite>>> {
        let store = self.store;
        let mut cursor = match at {
            At::Cursor { cursor, .. } => Some(cursor.lock()),
            _ => None,
        };
        let g = store.slot(ino).map_err(|_| None)?.read();
        let inode = g.as_ref().ok_or(None)?;
        gate(inode.pending.as_ref(), store).map_err(Some)?;
        let Content::File(pages) = &inode.content else {
            return Err(None);
        };
        let off = match (at, &cursor) {
            (At::Offset(o), _) => *o,
            (_, Some(c)) => **c,
            _ => inode.attr.size,
        };
        let size = inode.attr.size;
        let n = if off >= size {
            0
        } else {
            (size - off).min(self.buf.len() as u64) as usize
        };
        let mut parts = Vec::new();
        let buf = self.buf.as_mut_ptr();
        let hints = Hints::read();
        for_each_run(pages, off, n, |done, len, at| match at {
            Some(at) => {
                let src = store.pm_ptr(at, len as u64);
                // SAFETY: (1) `src` lies in blocks this inode maps; writes go to fresh blocks,
                // and blocks it frees are kept from reuse until this read leaves `readers`;
                // (2) `buf[done..done + len]` is in bounds and owned by this future, which
                // waits for the copy before giving the buffer back or dropping it.
                let t = unsafe { store.mover().submit(buf.add(done), src, len, hints) };
                if t.probe().is_some() {
                    let expected = store.mover().expected_finish(hints.direction, len);
                    parts.push((t.detach(), expected));
                }
            }
            // SAFETY: in bounds of the buffer, which this future owns.
            None => unsafe { std::ptr::write_bytes(buf.add(done), 0, len) },
        });
        if !parts.is_empty() {
            inode.readers.enter();
        }
        if let Some(c) = cursor.as_mut() {
            **c = off + n as u64;
        }
        Ok((parts, inode.readers.clone(), n))
    }

    /// Collects finished copies; true when none is left.
    fn collect(&self, parts: &mut Vec<(Detached, u64)>, waker: &Waker) -> bool {
        while let Some((copy, expected)) = parts.last_mut() {
            if self.store.mover().poll_detached(copy).is_none() {
                if let Some(probe) = copy.probe() {
                    switchyard_rt::wake_when_finished(probe, *expected, waker);
                } else {
                    waker.wake_by_ref();
                }
                return false;
            }
            parts.pop();
        }
        true
    }

    fn leave(&self, readers: &Readers) {
        let blocks = readers.leave();
        self.store.free_blocks(&blocks);
    }
}

impl<B: IoBuf> Future for ReadFuture<'_, B> {
    type Output = (Result<usize, Errno>, B);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let _tenant = qos::enter(this.tenant);
        loop {
            match std::mem::replace(&mut this.state, ReadState::Done) {
                ReadState::Failed(e) => {
                    return Poll::Ready((Err(e), std::mem::take(&mut this.buf)))
                }
                ReadState::Start { ino, at } => match this.start(ino, &at) {
                    Ok((parts, _, n)) if parts.is_empty() => {
                        return Poll::Ready((Ok(n), std::mem::take(&mut this.buf)))
                    }
                    Ok((parts, readers, n)) => {
                        this.state = ReadState::Copying { parts, readers, n };
                    }
                    Err(Some(p)) => {
                        this.store.wake_on(&p, cx.waker());
                        this.state = ReadState::Start { ino, at };
                        return Poll::Pending;
                    }
                    Err(None) => {
                        let e = this.store.read_error(ino);
                        return Poll::Ready((Err(e), std::mem::take(&mut this.buf)));
                    }
                },
                ReadState::Copying {
                    mut parts,
                    readers,
                    n,
                } => {
                    if this.collect(&mut parts, cx.waker()) {
                        this.leave(&readers);
                        return Poll::Ready((Ok(n), std::mem::take(&mut this.buf)));
                    }
                    this.state = ReadState::Copying { parts, readers, n };
                    return Poll::Pending;
                }
                ReadState::Done => panic!("a ReadFuture polled after it completed"),
            }
        }
    }
}

impl<B: IoBuf> Drop for ReadFuture<'_, B> {
    fn drop(&mut self) {
        // The engine may still be writing into `buf` and reading blocks kept for this read.
        if let ReadState::Copying { parts, readers, .. } = &mut self.state {
            for (copy, _) in parts.iter_mut() {
                self.store.mover().wait_detached(copy);
            }
            let readers = readers.clone();
            self.leave(&readers);
        }
    }
}
