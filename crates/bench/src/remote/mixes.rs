//! 1–4 clients at once on file-server-like and mail-server-like mixes (RIMFS Fig. 11, after
//! Filebench's fileserver and varmail), each client a connection of its own working in a
//! directory of its own, on the one served store.
//!
//! - `fileserver`: create a file and write 128 KiB, append 16 KiB, read it whole, stat it,
//!   and delete the oldest once 50 are kept.
//! - `varmail`: create a message and append 16 KiB with an fsync, open it again and read it
//!   whole, delete the oldest once 50 are kept.
//!
//! Every read checks its bytes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use switchyard_remote::{Client, Key};
use switchyard_store::{Errno, Files, OpenFlags};

/// The mixes.
const MIXES: [&str; 2] = ["fileserver", "varmail"];
/// Files each client keeps before it deletes the oldest.
const KEEP: usize = 50;

/// One mix at one client count.
#[derive(Serialize)]
pub(super) struct Mixed {
    pub mix: &'static str,
    pub clients: usize,
    /// Operations (each file-system call) per second, all clients together.
    pub ops_per_s: f64,
    /// Data bytes moved per second, all clients together.
    pub mib_per_s: f64,
}

/// The bytes of file `n` of client `c`, `len` long.
fn content(c: usize, n: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 ^ n.wrapping_mul(31) ^ c as u64) as u8)
        .collect()
}

/// One client running `mix` in `/c<id>` until `until`; returns (operations, bytes).
fn run_client(client: &Client, id: usize, mix: &str, until: Instant) -> Result<(u64, u64), Errno> {
    let dir = format!("/{mix}-c{id}");
    client.mkdir(&dir, 0o755)?;
    let (mut ops, mut bytes, mut n) = (1u64, 0u64, 0u64);
    let mut kept = VecDeque::new();
    let (first, more) = if mix == "fileserver" {
        (128 << 10, 16 << 10)
    } else {
        (0, 16 << 10)
    };
    while Instant::now() < until {
        let path = format!("{dir}/f{n}");
        let whole = content(id, n, first + more);
        let fd = client.open(&path, OpenFlags::CREATE, 0o644)?;
        if first > 0 {
            client.write(fd, &whole[..first])?;
        }
        client.close(fd)?;
        let append = OpenFlags {
            write: true,
            append: true,
            ..OpenFlags::default()
        };
        let fd = client.open(&path, append, 0)?;
        client.write(fd, &whole[first..])?;
        if mix == "varmail" {
            client.fsync(fd)?;
            ops += 1;
        }
        client.close(fd)?;
        let read = client.read_all(&path)?;
        if read != whole {
            return Err(Errno::EIO);
        }
        client.stat(&path)?;
        ops += 7;
        bytes += 2 * whole.len() as u64;
        kept.push_back(path);
        if kept.len() > KEEP {
            client.unlink(&kept.pop_front().expect("kept"))?;
            ops += 1;
        }
        n += 1;
    }
    Ok((ops, bytes))
}

/// Both mixes with 1 to 4 clients, each for `secs` seconds.
pub(super) fn measure(addr: SocketAddr, key: &Key, secs: f64) -> anyhow::Result<Vec<Mixed>> {
    let mut out = Vec::new();
    for mix in MIXES {
        for clients in 1..=4 {
            let conns: Vec<Client> = (0..clients)
                .map(|_| Client::connect(addr, key, true))
                .collect::<Result<_, _>>()?;
            let until = Instant::now() + Duration::from_secs_f64(secs);
            let t0 = Instant::now();
            let done: Vec<Result<(u64, u64), Errno>> = std::thread::scope(|s| {
                let runs: Vec<_> = conns
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let id = clients * 10 + i;
                        s.spawn(move || run_client(c, id, mix, until))
                    })
                    .collect();
                runs.into_iter()
                    .map(|r| r.join().expect("client thread"))
                    .collect()
            });
            let wall = t0.elapsed().as_secs_f64();
            let (mut ops, mut bytes) = (0, 0);
            for d in done {
                let (o, b) = d.map_err(|e| anyhow::anyhow!("{mix} with {clients}: {e}"))?;
                ops += o;
                bytes += b;
            }
            out.push(Mixed {
                mix,
                clients,
                ops_per_s: ops as f64 / wall,
                mib_per_s: bytes as f64 / wall / (1 << 20) as f64,
            });
        }
    }
    Ok(out)
}

/// Prints the mixes, each client count against one client.
pub(super) fn print(rows: &[Mixed]) {
    println!("mixes, every client a connection of its own (one-sided data path):");
    println!(
        "{:>11} {:>8} {:>10} {:>9} {:>12}",
        "mix", "clients", "ops/s", "MiB/s", "÷ 1 client"
    );
    for r in rows {
        let one = rows
            .iter()
            .find(|x| x.mix == r.mix && x.clients == 1)
            .map_or(1.0, |x| x.ops_per_s);
        println!(
            "{:>11} {:>8} {:>10.0} {:>9.1} {:>12.2}",
            r.mix,
            r.clients,
            r.ops_per_s,
            r.mib_per_s,
            r.ops_per_s / one
        );
    }
}
