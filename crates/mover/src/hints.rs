//! What the caller tells the mover about a request.

/// Which way the data moves.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// DRAM → slow memory (a write).
    #[default]
    ToSlow,
    /// Slow memory → DRAM (a read).
    FromSlow,
    /// DRAM → DRAM.
    Dram,
}

impl Direction {
    /// All directions, in table order.
    pub const ALL: [Direction; 3] = [Direction::ToSlow, Direction::FromSlow, Direction::Dram];

    /// Table index.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Direction::ToSlow => "to_slow",
            Direction::FromSlow => "from_slow",
            Direction::Dram => "dram",
        }
    }
}

/// Per-request hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hints {
    /// Direction of the copy.
    pub direction: Direction,
    /// The destination must be durable when the copy completes.
    pub durable: bool,
    /// With `durable`: a CPU copy leaves its closing fence to the caller, and is durable once
    /// the calling thread next fences (one fence then drains the copy and the caller's own
    /// flushes, as before a commit). Engine copies are durable on return either way.
    pub defer_fence: bool,
    /// Latency matters more than CPU cost: never wait behind queued engine work.
    pub latency_critical: bool,
    /// The slow memory is on another NUMA node.
    pub remote: bool,
    /// Tenant id, for per-tenant accounting.
    pub tenant: u16,
}

impl Hints {
    /// A durable write into slow memory.
    pub fn write() -> Hints {
        Hints {
            direction: Direction::ToSlow,
            durable: true,
            ..Hints::default()
        }
    }

    /// A read from slow memory.
    pub fn read() -> Hints {
        Hints {
            direction: Direction::FromSlow,
            ..Hints::default()
        }
    }
}
