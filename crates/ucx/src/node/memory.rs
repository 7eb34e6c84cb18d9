//! Registered memory, remote keys and one-sided access.

use std::ptr;
use std::sync::{Arc, Mutex};

use super::{Endpoint, Node};
use crate::error::{check, Error};
use crate::sys;

/// A peer's memory as this node may reach it: an unpacked remote key. It may be dropped
/// anywhere, before or after its node: the node destroys it on its own thread (UCX's single
/// thread mode), and a node's other keys are refused.
pub struct RKey {
    h: sys::ucp_rkey_h,
    shelf: Arc<Mutex<KeyShelf>>,
}

// SAFETY: an `RKey` touches UCX only through its node's methods, on the node's thread; its
// drop merely records the handle on the shared shelf, under its mutex.
unsafe impl Send for RKey {}
// SAFETY: as above; `&RKey` gives access to nothing but the handle's value.
unsafe impl Sync for RKey {}

/// The node's unpacked keys: those alive, those dropped and not yet destroyed.
#[derive(Default)]
pub(super) struct KeyShelf {
    /// Set when the node is gone (it destroyed every key).
    pub(super) closed: bool,
    pub(super) live: std::collections::BTreeSet<usize>,
    pub(super) dropped: Vec<usize>,
}

impl Drop for RKey {
    fn drop(&mut self) {
        let mut shelf = self.shelf.lock().unwrap_or_else(|e| e.into_inner());
        if !shelf.closed && shelf.live.remove(&(self.h as usize)) {
            shelf.dropped.push(self.h as usize);
        }
    }
}

/// The protection of memory this node may read and write and peers may read, and write when
/// `writable`.
fn protection(writable: bool) -> u32 {
    let prot = sys::UCP_MEM_MAP_PROT_LOCAL_READ
        | sys::UCP_MEM_MAP_PROT_LOCAL_WRITE
        | sys::UCP_MEM_MAP_PROT_REMOTE_READ;
    if writable {
        prot | sys::UCP_MEM_MAP_PROT_REMOTE_WRITE
    } else {
        prot
    }
}

/// A range of this node's memory registered for peers' one-sided access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration(usize);

