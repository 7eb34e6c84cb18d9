//! The DSA engine: the [`crate::Engine`] contract on Intel Data Streaming Accelerator work
//! queues through Linux's `idxd` driver.
//!
//! - [`descriptor`]: the hardware formats (64-byte work descriptor, 32-byte completion
//!   record, opcodes, flags, status codes) and their mapping to the contract;
//! - [`sysfs`]: discovery of enabled user work queues ([`discover`]), and what is missing
//!   when there is none, with the `accel-config` commands that set one up;
//! - [`portal`]: how descriptors reach a queue (`MOVDIR64B`, `ENQCMD`, `write(2)`);
//! - [`DsaEngine`]: channels are work queues; completion by polling completion records, with
//!   [`wait`]'s `UMWAIT` where the CPU has `waitpkg`;
//! - `model` (tests and the `testing` feature only): a device model that enforces the
//!   specification, on which every test of this engine runs.
//!
//! **What was verified where.** Everything here was tested on the model only: no DSA device
//! was available. `MOVDIR64B` was executed for real (into the model's emulated portal page,
//! and through the production mapped portal into a file standing in for a queue's device) on
//! hosts whose CPU has it, and the `write(2)` portal on such a file; `ENQCMD`, `UMWAIT` and the
//! portals of real queues were never executed. `docs/dsa.md` lists what a user with a DSA
//! device runs to set a queue up and check the engine on it.

mod chunk;
pub mod descriptor;
mod engine;
#[cfg(any(test, feature = "testing"))]
pub mod model;
pub mod portal;
pub mod sysfs;
#[cfg(test)]
mod tests;
pub mod wait;

pub use engine::{DsaConfig, DsaEngine, DsaStats};
pub use portal::{Portal, Refused};
pub use sysfs::{discover, Missing, Mode, WorkQueue};
