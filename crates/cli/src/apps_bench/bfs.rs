//! bfs: read a serialized graph from a file in 1 MiB chunks, build it in memory and run a
//! breadth-first search from vertex 0 (EasyIO's BFS: 1 MB reads, no writes).
//!
//! The file is the graph in compressed sparse rows, as the GAP benchmark suite serializes
//! graphs: vertex count and edge count (u32 little-endian each), the vertices' row offsets
//! (vertices + 1 of them), then the adjacency (each edge's destination), all u32
//! little-endian. Building the graph is decoding and checking those arrays.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use switchyard_store::{Fs, OpenFlags};

use super::harness::{App, Io, Scratch};

/// Bytes per read (a multiple of 4, so words never straddle chunks).
pub const CHUNK: usize = 1 << 20;
/// Vertices per graph.
pub const VERTICES: u32 = 1 << 17;
/// Directed edges per graph (4 MiB of adjacency).
pub const EDGES: u32 = 1 << 20;

/// The prepared graph files and each one's search result.
pub struct Bfs {
    paths: Vec<String>,
    /// (vertices reached, levels) per graph.
    expected: Vec<(u32, u32)>,
}

const HEADER: usize = 8;

impl Bfs {
    /// Writes `data` bytes of random graphs (untimed) and searches them in memory.
    pub fn prepare(fs: &Fs, data: u64) -> anyhow::Result<Bfs> {
        fs.mkdir("/bfs", 0o755)?;
        let file_len = HEADER + 4 * (VERTICES as usize + 1 + EDGES as usize);
        let graphs = (data as usize / file_len).max(1);
        let (mut paths, mut expected) = (Vec::new(), Vec::new());
        let mut s = scratch();
        for g in 0..graphs {
            let mut rng = StdRng::seed_from_u64(3 << 20 | g as u64);
            let edges: Vec<(u32, u32)> = (0..EDGES)
                .map(|_| (rng.random_range(0..VERTICES), rng.random_range(0..VERTICES)))
                .collect();
            let mut offsets = vec![0u32; VERTICES as usize + 1];
            for &(from, _) in &edges {
                offsets[from as usize + 1] += 1;
            }
            for v in 0..VERTICES as usize {
                offsets[v + 1] += offsets[v];
            }
            let mut adj = vec![0u32; EDGES as usize];
            let mut at = offsets.clone();
            for &(from, to) in &edges {
                adj[at[from as usize] as usize] = to;
                at[from as usize] += 1;
            }
            let mut bytes = Vec::with_capacity(file_len);
            for w in [VERTICES, EDGES].iter().chain(&offsets).chain(&adj) {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
            s.words[0].clear();
            s.words[0].extend(offsets.iter().chain(&adj));
            expected.push(search(VERTICES, &s.words[0]).expect("a well-formed graph"));
            let path = format!("/bfs/{g:04}.graph");
            let fd = fs.open(&path, OpenFlags::CREATE, 0o644)?;
            fs.pwrite(fd, &bytes, 0)?;
            fs.close(fd)?;
            paths.push(path);
        }
        Ok(Bfs { paths, expected })
    }
}

/// A worker's buffers: the read buffer and the graph's words (offsets, then adjacency), kept
/// across reads.
fn scratch() -> Scratch {
    let mut s = Scratch::with_bufs(&[CHUNK]);
    s.words = vec![vec![0u32; (VERTICES + 1 + EDGES) as usize]];
    s.words[0].clear();
    s
}

thread_local! {
    /// The search's levels and queue. A search never waits for I/O, so every task on a core
    /// uses the same arrays, and they stay in the core's cache from one search to the next
    /// (per-task arrays would be cold each time another task searched in between).
    static SEARCH: RefCell<(Vec<u32>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Checks the graph in `graph` (row offsets, then adjacency) and searches it breadth-first
/// from vertex 0; the vertices reached and the number of levels, or `None` if the arrays do
/// not describe a graph of `vertices` vertices.
fn search(vertices: u32, graph: &[u32]) -> Option<(u32, u32)> {
    SEARCH.with_borrow_mut(|(level, queue)| search_with(vertices, graph, level, queue))
}

fn search_with(
    vertices: u32,
    graph: &[u32],
    level: &mut Vec<u32>,
    queue: &mut Vec<u32>,
) -> Option<(u32, u32)> {
    let n = vertices as usize;
    let (offsets, adj) = graph.split_at_checked(n + 1)?;
    let well_formed = offsets[0] == 0
        && offsets[n] as usize == adj.len()
        && offsets.windows(2).all(|w| w[0] <= w[1])
        && adj.iter().all(|&w| w < vertices);
    if !well_formed {
        return None;
    }
    level.clear();
    level.resize(n, u32::MAX);
    queue.clear();
    level[0] = 0;
    queue.push(0);
    let (mut head, mut depth) = (0, 0);
    while head < queue.len() {
        let v = queue[head] as usize;
        head += 1;
        let next = level[v] + 1;
        for &w in &adj[offsets[v] as usize..offsets[v + 1] as usize] {
            if level[w as usize] == u32::MAX {
                level[w as usize] = next;
                depth = depth.max(next);
                queue.push(w);
            }
        }
    }
    Some((queue.len() as u32, depth + 1))
}

impl App for Bfs {
    fn items(&self) -> usize {
        self.paths.len()
    }

    fn scratch(&self) -> Scratch {
        scratch()
    }

    async fn op(&self, io: &Io, _: usize, item: usize, s: &mut Scratch) -> anyhow::Result<u64> {
        let path = &self.paths[item];
        let fd = io.meta(|fs| fs.open(path, OpenFlags::READ, 0))?;
        let mut buf = std::mem::take(&mut s.bufs[0]);
        s.words[0].clear();
        let (mut off, mut vertices) = (0u64, None);
        loop {
            let (n, b) = io.pread(fd, buf, off).await?;
            buf = b;
            if n == 0 {
                break;
            }
            let mut words = buf[..n]
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")));
            if off == 0 {
                vertices = words.next();
                words.next();
            }
            s.words[0].extend(words);
            off += n as u64;
        }
        s.bufs[0] = buf;
        io.meta(|fs| fs.close(fd))?;
        let got = vertices
            .filter(|&v| v > 0)
            .and_then(|v| search(v, &s.words[0]))
            .ok_or_else(|| anyhow::anyhow!("{path} is not a serialized graph"))?;
        anyhow::ensure!(
            got == self.expected[item],
            "BFS of {path} reached {got:?} (vertices, levels), expected {:?}",
            self.expected[item]
        );
        Ok(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_counts_reached_vertices_and_levels() {
        // 0 → 1, 0 → 2, 2 → 3; vertex 4 is unreachable.
        assert_eq!(search(5, &[0, 2, 2, 3, 3, 3, 1, 2, 3]), Some((4, 3)));
    }

    #[test]
    fn arrays_that_are_not_a_graph_are_refused() {
        // A destination beyond the vertices.
        assert_eq!(search(2, &[0, 1, 1, 7]), None);
        // Offsets that go backwards.
        assert_eq!(search(2, &[0, 1, 0, 1]), None);
        // Too short for the offsets.
        assert_eq!(search(4, &[0, 1]), None);
    }
}
