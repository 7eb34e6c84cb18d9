//! # switchyard-remote — a store reached from other processes and other machines (RIMFS)
//!
//! RIMFS (`../shared/papers/004_2457ddd7fc02527f.txt` §2.3, §6) keeps a file system's data
//! and metadata in slow memory on one node; clients fetch metadata by RPC, cache it, and read
//! data with one-sided remote reads, so the server's CPU stays out of the data path. This
//! crate builds that on UCX ([`switchyard_ucx`]):
//!
//! - [`server::serve`]: the store's single owner. It registers the store's data area (and
//!   nothing else of the region) and a small table of change words with UCX, and answers
//!   metadata requests ([`proto`]).
//! - [`Client`]: paths, descriptors and errnos like the local `Fs`. It caches lookups,
//!   attributes and the extent map of a window of each file around its reads
//!   ([`MAP_WINDOW`]: what a read fetches is bounded by its size, not the file's); a read on
//!   a cached map is one-sided gets of the data blocks
//!   followed by an 8-byte get of the file's change word ([`switchyard_store::Changes`]): if
//!   the word moved, the map is fetched again and the read repeated, so a racing reader
//!   never returns bytes the file did not hold. A write reserves copy-on-write blocks by RPC
//!   (the store's `prepare_write`), puts the bytes one-sided, flushes the endpoint (remote
//!   completion) and asks for the commit, which makes the blocks durable before its commit
//!   point. A client that dies before the commit leaves nothing visible; its reservation
//!   is given back when its connection fails.
//! - Between processes of one host, gets and puts go over cross-memory attach (`cma`): the
//!   client's own system calls, with UCX 1.22 ([`switchyard_ucx::Node::one_sided_over_bulk_lanes`]).
//!   Where UCX offers no one-sided get but moves large messages without copies (UCX 1.13
//!   there emulates gets with the server's CPU but carries rendezvous over `cma`; or a
//!   client made by [`Client::connect_pulling`]), large reads are *pulled*: one request names the blocks of the
//!   cached map and the map's change word; the server takes a grace
//!   ([`switchyard_store::Store::grace`]), checks the word and sends the blocks from where
//!   they lie, and the client's transport fetches them ([`DataPath::Pulled`]).
//! - Asynchronous calls ([`Client::pread_async`] and the like) run on the client's I/O
//!   thread while the caller computes, and resolve to the result and the buffer.
//! - Where the transport has no one-sided access (`tcp`: UCX would emulate it with the
//!   server's CPU), the client moves data inside the requests instead, and says so
//!   ([`Client::data_path`]). The server sends a large read's reply from where the file's
//!   bytes lie (under a grace), and a front end can take it from where UCX received it
//!   (`Inodes::read_lent`): no copy by either side's threads.
//!
//! Each client holds two endpoints: a control endpoint made from the server's socket address
//! with UCX's peer failure detection, which carries the requests and notices a dead server;
//! and a data endpoint made from the server's worker address without it, which is the only
//! kind UCX (1.13 verified) lets use shared memory and cross-memory attach (`cma`) between
//! processes of one host (on a cluster, both use RDMA verbs).
//!
//! ## Trust model
//!
//! `serve` creates a secret key file (readable by its owner only) on first start; a client
//! must prove it holds the key (a keyed hash of a random challenge) before it receives
//! anything, memory keys included. A memory key is a capability over the registered range:
//! its holder can read the whole data area — every file's data, not only the files it opens
//! — and, with a writer's key, write any of it. The design limits this: only the data area
//! and the change words are registered (never the superblock, inode table or logs), readers
//! and `--read-only` servers hand out read-only keys, and the server checks every request
//! (types, bounds, that a commit names the client's own reservation). What it cannot limit:
//! an authenticated writer can corrupt other files' data by putting outside its reservation;
//! and on one host, the `cma` transport reads and writes through `process_vm_readv`/`writev`,
//! which the kernel allows to any process of the same user, key or no key. Run `serve` as a
//! user of its own when clients are not trusted. Verified here: `cma`, `posix`, `sysv` and
//! `tcp` on one host; RDMA verbs are not available on these machines and are not verified.

pub mod auth;
mod client;
pub mod locks;
pub mod proto;
pub mod server;
mod signals;

pub use auth::Key;
pub use client::{Client, ClientStats, DataPath, Pending, MAP_WINDOW};
pub use server::{serve, ServeOptions, ServerStats};

/// Keeps message-sized allocations (up to [`proto::MAX_BYTES`]) on the heap for reuse, for
/// the whole process. Each request or reply that carries data is received into a fresh
/// buffer; glibc maps every allocation of 128 KiB or more afresh and unmaps it when freed, so
/// each 1 MiB message would fault its pages in again (profiled: page faults were the largest
/// share of the serving process's time on the in-message path). Called by `serve` and by a
/// remote mount. A low-level path, taken on purpose: no allocator crate changes this for the
/// buffers UCX and the wire format hand over.
pub fn keep_message_buffers() {
    #[cfg(target_env = "gnu")]
    {
        let cap = (2 * proto::MAX_BYTES + (1 << 20)) as libc::c_int;
        // SAFETY: mallopt changes glibc's allocation thresholds; any value is valid, and it
        // affects only where later allocations come from.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, cap);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 4 * cap);
        }
    }
}
