//! What the tuner measured, point by point (for `switchyard report` and `tune --json`).

use serde::Serialize;

use super::Verdict;

/// One point of a turning-point sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    /// `to_slow` or `from_slow`.
    pub direction: &'static str,
    /// Both ends 64 B aligned.
    pub aligned: bool,
    /// Request size.
    pub size: usize,
    /// CPU-only GiB/s (median over rounds).
    pub cpu_gib_s: f64,
    /// Offload-everything GiB/s.
    pub offload_gib_s: f64,
    /// Median per-round offload ÷ CPU.
    pub ratio: f64,
    /// Rounds measured: the effort's, or more where a tie got more batches.
    pub rounds: usize,
    /// Whether the refinement between a crossing's last loss and first win (not the coarse
    /// sweep) measured it.
    pub refined: bool,
    /// Whether this is a second measurement that replaced a lone loss between wins.
    pub remeasured: bool,
    /// What its rounds say (see [`super::verdict`]).
    pub verdict: Verdict,
}

/// Aggregate bandwidth at one thread count.
#[derive(Debug, Clone, Serialize)]
pub struct ScalePoint {
    /// Concurrent callers.
    pub threads: usize,
    /// Total GiB/s.
    pub gib_s: f64,
}

/// Durable copy bandwidths at one size, streaming against temporal + flush.
#[derive(Debug, Clone, Serialize)]
pub struct NtPoint {
    /// Copy size.
    pub size: usize,
    /// Non-temporal GiB/s.
    pub nt_gib_s: f64,
    /// Temporal + flush GiB/s.
    pub temporal_gib_s: f64,
}

/// Temporal reads between shifted buffers at one size, the SIMD loop against `memcpy`.
#[derive(Debug, Clone, Serialize)]
pub struct ShiftedPoint {
    /// Copy size.
    pub size: usize,
    /// The loop's GiB/s.
    pub loop_gib_s: f64,
    /// `memcpy`'s GiB/s.
    pub memcpy_gib_s: f64,
}

/// Everything the tuner measured (for `switchyard report`), with the profile it derived.
#[derive(Debug, Clone, Serialize)]
pub struct Measurements {
    /// Turning-point sweeps.
    pub sweep: Vec<SweepPoint>,
    /// Engine-only 64 KiB reads by callers.
    pub engine_scaling: Vec<ScalePoint>,
    /// CPU-only durable 64 KiB writes by threads.
    pub writer_scaling: Vec<ScalePoint>,
    /// Non-temporal against temporal durable copies.
    pub nt: Vec<NtPoint>,
    /// The shifted-copy loop against `memcpy`.
    pub shifted: Vec<ShiftedPoint>,
}
