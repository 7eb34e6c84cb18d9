//! bfs: read a serialized graph from a file in 1 MiB chunks, build it in memory and run a
//! breadth-first search from vertex 0 (EasyIO's BFS: 1 MB reads, no writes). Every chunk is
//! read before the graph is built, so building and searching run without waiting for I/O and
//! use per-core arrays (see [`GRAPH`]).
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
        let graphs = (data as usize / FILE_LEN).max(1);
        let (mut paths, mut expected) = (Vec::new(), Vec::new());
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
            let mut bytes = Vec::with_capacity(FILE_LEN);
            for w in [VERTICES, EDGES].iter().chain(&offsets).chain(&adj) {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
            expected.push(build_and_search([&bytes].iter()).expect("a well-formed graph"));
            let path = format!("/bfs/{g:04}.graph");
            let fd = fs.open(&path, OpenFlags::CREATE, 0o644)?;
            fs.pwrite(fd, &bytes, 0)?;
            fs.close(fd)?;
            paths.push(path);
        }
        Ok(Bfs { paths, expected })
    }
}

/// Bytes of one graph file.
const FILE_LEN: usize = HEADER + 4 * (VERTICES as usize + 1 + EDGES as usize);

/// A worker's buffers: the file's chunks as read, kept until the whole graph is in.
fn scratch() -> Scratch {
    Scratch::with_bufs(&vec![CHUNK; FILE_LEN.div_ceil(CHUNK)])
}

thread_local! {
    /// The graph's words (offsets, then adjacency), the search's levels and its queue. Building
    /// and searching never wait for I/O, so every task on a core uses the same arrays, and they
    /// stay in the core's cache from one graph to the next (per-task arrays would be cold each
    /// time another task had built and searched its graph in between).
    static GRAPH: RefCell<[Vec<u32>; 3]> = const { RefCell::new([Vec::new(), Vec::new(), Vec::new()]) };
}

/// Decodes the graph file in `chunks` (the file's bytes, in order) and searches it: see
/// `search`; `None` if the bytes are not a serialized graph.
fn build_and_search(chunks: impl Iterator<Item = impl AsRef<[u8]>>) -> Option<(u32, u32)> {
    GRAPH.with_borrow_mut(|[graph, level, queue]| {
        graph.clear();
        for c in chunks {
            let c = c.as_ref();
            graph.extend(
                c.chunks_exact(4)
                    .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes"))),
            );
        }
        let (&vertices, graph) = graph.split_first()?;
        let (_edges, graph) = graph.split_first()?;
        if vertices == 0 {
            return None;
        }
        search_with(vertices, graph, level, queue)
    })
}

/// Checks the graph in `graph` (row offsets, then adjacency) and searches it breadth-first
/// from vertex 0; the vertices reached and the number of levels, or `None` if the arrays do
/// not describe a graph of `vertices` vertices.
#[cfg(test)]
fn search(vertices: u32, graph: &[u32]) -> Option<(u32, u32)> {
    search_with(vertices, graph, &mut Vec::new(), &mut Vec::new())
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
        // Every chunk into its own buffer; the graph is built once all are in.
        let (mut off, mut chunks) = (0u64, 0);
        loop {
            anyhow::ensure!(chunks < s.bufs.len(), "{path} is larger than a graph file");
            let buf = std::mem::take(&mut s.bufs[chunks]);
            let (n, buf) = io.pread(fd, buf, off).await?;
            s.bufs[chunks] = buf;
            off += n as u64;
            if n == 0 {
                break;
            }
            chunks += 1;
            if n < CHUNK {
                break;
            }
        }
        io.meta(|fs| fs.close(fd))?;
        let len = off as usize;
        let got = build_and_search(
            s.bufs[..chunks]
                .iter()
                .enumerate()
                .map(|(i, b)| &b[..(len - i * CHUNK).min(CHUNK)]),
        )
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
    fn a_file_read_in_chunks_builds_the_graph_it_serializes() {
        // 5 vertices, 3 edges: 0 → 1, 0 → 2, 2 → 3.
        let words = [5u32, 3, 0, 2, 2, 3, 3, 3, 1, 2, 3];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(build_and_search([&bytes].iter()), Some((4, 3)));
        assert_eq!(build_and_search(bytes.chunks(8)), Some((4, 3)));
        // A vertex count of zero, or a file cut short, is not a graph.
        assert_eq!(build_and_search([&[0u8; 8][..]].iter()), None);
        assert_eq!(build_and_search(bytes[..24].chunks(8)), None);
        assert_eq!(build_and_search(bytes[..4].chunks(8)), None);
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
