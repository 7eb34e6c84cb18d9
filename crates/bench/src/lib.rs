//! Switchyard's measurements: every `bench …` command, the report that draws their results
//! (`report`), the crash-state harness's command (`crashtest`) and the passthrough FUSE file
//! system `bench mount` measures against ([`passthrough`]). They make up the program
//! `switchyard-bench` (`src/main.rs`), which parses the command line and calls the `run` of
//! the module named for the command; each module holds its command's options and everything
//! it measures.
//!
//! The benchmarks sit on top of the product: this crate depends on the product's crates and
//! nothing in the product depends on it, so the `switchyard` binary links none of what only
//! the benchmarks need (plotters, regex, snap, sha2, the store's `testing` feature, which this
//! crate turns on for `crashtest`). `switchyard bench …`, `switchyard report` and `switchyard
//! crashtest` execute `switchyard-bench` from beside `switchyard`. The tune is the product's
//! (`switchyard tune`); the benchmarks that tune run it through `switchyard_options::tune`.
//!
//! Every benchmark measures its baseline in the same run, in interleaved rounds, and reports
//! medians and ratios ([`measure`]).

pub mod aio;
pub mod apps;
pub mod copy;
mod cpu_time;
pub mod crashtest;
pub mod decide;
pub mod durability;
pub mod explore;
mod fio;
pub mod fs;
pub mod idle;
pub mod large;
pub mod measure;
pub mod memcpy;
pub mod meta;
pub mod mix;
pub mod mount;
pub mod passthrough;
mod pmdk;
pub mod preload;
pub mod product;
pub mod qos;
pub mod remote;
pub mod report;
pub mod tunes;
