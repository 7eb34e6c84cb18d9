//! One UCP context with one worker: connections, active messages, registered memory and
//! one-sided access. See the crate docs for the contract.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{check, Error};
use crate::sys;

mod addr;
mod memory;
mod message;
mod spin;

use addr::{from_storage, SockAddr};
use memory::KeyShelf;
pub use memory::{RKey, Registration};
use message::on_message;
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

/// UCX settings this crate changes from UCX's defaults, each only where the environment does
/// not set it: the variable, the name `ucp_config_modify` takes (the variable less `UCX_`: a
/// transport's setting keeps its transport's prefix — UCX 1.22 accepts the bare name and
/// applies it nowhere), the value.
///
/// Both shape how a large message goes over `tcp`, where messages go eagerly (see
/// `Node::eager`). UCX 1.22's own choice, from its model of the interface, was to cut one
/// into 8 KiB pieces copied into send buffers from 16 KiB on loopback, and into 64 KiB
/// zero-copy pieces on a veth pair (its receive segment, 64 KiB, bounds an eager zero-copy
/// piece); the receiver then copies every piece again, into a buffer it assembles the message
/// in. With a receive segment of [`TCP_WHOLE_MESSAGE`] and zero-copy from 16 KiB, a 1 MiB
/// body (a mount's largest request, and its reply) goes in one piece, which the kernel
/// copies from where the sender's bytes lie into the socket and from the socket into one
/// buffer the receiver reads in place (`UCX_PROTO_INFO=y`: "zero-copy" from 16K to 1114096;
/// `bench remote --sshfs`, see docs/remote.md). The threshold is UCX's for every transport;
/// elsewhere than `tcp` this crate sends large bodies by rendezvous or moves data
/// one-sided, which it does not change.
const DEFAULTS: [(&str, &std::ffi::CStr, &std::ffi::CStr); 2] = [
    ("UCX_TCP_RX_SEG_SIZE", c"TCP_RX_SEG_SIZE", TCP_WHOLE_MESSAGE),
    ("UCX_ZCOPY_THRESH", c"ZCOPY_THRESH", c"16K"),
];

/// The `tcp` receive segment: 1 MiB and room for the headers of UCX and of the message. A
/// connection holds one such buffer while a message arrives, and one more for each large
/// body its reader still holds in place.
const TCP_WHOLE_MESSAGE: &std::ffi::CStr = c"1088K";

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

/// The first UCX release measured to move gets and puts over bulk lanes zero-copy
/// ([`Node::one_sided_over_bulk_lanes`]); 1.13 does not.
const BULK_ONE_SIDED_FROM: (u32, u32) = (1, 22);

/// The linked library's (major, minor) version.
fn linked_version() -> (u32, u32) {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: the three pointers are valid for writes of one `c_uint` each.
    unsafe { sys::ucp_get_version(&mut major, &mut minor, &mut release) };
    (major, minor)
}

/// Whether UCX `version`, with the settings `ucp_config_print` printed, runs gets and puts
/// over bulk lanes zero-copy: from [`BULK_ONE_SIDED_FROM`], unless `UCX_PROTO_ENABLE` is
/// `n` (the only other value UCX takes is `y`).
fn bulk_one_sided(version: (u32, u32), settings: &str) -> bool {
    let v2 = settings
        .lines()
        .find_map(|l| l.trim().strip_prefix("UCX_PROTO_ENABLE="))
        .is_none_or(|v| v.trim() != "n");
    version >= BULK_ONE_SIDED_FROM && v2
}

