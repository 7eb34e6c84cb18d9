//! One UCP context with one worker: connections, active messages, registered memory and
//! one-sided access. See the crate docs for the contract.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{check, Error};
use crate::sys;

mod addr;
mod endpoints;
mod memory;
mod message;
mod setup;
mod spin;

use memory::KeyShelf;
pub use memory::{RKey, Registration};
pub use message::{Message, Sending};
use spin::Spin;

/// The one active-message id every message travels on (the kind is in the header).
const AM_ID: u32 = 0;

/// What UCX's callbacks leave for the thread that drives the worker (they run inside
/// `ucp_worker_progress`, on that thread).
#[derive(Default)]
struct Events {
    connections: RefCell<VecDeque<sys::ucp_conn_request_h>>,
    messages: RefCell<VecDeque<Incoming>>,
    failed: RefCell<Vec<usize>>,
}

/// A message as the callback queued it.
struct Incoming {
    header: Vec<u8>,
    body: Body,
    from: usize,
}

enum Body {
    /// The body, copied out of UCX's buffer.
    Here(Vec<u8>),
    /// A rendezvous descriptor: the body is fetched by [`Node::body`].
    Rendezvous(*mut c_void, usize),
    /// The body in UCX's own buffer, kept by the callback (it returned `UCS_INPROGRESS`)
    /// until released with `ucp_am_data_release`: read in place, not copied.
    Held(*mut c_void, usize),
    /// Taken.
    Gone,
}

/// An open endpoint's handle, whether it failed, and whether its messages go eagerly (not
/// yet decided: `None`).
type OpenEndpoint = (sys::ucp_ep_h, bool, Option<bool>);

/// A UCP context and one worker, driven by one thread at a time (the worker runs in UCX's
/// serialized mode; `Node` is `Send` but not `Sync`, so a `Mutex<Node>` shares it).
pub struct Node {
    context: sys::ucp_context_h,
    worker: sys::ucp_worker_h,
    efd: i32,
    events: Box<Events>,
    listeners: RefCell<Vec<sys::ucp_listener_h>>,
    /// Open endpoints by id, with whether they failed and whether their messages go eagerly
    /// ([`Node::eager`], decided at the first send).
    endpoints: RefCell<BTreeMap<usize, OpenEndpoint>>,
    registrations: RefCell<Vec<sys::ucp_mem_h>>,
    deadline: Cell<Duration>,
    /// Whether polling before sleeping pays ([`Node::wait`]).
    spin: Spin,
    /// Endpoint id → the endpoints that fail with it ([`Node::link`]).
    links: RefCell<BTreeMap<usize, Vec<usize>>>,
    /// Set when a request outlived its endpoint's forced close: the worker is never
    /// progressed (nor destroyed) again, so nothing touches the buffers that request names.
    poisoned: Cell<bool>,
    /// Failed endpoints not yet reported by [`Node::failed`].
    unreported: RefCell<Vec<usize>>,
    /// The keys this node unpacked.
    keys: Arc<Mutex<KeyShelf>>,
    /// [`Node::one_sided_over_bulk_lanes`].
    bulk_one_sided: bool,
}

// SAFETY: every UCX handle in a `Node` is used only through `&Node` methods, and `Node` is not
// `Sync` (its `RefCell`s), so one thread at a time drives the worker, which is what UCX's
// serialized mode requires (any thread, one at a time).
unsafe impl Send for Node {}

/// A connection to a peer. Its operations are [`Node`] methods; it is closed by
/// [`Node::close`] or when the node is dropped.
#[derive(Debug)]
pub struct Endpoint {
    h: sys::ucp_ep_h,
}

// SAFETY: an endpoint is only a name: every use of its handle goes through a method of its
// node, under the node's one-thread-at-a-time rule, so it may move with the node.
unsafe impl Send for Endpoint {}

impl Endpoint {
    /// A number naming this endpoint while it is open (what [`Message::from`] and
    /// [`Node::failed`] report).
    pub fn id(&self) -> usize {
        self.h as usize
    }
}

fn is_err(p: sys::ucs_status_ptr_t) -> bool {
    (p as usize) >= (sys::UCS_ERR_LAST as isize as usize)
}

fn status_of(p: sys::ucs_status_ptr_t) -> sys::ucs_status_t {
    p as isize as sys::ucs_status_t
}