impl Node {
    /// Registers `[addr, addr + len)` for peers' one-sided access: reads only, or reads and
    /// writes.
    ///
    /// # Safety
    /// The range must stay mapped until the node is dropped, and peers holding its key may
    /// read (and, when `writable`, write) it at any time: the caller must be ready for that.
    pub unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        writable: bool,
    ) -> Result<Registration, Error> {
        let params = sys::ucp_mem_map_params_t {
            field_mask: (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | sys::UCP_MEM_MAP_PARAM_FIELD_PROT) as u64,
            address: addr.cast(),
            length: len,
            prot: protection(writable) as _,
            ..Default::default()
        };
        let mut memh = ptr::null_mut();
        // SAFETY: the context is live; the range is mapped (this function's contract).
        check("register", unsafe {
            sys::ucp_mem_map(self.context, &params, &mut memh)
        })?;
        let mut regs = self.registrations.borrow_mut();
        regs.push(memh);
        Ok(Registration(regs.len() - 1))
    }

    /// `len` bytes of memory UCX allocates and registers as [`Node::register`] does, placed
    /// where peers on this host can map it into their own address space (shared memory,
    /// UCX's `sysv` or `posix`, where it has them), so that they read it without a get
    /// ([`Node::mapped`]). Returns the registration and the memory's address; the memory
    /// stays mapped until the node is dropped, and peers holding its key may read (and, when
    /// `writable`, write) it at any time.
    pub fn allocate(&self, len: usize, writable: bool) -> Result<(Registration, *mut u8), Error> {
        let params = sys::ucp_mem_map_params_t {
            field_mask: (sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | sys::UCP_MEM_MAP_PARAM_FIELD_FLAGS
                | sys::UCP_MEM_MAP_PARAM_FIELD_PROT) as u64,
            length: len,
            flags: sys::UCP_MEM_MAP_ALLOCATE as _,
            prot: protection(writable) as _,
            ..Default::default()
        };
        let mut memh = ptr::null_mut();
        // SAFETY: the context is live; UCX allocates the range itself.
        check("allocate", unsafe {
            sys::ucp_mem_map(self.context, &params, &mut memh)
        })?;
        let mut attr = sys::ucp_mem_attr_t {
            field_mask: sys::UCP_MEM_ATTR_FIELD_ADDRESS as u64,
            ..Default::default()
        };
        // SAFETY: `memh` was just mapped; `attr` is initialised for its mask.
        if let Err(e) = check("allocate", unsafe { sys::ucp_mem_query(memh, &mut attr) }) {
            // SAFETY: `memh` is mapped and named nowhere else.
            unsafe { sys::ucp_mem_unmap(self.context, memh) };
            return Err(e);
        }
        let mut regs = self.registrations.borrow_mut();
        regs.push(memh);
        Ok((Registration(regs.len() - 1), attr.address.cast()))
    }

    /// Where the peer's address `remote` under `key` is mapped into this process, if the
    /// peer's memory can be (it was [`Node::allocate`]d in shared memory this host's UCX
    /// reaches): loads there see the peer's stores without a get. The mapping lasts as long as
    /// `key`.
    pub fn mapped(&self, key: &RKey, remote: u64) -> Option<*const u8> {
        self.mine("map", key).ok()?;
        let mut at = ptr::null_mut();
        // SAFETY: `key` is a live key of this node; UCX writes the local address to `at`.
        let status = unsafe { sys::ucp_rkey_ptr(key.h, remote, &mut at) };
        (status == sys::UCS_OK && !at.is_null()).then_some(at as *const u8)
    }

    /// The packed remote key of a registration, to send to peers.
    pub fn pack_rkey(&self, r: Registration) -> Result<Vec<u8>, Error> {
        let memh = self.registrations.borrow()[r.0];
        let (mut buf, mut len) = (ptr::null_mut(), 0usize);
        // SAFETY: `memh` is a live registration of this context.
        check("pack key", unsafe {
            sys::ucp_rkey_pack(self.context, memh, &mut buf, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `buf`, released right after the copy.
        let key = unsafe { std::slice::from_raw_parts(buf as *const u8, len) }.to_vec();
        // SAFETY: `buf` came from `ucp_rkey_pack` and is released once.
        unsafe { sys::ucp_rkey_buffer_release(buf) };
        Ok(key)
    }

    /// A peer's packed remote key, usable on `ep`.
    pub fn unpack_rkey(&self, ep: &Endpoint, packed: &[u8]) -> Result<RKey, Error> {
        self.usable("unpack key", ep)?;
        let mut h = ptr::null_mut();
        // SAFETY: `ep` is open; UCX validates the packed bytes it reads.
        check("unpack key", unsafe {
            sys::ucp_ep_rkey_unpack(ep.h, packed.as_ptr().cast(), &mut h)
        })?;
        self.shelf().live.insert(h as usize);
        Ok(RKey {
            h,
            shelf: self.keys.clone(),
        })
    }

    pub(super) fn shelf(&self) -> std::sync::MutexGuard<'_, KeyShelf> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails unless `key` was unpacked by this node.
    fn mine(&self, op: &'static str, key: &RKey) -> Result<(), Error> {
        if Arc::ptr_eq(&key.shelf, &self.keys) {
            Ok(())
        } else {
            Err(Error::new(op, sys::UCS_ERR_INVALID_PARAM))
        }
    }

    /// Reads `buf.len()` bytes at the peer's address `remote` into `buf` (one-sided).
    pub fn get(&self, ep: &Endpoint, buf: &mut [u8], remote: u64, key: &RKey) -> Result<(), Error> {
        self.get_many(ep, &mut [(buf, remote)], key)
    }

    /// Several one-sided reads issued together; returns when all have arrived.
    pub fn get_many(
        &self,
        ep: &Endpoint,
        reads: &mut [(&mut [u8], u64)],
        key: &RKey,
    ) -> Result<(), Error> {
        self.usable("get", ep)?;
        self.mine("get", key)?;
        let param = sys::ucp_request_param_t::default();
        let mut reqs = Vec::with_capacity(reads.len());
        for (buf, remote) in reads.iter_mut() {
            // SAFETY: `ep` is open and `key` was unpacked for it; `buf` stays borrowed until
            // every request below is complete.
            reqs.push(unsafe {
                sys::ucp_get_nbx(
                    ep.h,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    *remote,
                    key.h,
                    &param,
                )
            });
        }
        self.complete_all("get", reqs, ep)
    }

    /// Writes `buf` at the peer's address `remote` (one-sided); the data is at the peer once
    /// a later [`Node::flush`] returns.
    pub fn put(&self, ep: &Endpoint, buf: &[u8], remote: u64, key: &RKey) -> Result<(), Error> {
        self.usable("put", ep)?;
        self.mine("put", key)?;
        let param = sys::ucp_request_param_t::default();
        // SAFETY: `ep` is open and `key` was unpacked for it; `buf` stays borrowed until the
        // request is complete (local completion: the buffer is reusable).
        let req = unsafe {
            sys::ucp_put_nbx(ep.h, buf.as_ptr().cast(), buf.len(), remote, key.h, &param)
        };
        self.complete("put", req, Some(ep))
    }

    /// Returns once every operation issued on `ep` is complete at the peer (remote
    /// completion).
    pub fn flush(&self, ep: &Endpoint) -> Result<(), Error> {
        self.usable("flush", ep)?;
        let param = sys::ucp_request_param_t::default();
        // SAFETY: `ep` is open.
        let req = unsafe { sys::ucp_ep_flush_nbx(ep.h, &param) };
        self.complete("flush", req, Some(ep))
    }

    /// Waits for every request; the first failure is returned after all are complete (their
    /// buffers are then free in every case).
    fn complete_all(
        &self,
        op: &'static str,
        reqs: Vec<sys::ucs_status_ptr_t>,
        ep: &Endpoint,
    ) -> Result<(), Error> {
        let mut first = Ok(());
        for r in reqs {
            let res = self.complete(op, r, Some(ep));
            if first.is_ok() {
                first = res;
            }
        }
        first
    }
}