/// What `print` writes to a FILE, as text (UCX's printers write nowhere else).
fn printed(print: impl FnOnce(*mut libc::FILE)) -> String {
    let (mut buf, mut len) = (ptr::null_mut(), 0usize);
    // SAFETY: `open_memstream` gives a FILE writing into a buffer it allocates.
    let f = unsafe { libc::open_memstream(&mut buf, &mut len) };
    if f.is_null() {
        return String::new();
    }
    print(f);
    // SAFETY: `f` is a live FILE, closed once; closing it finalises `buf` and `len`.
    unsafe { libc::fclose(f) };
    // SAFETY: after `fclose`, `buf` holds `len` bytes, freed right after the copy.
    let text = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
    let out = String::from_utf8_lossy(text).into_owned();
    // SAFETY: `buf` was allocated by `open_memstream` with malloc.
    unsafe { libc::free(buf.cast()) };
    out
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

    fn configured(shared_memory: bool) -> Result<Node, Error> {
        let params = sys::ucp_params_t {
            field_mask: sys::UCP_PARAM_FIELD_FEATURES as u64,
            features: (sys::UCP_FEATURE_AM | sys::UCP_FEATURE_RMA | sys::UCP_FEATURE_WAKEUP) as u64,
            ..Default::default()
        };
        let mut config = ptr::null_mut();
        // SAFETY: null prefix and file: UCX reads its environment into a config it allocates.
        check("config", unsafe {
            sys::ucp_config_read(ptr::null(), ptr::null(), &mut config)
        })?;
        for (var, name, value) in DEFAULTS {
            if std::env::var_os(var).is_none() {
                // SAFETY: `config` is live; both strings are NUL-terminated. A UCX that does
                // not know the setting refuses it, which leaves its own default.
                unsafe { sys::ucp_config_modify(config, name.as_ptr(), value.as_ptr()) };
            }
        }
        if !shared_memory && std::env::var_os("UCX_TLS").is_none() {
            // SAFETY: `config` is live; both strings are NUL-terminated.
            check("config", unsafe {
                sys::ucp_config_modify(config, c"TLS".as_ptr(), c"^sm".as_ptr())
            })?;
        }
        // SAFETY: `config` is live; the FILE is the one `printed` passes.
        let settings = printed(|f| unsafe {
            sys::ucp_config_print(
                config,
                f.cast(),
                ptr::null(),
                sys::UCS_CONFIG_PRINT_CONFIG | sys::UCS_CONFIG_PRINT_HIDDEN,
            )
        });
        let bulk_one_sided = bulk_one_sided(linked_version(), &settings);
        let mut context = ptr::null_mut();
        // SAFETY: `params` is initialised for the fields its mask names; `config` is live;
        // `context` receives the handle.
        let made = check("init", unsafe {
            sys::ucp_init_version(
                sys::UCP_API_MAJOR,
                sys::UCP_API_MINOR,
                &params,
                config,
                &mut context,
            )
        });
        // SAFETY: `config` came from `ucp_config_read` and is released once; the context
        // keeps its own copy of what it read.
        unsafe { sys::ucp_config_release(config) };
        made?;
        let linked = linked_version();
        if linked < (sys::UCP_API_MAJOR, sys::UCP_API_MINOR) {
            // SAFETY: the context was created above and nothing else uses it.
            unsafe { sys::ucp_cleanup(context) };
            return Err(Error::new(
                "init: the linked UCX is older than the headers the bindings came from",
                sys::UCS_ERR_UNSUPPORTED,
            ));
        }
        let wp = sys::ucp_worker_params_t {
            field_mask: sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64,
            // Serialized, not single: the node may move between threads (one at a time).
            thread_mode: sys::UCS_THREAD_MODE_SERIALIZED,
            ..Default::default()
        };
        let mut worker = ptr::null_mut();
        // SAFETY: `context` is a live context; `wp` is initialised for its mask.
        if let Err(e) = check("worker", unsafe {
            sys::ucp_worker_create(context, &wp, &mut worker)
        }) {
            // SAFETY: the context was created above and nothing else uses it.
            unsafe { sys::ucp_cleanup(context) };
            return Err(e);
        }
        let mut efd = -1;
        let mut node = Node {
            context,
            worker,
            efd: -1,
            events: Box::default(),
            listeners: RefCell::new(Vec::new()),
            endpoints: RefCell::new(BTreeMap::new()),
            registrations: RefCell::new(Vec::new()),
            deadline: Cell::new(Duration::from_secs(10)),
            spin: Spin::default(),
            links: RefCell::new(BTreeMap::new()),
            poisoned: Cell::new(false),
            unreported: RefCell::new(Vec::new()),
            keys: Arc::default(),
            bulk_one_sided,
        };
        // SAFETY: `worker` is live; `efd` receives a descriptor the worker owns.
        check("event fd", unsafe {
            sys::ucp_worker_get_efd(worker, &mut efd)
        })?;
        node.efd = efd;
        let events = &*node.events as *const Events as *mut c_void;
        let hp = sys::ucp_am_handler_param_t {
            field_mask: (sys::UCP_AM_HANDLER_PARAM_FIELD_ID
                | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
                | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG) as u64,
            id: AM_ID,
            cb: Some(on_message),
            arg: events,
            ..Default::default()
        };
        // SAFETY: `worker` is live; the handler's `arg` is the boxed `Events`, which lives as
        // long as the node (and so the worker).
        check("message handler", unsafe {
            sys::ucp_worker_set_am_recv_handler(worker, &hp)
        })?;
        Ok(node)
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
    fn absorb_failures(&self) {
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
    fn usable(&self, op: &'static str, ep: &Endpoint) -> Result<(), Error> {
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
    fn force_close(&self, h: sys::ucp_ep_h) {
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

#[cfg(test)]
mod tests {
    use super::bulk_one_sided;

    #[test]
    fn bulk_lanes_carry_gets_from_ucx_1_22_with_protocols_v2() {
        let on = "UCX_NET_DEVICES=all\nUCX_PROTO_ENABLE=y\nUCX_TLS=all\n";
        let off = "UCX_NET_DEVICES=all\nUCX_PROTO_ENABLE=n\n";
        assert!(bulk_one_sided((1, 22), on));
        assert!(bulk_one_sided((2, 0), on));
        assert!(
            bulk_one_sided((1, 22), "UCX_TLS=all\n"),
            "v2 is 1.22's default"
        );
        assert!(!bulk_one_sided((1, 22), off));
        assert!(
            !bulk_one_sided((1, 13), on),
            "1.13 emulates gets it has no rma lane for"
        );
        assert!(!bulk_one_sided((1, 13), off));
    }
}