impl Node {
    /// A context with active messages, one-sided access and wake-ups, and its worker.
    pub fn new() -> Result<Node, Error> {
        Node::configured(true)
    }

    /// [`Node::new`] without UCX's shared-memory transports (`UCX_TLS=^sm`: `posix`, `sysv`,
    /// `cma` and the like), unless `UCX_TLS` in the environment names the transports: for a
    /// peer on this host whose memory this process may not attach — another user's, whose
    /// segments the kernel keeps from it — so that UCX does not choose a transport that
    /// then fails to connect. Its peers on this host are reached over `tcp`; its peers on
    /// other hosts as [`Node::new`] reaches them.
    pub fn without_shared_memory() -> Result<Node, Error> {
        Node::configured(false)
    }

    /// How long an operation may wait for its peer before the endpoint is closed and the
    /// operation fails with a time-out (10 s unless set).
    pub fn set_deadline(&self, d: Duration) {
        self.deadline.set(d);
    }

    /// Makes progress on every operation and callback; true if anything happened.
    pub fn progress(&self) -> bool {
        if self.poisoned.get() {
            return false;
        }
        let dropped = std::mem::take(&mut self.shelf().dropped);
        for h in dropped {
            // SAFETY: a key this node unpacked, dropped by its owner, destroyed once here.
            unsafe { sys::ucp_rkey_destroy(h as sys::ucp_rkey_h) };
        }
        // SAFETY: the worker is live and driven by this thread only (`Node` is not `Sync`).
        unsafe { sys::ucp_worker_progress(self.worker) > 0 }
    }

    /// Progresses, and if nothing arrives within a moment of polling (up to 100 µs, where
    /// that has paid off lately), sleeps until the worker has an event or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        // Progress without sleeping for a moment first: a quick answer usually comes within
        // it, and a wake-up through the kernel costs more (measured by `bench remote
        // --sshfs`: 4 KiB reads over TCP 1.6-2x faster with it). Where answers take longer
        // (1 MiB transfers) the polling only takes a core from the peer and the network
        // stack, so it stops until a trial shows it pays again.
        if !self.spin.poll(|| self.progress() || !self.idle()) {
            self.rest(timeout);
        }
    }

    /// Progresses, and if nothing happened sleeps until the worker has an event or `timeout`
    /// passes, without polling first: for a caller that knows its next event is further off
    /// than a wake-up costs.
    pub fn sleep(&self, timeout: Duration) {
        if !self.progress() && self.idle() {
            self.rest(timeout);
        }
    }

    /// Sleeps until the worker has an event or `timeout` passes.
    fn rest(&self, timeout: Duration) {
        // SAFETY: the worker is live; arming asks for a wake-up on its event fd.
        let armed = unsafe { sys::ucp_worker_arm(self.worker) };
        if armed != sys::UCS_OK {
            return; // UCS_ERR_BUSY: events are pending; the caller progresses again.
        }
        let mut fd = libc::pollfd {
            fd: self.efd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid `pollfd` for the worker's own event descriptor.
        unsafe { libc::poll(&mut fd, 1, ms) };
    }

    /// Whether no callback left anything to collect.
    fn idle(&self) -> bool {
        self.events.connections.borrow().is_empty()
            && self.events.messages.borrow().is_empty()
            && self.events.failed.borrow().is_empty()
            && self.unreported.borrow().is_empty()
    }

    /// Waits for `req` (progressing the worker) and frees it. Past the deadline, or as soon
    /// as the endpoint is known to have failed, the endpoint is closed forcibly, which fails
    /// every request on it. A request that does not complete even then (UCX 1.13 keeps some
    /// on shared-memory transports to a dead peer) poisons the node: it returns an error and
    /// the worker is never progressed again, so nothing writes or reads the request's
    /// buffers after the caller gets them back.
    fn complete(
        &self,
        op: &'static str,
        req: sys::ucs_status_ptr_t,
        ep: Option<&Endpoint>,
    ) -> Result<(), Error> {
        if req.is_null() {
            return Ok(());
        }
        if is_err(req) {
            return Err(Error::new(op, status_of(req)));
        }
        let deadline = Instant::now() + self.deadline.get();
        let mut forced: Option<(Instant, sys::ucs_status_t)> = None;
        loop {
            self.progress();
            // SAFETY: `req` is a live request handle of this worker, not yet freed.
            let status = unsafe { sys::ucp_request_check_status(req) };
            if status != sys::UCS_INPROGRESS {
                // SAFETY: the request is complete and freed once, here.
                unsafe { sys::ucp_request_free(req) };
                return match forced {
                    Some((_, why)) => Err(Error::new(op, why)),
                    None => check(op, status),
                };
            }
            if let Some((since, why)) = forced {
                if since.elapsed() > Duration::from_secs(2) || self.poisoned.get() {
                    self.poisoned.set(true);
                    return Err(Error::new(op, why));
                }
                continue;
            }
            let dead = ep.is_some_and(|e| {
                self.absorb_failures();
                !matches!(self.endpoints.borrow().get(&e.id()), Some((_, false, _)))
            });
            if dead || Instant::now() > deadline {
                let why = if dead {
                    sys::UCS_ERR_NOT_CONNECTED
                } else {
                    sys::UCS_ERR_TIMED_OUT
                };
                forced = Some((Instant::now(), why));
                let open = ep.and_then(|e| self.endpoints.borrow_mut().remove(&e.id()));
                match open {
                    // Closing the endpoint fails every request on it, this one included.
                    Some((h, _, _)) => self.force_close(h),
                    // SAFETY: `req` is live; cancelling completes it with an error.
                    None => unsafe { sys::ucp_request_cancel(self.worker, req) },
                }
            }
        }
    }
}

