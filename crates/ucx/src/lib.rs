//! # switchyard-ucx — the UCX transport, as much of it as Switchyard uses
//!
//! Remote access to a store (RIMFS, `../shared/papers/004_2457ddd7fc02527f.txt` §6) needs
//! messages for metadata and one-sided reads and writes of the server's data area. UCX gives
//! both over whatever the machines have: RDMA verbs (`rc`, `dc`) on a cluster; cross-memory
//! attach (`cma`), shared memory (`posix`, `sysv`) or `tcp` on one host. Switchyard writes no
//! transport of its own.
//!
//! What this crate offers, on one [`Node`] (a UCP context and one worker, driven by one
//! thread at a time):
//!
//! - connections: [`Node::listen`] and [`Node::accept`] on the server, [`Node::connect`] on
//!   the client (UCX's socket-address connection manager; the data transports are UCX's
//!   choice, narrowed with `UCX_TLS` as usual);
//! - messages: [`Node::send`] (an active message with a header and a body; the receiver may
//!   answer on the endpoint it came from) and [`Node::next_message`]; [`Node::send_lent`]
//!   sends a body from where it lies without waiting (by rendezvous: the receiver's transport
//!   fetches it, [`Node::body_into`] straight into a buffer of the receiver's), and
//!   [`Node::sent`] says when it is free again;
//! - one-sided access: [`Node::register`] a range and pack its remote key for peers; peers
//!   [`Node::unpack_rkey`] it and [`Node::get`] / [`Node::put`] / [`Node::flush`] (remote
//!   completion);
//! - failures: endpoints use UCX's peer error handling, so a peer that dies fails the
//!   operations waiting on it (and [`Node::failed`] names it) instead of hanging them, and
//!   every wait has a deadline after which the endpoint is closed.
//!
//! Every call returns when its operation is complete (buffers reusable, data arrived), which
//! keeps the API safe: no request outlives the buffers it names — except
//! [`Node::send_lent`], which is `unsafe` for that reason. [`Node::get_many`] issues
//! several gets at once and waits for all of them.
//!
//! ## Why the low-level path
//!
//! The Rust crates for UCX either wrap an older UCX API behind an async runtime of their own
//! (`async-ucx`, built for tokio and UCX's tag/stream API) or are raw bindings generated from a
//! vendored copy of UCX headers that need not match the installed library. This crate
//! generates its bindings at build time from the headers of the UCX it links (`build.rs`:
//! the prefix in `SWITCHYARD_UCX`, else `/opt/switchyard/ucx`, else the system's through
//! pkg-config), so the structures' layout is the one the linked `libucp` was built with, and
//! wraps the dozen calls Switchyard needs; [`Node::new`] refuses a linked library older than
//! those headers. `scripts/install-deps.sh` installs UCX 1.22 (Debian 12 has 1.13, which
//! emulates one-sided access between processes of one host with the target's CPU:
//! [`Node::one_sided_over_bulk_lanes`]). Verified here with 1.22 and 1.13 on `cma`, `posix`,
//! `sysv` and `tcp`; the same calls run over RDMA verbs on a cluster, which these machines
//! do not have (not verified here).

mod error;
mod node;
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unused_imports,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/ucp.rs"));
}

pub use error::Error;
pub use node::{ConnectionRequest, Endpoint, Failures, Message, Node, RKey, Registration, Sending};

/// The version of the linked UCX library, as "major.minor.release".
pub fn version() -> String {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: the three pointers are valid for writes of one `c_uint` each.
    unsafe { sys::ucp_get_version(&mut major, &mut minor, &mut release) };
    format!("{major}.{minor}.{release}")
}
