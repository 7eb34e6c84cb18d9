//! Connections: listening, connecting (by socket address or worker address), failures
//! noticed and passed on to linked endpoints, and closing.

use std::ffi::c_void;
use std::net::SocketAddr;
use std::ptr;

use super::addr::{from_storage, SockAddr};
use super::setup::printed;
use super::{ConnectionRequest, Endpoint, Events, Failures, Node};
use crate::error::{check, Error};
use crate::sys;

unsafe extern "C" fn on_connection(request: sys::ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: `arg` is the node's boxed `Events`, alive as long as the listener that calls
    // this; the callback runs on the thread driving the worker.
    let events = unsafe { &*(arg as *const Events) };
    events.connections.borrow_mut().push_back(request);
}

unsafe extern "C" fn on_failure(arg: *mut c_void, ep: sys::ucp_ep_h, _: sys::ucs_status_t) {
    // SAFETY: as in `on_connection`: the endpoint's error handler holds the boxed `Events`.
    let events = unsafe { &*(arg as *const Events) };
    events.failed.borrow_mut().push(ep as usize);
}

impl Node {
    /// Listens on `addr` (port 0: any free port); returns the address bound. Connection
    /// requests arrive through [`Node::next_connection`].
    pub fn listen(&self, addr: SocketAddr) -> Result<SocketAddr, Error> {
        let sa = SockAddr::new(addr);
        let params = sys::ucp_listener_params_t {
            field_mask: (sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
                | sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER) as u64,
            sockaddr: sa.ucs(),
            conn_handler: sys::ucp_listener_conn_handler_t {
                cb: Some(on_connection),
                arg: &*self.events as *const Events as *mut c_void,
            },
            ..Default::default()
        };
        let mut listener = ptr::null_mut();
        // SAFETY: the worker is live; `params` and the address it points to live across the
        // call; the handler's `arg` lives as long as the node.
        check("listen", unsafe {
            sys::ucp_listener_create(self.worker, &params, &mut listener)
        })?;
        self.listeners.borrow_mut().push(listener);
        let mut attr = sys::ucp_listener_attr_t {
            field_mask: sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR as u64,
            ..Default::default()
        };
        // SAFETY: `listener` was just created; `attr` is initialised for its mask.
        check("listener address", unsafe {
            sys::ucp_listener_query(listener, &mut attr)
        })?;
        Ok(from_storage(&attr.sockaddr).unwrap_or(addr))
    }

    /// The next connection request a listener received, if any (progress first).
    pub fn next_connection(&self) -> Option<ConnectionRequest> {
        self.events
            .connections
            .borrow_mut()
            .pop_front()
            .map(|h| ConnectionRequest { h })
    }

    /// Accepts a connection request: the endpoint to the client.
    pub fn accept(&self, request: ConnectionRequest) -> Result<Endpoint, Error> {
        let mut params = self.endpoint_params();
        params.field_mask |= sys::UCP_EP_PARAM_FIELD_CONN_REQUEST as u64;
        params.conn_request = request.h;
        self.create_endpoint("accept", &params)
    }

    /// Refuses a connection request.
    pub fn reject(&self, request: ConnectionRequest) {
        if let Some(&l) = self.listeners.borrow().first() {
            // SAFETY: `l` is this worker's listener, which received the request.
            unsafe { sys::ucp_listener_reject(l, request.h) };
        }
    }

    /// Connects to a node listening on `addr`.
    pub fn connect(&self, addr: SocketAddr) -> Result<Endpoint, Error> {
        let sa = SockAddr::new(addr);
        let mut params = self.endpoint_params();
        params.field_mask |=
            (sys::UCP_EP_PARAM_FIELD_SOCK_ADDR | sys::UCP_EP_PARAM_FIELD_FLAGS) as u64;
        params.flags = sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        params.sockaddr = sa.ucs();
        let ep = self.create_endpoint("connect", &params)?;
        // The connection is set up asynchronously: a round of flush confirms the peer is
        // there (or fails).
        self.flush(&ep)?;
        Ok(ep)
    }