/// Whether an endpoint detects its peer's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failures {
    /// UCX's peer error handling: a dead peer fails the operations on the endpoint (and
    /// [`Node::failed`] names it). UCX 1.13 offers it only on transports that detect failures
    /// (tcp, RDMA verbs), so shared memory and cross-memory attach are not used.
    Detected,
    /// No failure detection, so every transport qualifies (shared memory and cross-memory
    /// attach on one host). A peer's death is noticed only through another endpoint to it
    /// that detects failures, or by the operation deadline ([`Node::set_deadline`]).
    Undetected,
}

/// A connection request a listener received: [`Node::accept`] it or [`Node::reject`] it.
pub struct ConnectionRequest {
    h: sys::ucp_conn_request_h,
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.poisoned.get() {
            // A request may still name a buffer: leave UCX alone (its handles leak).
            return;
        }
        // Queued rendezvous bodies go back to UCX first.
        for m in self.events.messages.borrow_mut().drain(..) {
            if let Body::Rendezvous(desc, _) | Body::Held(desc, _) = m.body {
                // SAFETY: a descriptor the callback kept and nothing received.
                unsafe { sys::ucp_am_data_release(self.worker, desc) };
            }
        }
        // Every key goes before the endpoints it was unpacked on.
        let keys = {
            let mut shelf = self.shelf();
            shelf.closed = true;
            let mut all: Vec<usize> = std::mem::take(&mut shelf.dropped);
            all.extend(std::mem::take(&mut shelf.live));
            all
        };
        for h in keys {
            // SAFETY: a key this node unpacked, destroyed once (the shelf is now closed).
            unsafe { sys::ucp_rkey_destroy(h as sys::ucp_rkey_h) };
        }
        let eps: Vec<_> = std::mem::take(&mut *self.endpoints.borrow_mut())
            .into_values()
            .collect();
        for (h, _, _) in eps {
            self.force_close(h);
        }
        // Let wire-up traffic in flight (of endpoints UCX made for peers that connected to
        // this worker's address) finish: UCX 1.13 asserts on wire-up requests still pending
        // when the worker is destroyed.
        let quiet = Instant::now() + Duration::from_millis(200);
        let mut idle_rounds = 0;
        while Instant::now() < quiet && idle_rounds < 50 {
            if self.progress() {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for l in self.listeners.borrow_mut().drain(..) {
            // SAFETY: a listener of this worker, destroyed once.
            unsafe { sys::ucp_listener_destroy(l) };
        }
        for memh in self.registrations.borrow_mut().drain(..) {
            // SAFETY: a registration of this context, released once.
            unsafe { sys::ucp_mem_unmap(self.context, memh) };
        }
        // SAFETY: every endpoint and listener of the worker is gone; worker then context are
        // destroyed once.
        unsafe {
            sys::ucp_worker_destroy(self.worker);
            sys::ucp_cleanup(self.context);
        }
    }
}
