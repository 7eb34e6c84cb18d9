//! `libswitchyard`: the mover and the store behind a C ABI (`include/switchyard.h`).
//!
//! - **The mover** ([`mod@mover`]): synchronous copies, and asynchronous ones reaped from a
//!   completion queue (submit, poll, wait), each decided CPU, engine or split as in Rust; the
//!   counters by name or as JSON; durable copies into a slow-memory region the library maps
//!   ([`mod@region`]).
//! - **The store** ([`mod@store`]): a store opened in this process (its single owner: the
//!   store file's lock is taken) or one another process serves (`switchyard serve`), by paths
//!   and descriptors as POSIX offers them; asynchronous reads and writes reaped from the
//!   store's completion queue ([`mod@aio`]).
//!
//! Conventions every function keeps:
//!
//! - **Errors** are negative errno values (`-ENOENT`); the calling thread's last failure has
//!   a message ([`sy_last_error`]). Null pointers, bad lengths, descriptors that are not open
//!   and handles of the wrong kind give `-EINVAL`, `-EFAULT` or `-EBADF`, never a crash.
//! - **No panic crosses the boundary**: a panic inside becomes `-EIO` with its message.
//! - **Threads**: every handle may be used from any number of threads at once. Closing one
//!   waits for the calls in progress on it; a closed handle stays a tombstone of a few bytes,
//!   so a later call on it fails with `-EBADF` instead of touching freed memory.
//! - **ABI**: [`sy_abi_version`] says which ABI the library implements; symbols carry the
//!   version node `SWITCHYARD_1`, and a change that breaks callers gets a new one.
//!
//! Why by hand and not a generator of bindings the other way: the C side is the interface
//! here, so the types are `#[repr(C)]` Rust and `cbindgen` writes the header from them (a
//! test checks the committed header is current).

#![warn(missing_docs)]

/// Gives each exported function the version node `SWITCHYARD_1` (`switchyard.map`): rustc
/// exports a cdylib's functions through a version script of its own, without a version, so
/// each module binds its functions to their node (`.symver NAME, NAME@@@NODE`, which renames
/// the definition so a static link sees one; it must sit in the object that
/// defines the symbol; `tests/c.rs` checks that no export is left without one).
macro_rules! versioned {
    ($($name:ident),* $(,)?) => {
        $(std::arch::global_asm!(concat!(
            ".symver ", stringify!($name), ", ", stringify!($name), "@@@SWITCHYARD_1"
        ));)*
    };
}

pub mod aio;
pub mod error;
mod handle;
pub mod mover;
pub mod region;
pub mod store;

pub use error::{sy_last_error, sy_strerror};

/// The ABI this library implements: bumped (with a new symbol version node) by any change
/// that breaks a caller compiled against an earlier header.
pub const SY_ABI_VERSION: u32 = 1;

/// The ABI version of the library loaded ([`SY_ABI_VERSION`] of the header compiled against
/// must equal it).
#[no_mangle]
pub extern "C" fn sy_abi_version() -> u32 {
    SY_ABI_VERSION
}

/// The library's version, as a NUL-terminated string that lives as long as the process.
#[no_mangle]
pub extern "C" fn sy_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Every handle may be shared between threads: checked here when the library compiles.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<mover::sy_mover>();
    shared::<store::sy_store>();
    shared::<store::sy_dir>();
    shared::<region::sy_region>();
};

versioned!(sy_abi_version, sy_version);
