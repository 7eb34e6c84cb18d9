//! The one-sided data path ([`DataPath::OneSided`], and the gets and puts of
//! [`DataPath::Pulled`]): reads get the blocks of the cached extent map of a window of the
//! file straight from the server's memory and check the file's change word afterwards;
//! writes reserve blocks, put the data into them and commit.
//!
//! The map cached per file covers a window, never necessarily the whole file: the read's range
//! rounded out to [`MAP_WINDOW`](crate::proto::MAP_WINDOW)-aligned bounds
//! ([`map_window`]). A read inside the cached window uses it; a read outside fetches its own
//! window's map in its place. So the map bytes a read fetches are bounded by its size plus
//! two windows, whatever the file's size (a file rewritten in small pieces, whose map is
//! dropped at every write, once cost its whole map per read). Once this client has asked
//! for a map, a write inside a message comes back with the map of its window as it left it
//! and the file's stat ([`Reply::WrittenMap`]): the stat and a read next to it (bonnie++'s
//! rewrite reads the next chunk) send no request.

use switchyard_store::S_IFDIR;
use switchyard_store::{Errno, Extents};

use super::pull::PULL_FROM;
use super::{errno, DataPath, Inner};
use crate::proto::{map_window, Reply, Request};

/// The cached map of a window of a file: the runs of `[off, end)` clipped to the file's
/// size, with the attributes and change word read with them.
pub(super) struct Window {
    /// First byte of the file the map covers.
    off: u64,
    /// The byte after the last one it covers (past the file's end where the window is).
    end: u64,
    /// Attributes, change word and runs.
    map: Extents,
}

impl Window {
    /// Bytes a read of `len` at `off` gets on this map (the file's size as the map saw
    /// it), if the map covers them all.
    fn covers(&self, off: u64, len: usize) -> Option<usize> {
        let n = self.map.attr.size.saturating_sub(off).min(len as u64);
        (n == 0 || (self.off <= off && off + n <= self.end)).then_some(n as usize)
    }
}

impl Inner {
    /// Makes the cached map of `ino` one that covers `len` bytes at `off` (the cache is
    /// checked where it is used), fetching the map of their window if it does not; returns
    /// the bytes of the read the map holds (up to the file's end).
    fn cache_map(&mut self, ino: u64, off: u64, len: usize) -> Result<usize, Errno> {
        if let Some(n) = self.maps.get(&ino).and_then(|w| w.covers(off, len)) {
            self.stats.cache_hits += 1;
            return Ok(n);
        }
        self.stats.cache_misses += 1;
        self.live(ino)?;
        let (lo, hi) = map_window(off, len as u64);
        let req = Request::Map {
            ino,
            off: lo,
            len: hi - lo,
        };
        self.seq += 1;
        let (reply, bytes) = self.send_with(&req.encode(self.seq), |b| {
            (Reply::decode(b).map(|(_, r)| r), b.len())
        })?;
        let map = match reply {
            Ok(Reply::Map(m)) => m,
            Ok(Reply::Error(e)) => return Err(Errno(e)),
            _ => return Err(Errno::EIO),
        };
        self.keep_map(ino, (lo, hi), map, bytes);
        let n = self.maps[&ino].covers(off, len).ok_or(Errno::EIO)?;
        Ok(n)
    }

    /// Caches `map`, of the window `[lo, hi)` of `ino`, which came in `bytes` of a reply.
    pub(super) fn keep_map(&mut self, ino: u64, (lo, hi): (u64, u64), map: Extents, bytes: usize) {
        self.stats.map_fetches += 1;
        self.stats.map_runs_fetched += map.runs.len() as u64;
        self.stats.map_bytes_fetched += bytes as u64;
        self.maps.insert(
            ino,
            Window {
                off: lo,
                end: hi,
                map,
            },
        );
    }

