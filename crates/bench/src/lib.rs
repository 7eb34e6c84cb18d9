//! Switchyard's measurements: every `switchyard bench …` command, the engine tune (`tune`,
//! which `up` also runs behind a mount) and the report that draws their results. The
//! `switchyard` binary parses the command line and calls the `run` of the module named for
//! the command; each module holds its command's options and everything it measures.
//!
//! Every benchmark measures its baseline in the same run, in interleaved rounds, and reports
//! medians and ratios ([`measure`]).

pub mod aio;
pub mod apps;
pub mod copy;
mod cpu_time;
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
pub mod qos;
pub mod remote;
pub mod report;
pub mod tune;
pub mod tunes;
