//! Which of the three data paths a connection takes ([`DataPath`]: one-sided, pulled, in
//! messages), and the reads and writes that choose among them; each path is a module of its
//! own ([`one_sided`](super::one_sided), [`pull`](super::pull),
//! [`in_messages`](super::in_messages)).

use switchyard_store::{Errno, MAX_FILE_SIZE};

use super::pull::PULL_FROM;
use super::{Inner, READ_RETRIES};
use crate::proto::MAX_BYTES;

/// How data moves between this client and the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataPath {
    /// One-sided gets and puts on the named transport (`rc_mlx5`, …): the server's CPU is
    /// not in the data path.
    OneSided(String),
    /// Large reads fetched by the named transport (`cma`) from the server's memory by
    /// rendezvous: the client names the blocks of its cached map, the server sends each as a
    /// message whose body UCX does not copy, and the client's transport fetches it (on one
    /// host, cross-memory attach: a system call of the client's). The server's CPU handles
    /// one small request per read and never copies the data. Smaller reads are gets, writes
    /// puts. Chosen where the transport moves large messages without copies but UCX offers
    /// no one-sided get on it (UCX 1.13 serves gets between processes of one host by
    /// emulation: the server's UCX copies them; 1.22 gets over `cma`), or by
    /// [`Client::connect_pulling`](super::Client::connect_pulling).
    Pulled(String),
    /// Inside requests and replies, because the transport (named) has no one-sided access.
    InMessages(String),
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataPath::OneSided(t) => write!(f, "one-sided over {t}"),
            DataPath::Pulled(t) => write!(
                f,
                "one-sided over {t} (reads of {} KiB or more pulled by rendezvous)",
                PULL_FROM >> 10
            ),
            DataPath::InMessages(t) => write!(f, "inside messages over {t} (no one-sided access)"),
        }
    }
}

/// The data path UCX's description of the data endpoint (`ucp_ep_print_info`) implies:
/// one-sided where a lane for gets and puts (role `rma#`) uses a transport other than `tcp`
/// (which UCX emulates with the server's CPU), or a bulk lane (role `rma_bw#`) does and
/// `bulk_one_sided` ([`Node::one_sided_over_bulk_lanes`]: this UCX runs gets and puts over
/// it); pulled where only a bulk lane, which rendezvous uses, does; in messages otherwise.
pub(super) fn data_path(description: &str, bulk_one_sided: bool) -> DataPath {
    // "lane[2]:  5:cma/memory.0 md[4] -> md[4]/cma/sysdev[255] rma_bw#0"
    let lanes: Vec<(&str, Vec<&str>)> = description
        .lines()
        .filter_map(|l| {
            let mut words = l.split_once("]:")?.1.split_whitespace();
            let transport = words.next()?.split_once(':')?.1.split('/').next()?;
            Some((transport, words.collect()))
        })
        .collect();
    let with = |role: &str| {
        lanes
            .iter()
            .filter(|(_, roles)| roles.iter().any(|r| r.starts_with(role)))
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
    };
    let (rma, bulk) = (with("rma#"), with("rma_bw#"));
    if let Some(t) = rma.iter().find(|t| **t != "tcp") {
        DataPath::OneSided(t.to_string())
    } else if let Some(t) = bulk.iter().find(|t| **t != "tcp") {
        if bulk_one_sided {
            DataPath::OneSided(t.to_string())
        } else {
            DataPath::Pulled(t.to_string())
        }
    } else {
        let t = rma.first().or(bulk.first()).unwrap_or(&"tcp");
        DataPath::InMessages(t.to_string())
    }
}

/// Writes up to this many bytes travel inside their request even where the data path is
/// one-sided: a one-sided write takes two requests (reserve, then commit) around its put,
/// an in-message write one, and the server's copy of a few pages costs less than the
/// second round trip (measured by `bench preload`: 4 KiB random writes).
pub(super) const SMALL_WRITE: usize = 16 << 10;