    /// One attempt at a one-sided read on the cached map: `None` if the file changed.
    pub(super) fn read_one_sided(
        &mut self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<Option<usize>, Errno> {
        let n = self.cache_map(ino, off, buf.len())?;
        let m = &self.maps[&ino].map;
        if m.attr.kind() == S_IFDIR {
            return Err(Errno::EISDIR);
        }
        let (start, base) = (self.conn.welcome.data_start, self.conn.welcome.data_addr);
        let ranges = ranges(m, off, n, start, base);
        let change = m.change;
        let mut pieces = pieces(&mut buf[..n], ranges);
        if matches!(self.conn.path, DataPath::Pulled(_)) && n >= PULL_FROM && !pieces.is_empty() {
            if !self.pull_pieces(ino, change, &mut pieces)? {
                return Ok(None);
            }
        } else {
            if !pieces.is_empty() {
                self.conn
                    .node
                    .get_many(&self.conn.data, &mut pieces, &self.conn.data_key)
                    .map_err(errno)?;
            }
            if self.word(ino)? != change {
                return Ok(None);
            }
        }
        self.stats.one_sided_bytes += n as u64;
        Ok(Some(n))
    }

    /// Reserve, put, flush, commit.
    pub(super) fn write_one_sided(
        &mut self,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> Result<usize, Errno> {
        let Reply::Prepared { id, targets } = self.call(&Request::Prepare {
            ino,
            off,
            len: data.len() as u64,
        })?
        else {
            return Err(Errno::EIO);
        };
        let (start, base) = (self.conn.welcome.data_start, self.conn.welcome.data_addr);
        let put = (|| {
            for t in &targets {
                let src = data
                    .get(t.offset as usize..(t.offset + t.len) as usize)
                    .ok_or(Errno::EIO)?;
                if t.region_offset < start
                    || t.region_offset + t.len > start + self.conn.welcome.data_len
                {
                    return Err(Errno::EIO);
                }
                let remote = base + (t.region_offset - start);
                self.conn
                    .node
                    .put(&self.conn.data, src, remote, &self.conn.data_key)
                    .map_err(errno)?;
            }
            // Remote completion: every byte is in the server's memory before the commit.
            self.conn.node.flush(&self.conn.data).map_err(errno)
        })();
        if let Err(e) = put {
            let _ = self.call(&Request::Abort { id });
            return Err(e);
        }
        match self.call(&Request::Commit { id })? {
            Reply::Written(n) => {
                self.stats.one_sided_bytes += n;
                Ok(n as usize)
            }
            _ => Err(Errno::EIO),
        }
    }
}

/// (offset in the read's buffer, length, remote address) of each range to get for `n` bytes
/// at `off` of the file mapped by `m`, whose data area starts at region offset `start` and
/// remote address `base`: runs that follow each other both in the file and in the region are
/// one get (a file written in large pieces is mapped in many runs that lie end to end, and
/// every get is a transfer of its own: a system call each over cma).
fn ranges(m: &Extents, off: u64, n: usize, start: u64, base: u64) -> Vec<(usize, usize, u64)> {
    let mut ranges: Vec<(usize, usize, u64)> = Vec::new();
    // Runs are in file order: start at the first that ends past `off`.
    let first = m.runs.partition_point(|r| r.file_offset + r.len <= off);
    for r in &m.runs[first..] {
        if r.file_offset >= off + n as u64 {
            break;
        }
        let (lo, hi) = (
            r.file_offset.max(off),
            (r.file_offset + r.len).min(off + n as u64),
        );
        let (at, len) = ((lo - off) as usize, (hi - lo) as usize);
        let remote = base + (r.region_offset - start) + (lo - r.file_offset);
        match ranges.last_mut() {
            Some((a, l, rem)) if *a + *l == at && *rem + *l as u64 == remote => *l += len,
            _ => ranges.push((at, len, remote)),
        }
    }
    ranges
}

/// Cuts `out` into the pieces `ranges` name (each with its remote address), zeroing the holes
/// between them: a hole reads as zeros.
fn pieces(out: &mut [u8], ranges: Vec<(usize, usize, u64)>) -> Vec<(&mut [u8], u64)> {
    let mut pieces: Vec<(&mut [u8], u64)> = Vec::with_capacity(ranges.len());
    let mut rest = out;
    let mut at = 0;
    for (a, len, remote) in ranges {
        let (hole, tail) = std::mem::take(&mut rest).split_at_mut(a - at);
        hole.fill(0);
        let (piece, tail) = tail.split_at_mut(len);
        pieces.push((piece, remote));
        rest = tail;
        at = a + len;
    }
    rest.fill(0);
    pieces
}