    /// This node's worker address: what a peer passes to [`Node::connect_address`]. It names
    /// every transport the worker can be reached on (shared memory and cross-memory attach
    /// for peers on this host, the network for others).
    pub fn address(&self) -> Result<Vec<u8>, Error> {
        let (mut addr, mut len) = (ptr::null_mut(), 0usize);
        // SAFETY: the worker is live; UCX allocates the address and its length.
        check("address", unsafe {
            sys::ucp_worker_get_address(self.worker, &mut addr, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`, released right after the copy.
        let out = unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec();
        // SAFETY: `addr` came from `ucp_worker_get_address` and is released once.
        unsafe { sys::ucp_worker_release_address(self.worker, addr) };
        Ok(out)
    }

    /// Connects to the worker whose [`Node::address`] is `address` (received over an
    /// endpoint made by [`Node::connect`] or [`Node::accept`]). Unlike a socket-address
    /// connection, which UCX 1.13 keeps on network transports, this one may use the best
    /// transports the two workers share — see [`Failures`] for the choice that decides it.
    pub fn connect_address(&self, address: &[u8], failures: Failures) -> Result<Endpoint, Error> {
        let mut params = self.endpoint_params();
        if failures == Failures::Undetected {
            params.field_mask &= !((sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64);
        }
        params.field_mask |= sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS as u64;
        params.address = address.as_ptr().cast();
        // UCX reads the address during the call; it validates what it parses.
        self.create_endpoint("connect", &params)
    }

    fn endpoint_params(&self) -> sys::ucp_ep_params_t {
        sys::ucp_ep_params_t {
            field_mask: (sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64,
            err_mode: sys::UCP_ERR_HANDLING_MODE_PEER,
            err_handler: sys::ucp_err_handler_t {
                cb: Some(on_failure),
                arg: &*self.events as *const Events as *mut c_void,
            },
            ..Default::default()
        }
    }

    fn create_endpoint(
        &self,
        op: &'static str,
        params: &sys::ucp_ep_params_t,
    ) -> Result<Endpoint, Error> {
        let mut ep = ptr::null_mut();
        // SAFETY: the worker is live; `params` (and what it points to) lives across the call;
        // the error handler's `arg` lives as long as the node.
        check(op, unsafe {
            sys::ucp_ep_create(self.worker, params, &mut ep)
        })?;
        self.endpoints
            .borrow_mut()
            .insert(ep as usize, (ep, false, None));
        Ok(Endpoint { h: ep })
    }

    /// UCX's description of `ep`'s configuration: its lanes, with the transport and device
    /// each uses for messages, one-sided access and wire-up.
    pub fn describe(&self, ep: &Endpoint) -> String {
        if self.usable("describe", ep).is_err() {
            return String::new();
        }
        // SAFETY: `ep` is open; the FILE is the one `printed` passes.
        printed(|f| unsafe { sys::ucp_ep_print_info(ep.h, f.cast()) })
    }

    /// Whether this UCX moves gets and puts of registered memory over an endpoint's bulk
    /// lanes (role `rma_bw` in [`Node::describe`]) as zero-copy transfers the initiator
    /// alone makes: UCX 1.22 or later with its protocol selection v2 (its default;
    /// `UCX_PROTO_ENABLE=n` turns it off). So between processes of one host a get is the
    /// initiator's `process_vm_readv` over `cma`. Older UCX (1.13 measured) use only the
    /// lanes for gets (role `rma`) for them, and where none reaches the memory, emulate them
    /// with messages the target's CPU answers.
    pub fn one_sided_over_bulk_lanes(&self) -> bool {
        self.bulk_one_sided
    }

    /// Endpoints whose peer failed since the last call (by [`Endpoint::id`]); their
    /// operations fail from now on. Close them with [`Node::close`].
    pub fn failed(&self) -> Vec<usize> {
        self.absorb_failures();
        std::mem::take(&mut *self.unreported.borrow_mut())
    }

    /// Marks the endpoints the error callback named (and those linked to them) failed, and
    /// keeps them for [`Node::failed`] to report.
    pub(super) fn absorb_failures(&self) {
        let mut ids: Vec<usize> = self.events.failed.borrow_mut().drain(..).collect();
        if ids.is_empty() {
            return;
        }
        let links = self.links.borrow();
        let linked: Vec<usize> = ids
            .iter()
            .filter_map(|i| links.get(i))
            .flatten()
            .copied()
            .collect();
        ids.extend(linked);
        let mut eps = self.endpoints.borrow_mut();
        for id in &ids {
            if let Some(e) = eps.get_mut(id) {
                e.1 = true;
            }
        }
        self.unreported.borrow_mut().extend(ids);
    }

    /// Makes `dependent` fail when `watched` does: an endpoint without failure detection
    /// ([`Failures::Undetected`]) learns of its peer's death from one to the same peer that
    /// has it, and its operations in flight are abandoned at once rather than at the
    /// deadline.
    pub fn link(&self, dependent: &Endpoint, watched: &Endpoint) {
        self.links
            .borrow_mut()
            .entry(watched.id())
            .or_default()
            .push(dependent.id());
    }

    /// Whether `ep` is open and its peer has not failed (progress first to learn of
    /// failures).
    pub fn is_open(&self, ep: &Endpoint) -> bool {
        self.usable("", ep).is_ok()
    }

    /// Fails with "not connected" if `ep` failed or was closed.
    pub(super) fn usable(&self, op: &'static str, ep: &Endpoint) -> Result<(), Error> {
        if self.poisoned.get() {
            return Err(Error::new(op, sys::UCS_ERR_NOT_CONNECTED));
        }
        self.absorb_failures();
        match self.endpoints.borrow().get(&ep.id()) {
            Some((_, false, _)) => Ok(()),
            _ => Err(Error::new(op, sys::UCS_ERR_NOT_CONNECTED)),
        }
    }

    /// Closes `ep`: what was issued on it is first completed at the peer (when the peer is
    /// alive), then the endpoint is released; the peer sees its endpoint fail.
    pub fn close(&self, ep: Endpoint) {
        if self.usable("close", &ep).is_ok() {
            let _ = self.flush(&ep);
        }
        if let Some((h, _, _)) = self.endpoints.borrow_mut().remove(&ep.id()) {
            self.force_close(h);
        }
    }

    /// Closes `ep` without waiting for its peer: operations still in flight on it end with
    /// an error. For an endpoint whose peer may not answer (dead, or not fetching what it
    /// asked for).
    pub fn close_now(&self, ep: Endpoint) {
        if let Some((h, _, _)) = self.endpoints.borrow_mut().remove(&ep.id()) {
            self.force_close(h);
        }
    }

    /// Releases an endpoint without waiting for its peer (which may be gone, or not
    /// progressing): outstanding requests on it fail.
    pub(super) fn force_close(&self, h: sys::ucp_ep_h) {
        let param = sys::ucp_request_param_t {
            op_attr_mask: sys::UCP_OP_ATTR_FIELD_FLAGS,
            flags: sys::UCP_EP_CLOSE_FLAG_FORCE,
            ..Default::default()
        };
        // SAFETY: `h` is an endpoint of this worker, removed from the table so it is closed
        // once.
        let req = unsafe { sys::ucp_ep_close_nbx(h, &param) };
        // A forced close completes locally.
        let _ = self.complete("close", req, None);
    }
}