impl Inner {
    pub(super) fn read(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        if off > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        if !self.one_sided() {
            return self.read_in_messages(ino, off, buf);
        }
        // A pull carries at most MAX_BYTES: a longer read takes several.
        let window = match self.conn.path {
            DataPath::Pulled(_) => MAX_BYTES,
            _ => buf.len().max(1),
        };
        let mut done = 0;
        'windows: loop {
            let want = (buf.len() - done).min(window);
            let at = off + done as u64;
            for _ in 0..READ_RETRIES {
                if let Some(n) = self.read_one_sided(ino, at, &mut buf[done..done + want])? {
                    done += n;
                    if n < want || done == buf.len() {
                        return Ok(done);
                    }
                    continue 'windows;
                }
                self.stats.read_retries += 1;
                self.maps.remove(&ino);
            }
            let n = self.read_in_messages(ino, at, &mut buf[done..])?;
            return Ok(done + n);
        }
    }

    /// Writes `data` at `off`: one-sided (reserve, put, flush, commit: two requests) when it
    /// is larger than [`SMALL_WRITE`], else inside one request, whose bytes the server
    /// copies — one round trip instead of two, for a copy of a few pages.
    pub(super) fn write(&mut self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let end = off.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        self.maps.remove(&ino);
        self.attrs.remove(&ino);
        let mut done = 0;
        while done < data.len() {
            let piece = &data[done..(done + MAX_BYTES).min(data.len())];
            let at = off + done as u64;
            let written = if self.one_sided() && piece.len() > SMALL_WRITE {
                match self.write_one_sided(ino, at, piece) {
                    // No room for the whole piece's blocks: the server writes what fits.
                    Err(e) if e == Errno::ENOSPC => self.write_in_message(ino, at, piece),
                    r => r,
                }
            } else {
                self.write_in_message(ino, at, piece)
            };
            let n = match written {
                Ok(n) => n,
                // As write(2): the bytes written before the store filled up.
                Err(e) if e == Errno::ENOSPC && done > 0 => break,
                Err(e) => return Err(e),
            };
            done += n;
            if n < piece.len() {
                break;
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_path_is_read_from_the_one_sided_lanes() {
        // UCX 1.13's lanes between processes of one host, and 1.22's (with segment ids).
        let cma = "#  lane[0]:  3:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] am am_bw#0\n\
                   #  lane[2]:  5:cma/memory.0 md[4] -> md[4]/cma/sysdev[255] rma_bw#0\n";
        let cma_1_22 = "#  lane[0]:  4:sysv/memory.0 md[2] -> md[2]/sysv/sysdev[255] seg 4294967295 am\n\
                        #  lane[2]:  6:cma/memory.0 md[4] -> md[4]/cma/sysdev[255] seg 4294967295 rma_bw#0\n";
        for shm in [cma, cma_1_22] {
            assert_eq!(data_path(shm, false), DataPath::Pulled("cma".into()));
            assert_eq!(data_path(shm, true), DataPath::OneSided("cma".into()));
        }
        let rc = "#  lane[0]:  1:rc_mlx5/mlx5_0:1.0 md[1] -> md[1]/ib/sysdev[255] rma#0 rma_bw#0 am am_bw#0\n\
                  #  lane[1]:  2:tcp/eth0.0 md[0] -> md[0]/tcp/sysdev[255] rma#1\n";
        let tcp = "#  lane[0]:  0:tcp/lo.0 md[0] -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0\n";
        for bulk_one_sided in [false, true] {
            assert_eq!(
                data_path(rc, bulk_one_sided),
                DataPath::OneSided("rc_mlx5".into())
            );
            assert_eq!(
                data_path(tcp, bulk_one_sided),
                DataPath::InMessages("tcp".into()),
                "tcp's one-sided access is emulated whatever the version"
            );
            assert_eq!(
                data_path("", bulk_one_sided),
                DataPath::InMessages("tcp".into())
            );
        }
    }
}
