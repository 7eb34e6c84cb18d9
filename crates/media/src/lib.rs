//! # switchyard-media — the one choke point into slow memory
//!
//! Every store, flush and fence that Switchyard issues into a region of slow memory goes
//! through this crate:
//!
//! - [`Region`]: a mapping of slow memory — a regular file (the embedded default, page cache
//!   backed), a file on a DAX file system (mapped `MAP_SYNC` so CPU flushes are enough for
//!   durability) or a device-DAX character device. A region over a file has one owner process: it
//!   holds an exclusive lock on the file while mapped (see [`Region::open`]).
//! - [`Persist`]: the persistence primitives detected at run time — the best cache-line flush
//!   the CPU offers (`clwb` > `clflushopt` > `clflush`), `sfence`, or "no flush" on platforms
//!   whose caches are in the persistence domain (eADR) — and the copy kernels built on them:
//!   temporal, non-temporal (SSE2/AVX2/AVX-512 by detection) and durable.
//! - [`trace`]: a recorder of every store range, flush and fence issued through a [`Persist`]
//!   traced into it ([`Persist::traced`]), for tests that must prove a durable copy was flushed
//!   and fenced and for the store's crash harness. Untraced values (all the product builds)
//!   record nothing.
//!
//! ## Why the low-level path
//!
//! Stable Rust has no intrinsics for `clwb` and `clflushopt`, and no crate keeps the three
//! flush flavours, non-temporal copy kernels and `MAP_SYNC` mapping behind one small interface,
//! so they are written here with inline assembly and `libc`. All `unsafe` code of the storage
//! stack that touches raw slow memory lives in this crate.

#![warn(missing_docs)]

mod durability;
mod error;
pub mod kernels;
mod owner;
pub mod persist;
pub mod private;
pub mod region;
pub mod trace;

pub use durability::{dirty_kb, Granularity, Syncer};
pub use error::MediaError;
pub use kernels::{CopyMode, Simd};
pub use persist::{FlushKind, Persist, CACHE_LINE};
pub use region::{Region, RegionKind, MIN_REGION};
