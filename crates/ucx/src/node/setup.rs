//! Making a node: UCX's configuration (this crate's defaults over UCX's), its context and
//! the context's one worker, with the handler every message arrives through.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use super::message::on_message;
use super::spin::Spin;
use super::{Events, Node, AM_ID};
use crate::error::{check, Error};
use crate::sys;

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
///
/// `TCP_CM_REUSEADDR` lets a listener take its port again while connections of the one
/// before it sit in TIME-WAIT (`SO_REUSEADDR`): without it a server restarted after a crash
/// was refused its port for a minute. A port another process listens on is still refused.
const DEFAULTS: [(&str, &std::ffi::CStr, &std::ffi::CStr); 3] = [
    ("UCX_TCP_RX_SEG_SIZE", c"TCP_RX_SEG_SIZE", TCP_WHOLE_MESSAGE),
    ("UCX_ZCOPY_THRESH", c"ZCOPY_THRESH", c"16K"),
    ("UCX_TCP_CM_REUSEADDR", c"TCP_CM_REUSEADDR", c"y"),
];

/// The `tcp` receive segment: 1 MiB and room for the headers of UCX and of the message. A
/// connection holds one such buffer while a message arrives, and one more for each large
/// body its reader still holds in place.
const TCP_WHOLE_MESSAGE: &std::ffi::CStr = c"1088K";

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
pub(super) fn printed(print: impl FnOnce(*mut libc::FILE)) -> String {
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

impl Node {
    /// A node whose UCX leaves out its shared-memory transports unless `shared_memory`.
    pub(super) fn configured(shared_memory: bool) -> Result<Node, Error> {
        let (context, bulk_one_sided) = context(shared_memory)?;
        let worker = worker(context)?;
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
}

/// UCX's configuration from its environment, with this crate's [`DEFAULTS`] where the
/// environment sets nothing, and without shared-memory transports unless `shared_memory`.
fn config(shared_memory: bool) -> Result<*mut sys::ucp_config_t, Error> {
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
    Ok(config)
}

/// A UCP context with active messages, one-sided access and wake-ups, configured by
/// [`config`], and whether it runs gets and puts over bulk lanes
/// ([`Node::one_sided_over_bulk_lanes`]).
fn context(shared_memory: bool) -> Result<(sys::ucp_context_h, bool), Error> {
    let params = sys::ucp_params_t {
        field_mask: sys::UCP_PARAM_FIELD_FEATURES as u64,
        features: (sys::UCP_FEATURE_AM | sys::UCP_FEATURE_RMA | sys::UCP_FEATURE_WAKEUP) as u64,
        ..Default::default()
    };
    let config = config(shared_memory)?;
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
    Ok((context, bulk_one_sided))
}

/// The context's one worker; the context is cleaned up if there is none.
fn worker(context: sys::ucp_context_h) -> Result<sys::ucp_worker_h, Error> {
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
    Ok(worker)
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
