//! bfs: read a serialized graph from a file in 1 MiB chunks, build it in memory (compressed
//! sparse rows) and run a breadth-first search from vertex 0 (EasyIO's BFS: 1 MB reads, no
//! writes).
//!
//! File format: vertex count and edge count (u32 little-endian each), then each edge as
//! source and destination (u32 little-endian each).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use switchyard_store::{Fs, OpenFlags};

use super::harness::{App, Io, Scratch};

/// Bytes per read (a multiple of 8, so edges never straddle chunks).
pub const CHUNK: usize = 1 << 20;
/// Vertices per graph.
pub const VERTICES: u32 = 1 << 17;
/// Directed edges per graph (8 MiB of edges).
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
        let file_len = HEADER + EDGES as usize * 8;
        let graphs = (data as usize / file_len).max(1);
        let (mut paths, mut expected) = (Vec::new(), Vec::new());
        let mut s = scratch();
        for g in 0..graphs {
            let mut rng = StdRng::seed_from_u64(3 << 20 | g as u64);
            let mut bytes = Vec::with_capacity(file_len);
            bytes.extend_from_slice(&VERTICES.to_le_bytes());
            bytes.extend_from_slice(&EDGES.to_le_bytes());
            s.words[0].clear();
            for _ in 0..2 * EDGES {
                let v = rng.random_range(0..VERTICES);
                bytes.extend_from_slice(&v.to_le_bytes());
                s.words[0].push(v);
            }
            expected.push(search(VERTICES, &mut s));
            let path = format!("/bfs/{g:04}.graph");
            let fd = fs.open(&path, OpenFlags::CREATE, 0o644)?;
            fs.pwrite(fd, &bytes, 0)?;
            fs.close(fd)?;
            paths.push(path);
        }
        Ok(Bfs { paths, expected })
    }
}

fn scratch() -> Scratch {
    let mut s = Scratch::with_bufs(&[CHUNK]);
    // Edges (2 words each), row offsets, adjacency, levels, queue.
    let lens = [2 * EDGES, VERTICES + 1, EDGES, VERTICES, VERTICES];
    s.words = lens.iter().map(|&n| vec![0u32; n as usize]).collect();
    s.words[0].clear();
    s
}

/// Builds the graph whose edges are in `s.words[0]` as compressed sparse rows and searches
/// it breadth-first from vertex 0; the vertices reached and the number of levels.
fn search(vertices: u32, s: &mut Scratch) -> (u32, u32) {
    let n = vertices as usize;
    let [edges, offsets, adj, level, queue] = &mut s.words[..] else {
        unreachable!("scratch() makes five word buffers")
    };
    offsets.clear();
    offsets.resize(n + 1, 0);
    for e in edges.chunks_exact(2) {
        offsets[e[0] as usize + 1] += 1;
    }
    for v in 0..n {
        offsets[v + 1] += offsets[v];
    }
    adj.resize(edges.len() / 2, 0);
    // Fill with `level` as the per-row cursor, then reuse it for levels.
    level.clear();
    level.extend_from_slice(&offsets[..n]);
    for e in edges.chunks_exact(2) {
        let at = &mut level[e[0] as usize];
        adj[*at as usize] = e[1];
        *at += 1;
    }
    level.fill(u32::MAX);
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
    (queue.len() as u32, depth + 1)
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
        let vertices = vertices.ok_or_else(|| anyhow::anyhow!("{path} is empty"))?;
        anyhow::ensure!(
            vertices > 0 && s.words[0].iter().all(|&v| v < vertices),
            "{path} names a vertex beyond its {vertices}"
        );
        let got = search(vertices, s);
        anyhow::ensure!(
            got == self.expected[item],
            "BFS of {path} reached {got:?} (vertices, levels), expected {:?}",
            self.expected[item]
        );
        Ok(off)
    }
}
