//! Pulled reads ([`DataPath::Pulled`](super::DataPath::Pulled)): one request names pieces of
//! the server's data area and the change word of the map they come from; if the map is
//! current, each comes back as a message of its own whose body the client's transport fetches
//! straight into the caller's buffer (the server keeps the blocks from reuse until then).

use std::time::{Duration, Instant};

use switchyard_store::Errno;
use switchyard_ucx::{Endpoint, Node};

use super::wait::wait_more;
use super::{errno, Inner};
use crate::proto::{part_of, Reply, Request, MAX_PULL_RANGES};

/// Reads of at least this many bytes are pulled where the data path pulls; smaller ones are
/// gets (which UCX 1.13 serves by emulation on one host: the server's UCX copies them as it
/// progresses), because for them the pull's request costs the server more than the copy
/// (measured by `bench remote` on UCX 1.13: at 4 KiB and 128 KiB the server's CPU per GiB
/// is lower with gets, at 1 MiB and 2 MiB 2–6× lower with pulls).
pub(super) const PULL_FROM: usize = 256 << 10;

/// Sends `req` (a [`Request::Pull`], sequence number `seq`) on the data endpoint and fills
/// `pieces` (in the request's order) from the pieces that come back: true once all are in,
/// false if the server found the map stale (nothing is sent then). Fails if the server
/// refuses, or goes away (the control endpoint `ctl` fails), or nothing completes within
/// `timeout`.
pub(super) fn pull(
    node: &Node,
    (data, ctl): (&Endpoint, &Endpoint),
    timeout: Duration,
    req: &Request,
    seq: u64,
    pieces: &mut [(&mut [u8], u64)],
) -> Result<bool, Errno> {
    node.send(data, &[], &req.encode(seq)).map_err(errno)?;
    let mut arrived = vec![false; pieces.len()];
    let mut left = pieces.len();
    let deadline = Instant::now() + timeout;
    loop {
        while let Some(mut m) = node.next_message() {
            if let Some((of, i)) = part_of(&m.header) {
                let i = i as usize;
                if of != seq {
                    continue; // a piece of an earlier pull, abandoned: dropping it frees it
                }
                let (Some(piece), Some(seen)) = (pieces.get_mut(i), arrived.get_mut(i)) else {
                    return Err(Errno::EIO);
                };
                if std::mem::replace(seen, true) {
                    return Err(Errno::EIO);
                }
                node.body_into(&mut m, piece.0).map_err(|_| Errno::EIO)?;
                left -= 1;
                continue;
            }
            let body = node.body(&mut m).map_err(errno)?;
            match Reply::decode(&body) {
                Ok((of, Reply::Stale)) if of == seq => return Ok(false),
                Ok((of, Reply::Error(e))) if of == seq => return Err(Errno(e)),
                _ => {}
            }
        }
        if left == 0 {
            return Ok(true);
        }
        wait_more(node, ctl, deadline)?;
    }
}

impl Inner {
    /// Pulls `pieces` (each with its remote address) of `ino` from the server, in requests of
    /// at most [`MAX_PULL_RANGES`]: false if the map they come from (change word `change`)
    /// is no longer the file's.
    pub(super) fn pull_pieces(
        &mut self,
        ino: u64,
        change: u64,
        pieces: &mut [(&mut [u8], u64)],
    ) -> Result<bool, Errno> {
        let base = self.conn.welcome.data_addr;
        // The server sends the pieces only if the map is still the file's (`change`).
        for group in pieces.chunks_mut(MAX_PULL_RANGES) {
            self.seq += 1;
            self.stats.requests += 1;
            let req = Request::Pull {
                token: self.conn.token,
                ino,
                change,
                ranges: group
                    .iter()
                    .map(|(b, at)| (at - base, b.len() as u64))
                    .collect(),
            };
            let link = (&self.conn.data, &self.conn.ctl);
            if !pull(&self.conn.node, link, self.timeout, &req, self.seq, group)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
