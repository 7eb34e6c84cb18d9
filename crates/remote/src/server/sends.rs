//! Messages on their way to clients: pulls' pieces and replies that did not leave at once,
//! kept (with the grace over the blocks they are sent from) until they are taken, and the
//! clients too slow to take them cut off.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use switchyard_store::Grace;
use switchyard_ucx::{Error as UcxError, Node, Sending};

use super::{Server, COPIED_PIECE};
use crate::proto::{part_header, Reply, Request, MAX_BYTES};

/// Messages one client may have on their way from this thread (pulls and replies): a pull
/// beyond them is refused (`EBUSY`), and a client with that many replies it has not taken is
/// disconnected (a client waits for each reply before its next request).
const SENDS_IN_FLIGHT: usize = 16;

/// A message its client has not taken by then (a pull's pieces not fetched, a reply not
/// received) fails the client, which is then disconnected: it holds UCX's requests, and
/// with them blocks of the data area, from reuse.
const SEND_DEADLINE: Duration = Duration::from_secs(10);

/// Messages on their way to a client (a pull's pieces, or a reply), and the grace that keeps
/// the blocks they are sent from until they are taken.
pub(super) struct Outgoing<'s, 'n> {
    /// The client (its control endpoint's id).
    peer: usize,
    parts: Vec<Sending<'n>>,
    /// Keeps the blocks the parts are sent from out of reuse (none for a reply built in a
    /// buffer of its own).
    _grace: Option<Grace<'s>>,
    /// Bytes of a pull, counted once fetched (0 for a reply).
    pulled: u64,
    since: Instant,
}

impl<'s, 'n> Server<'s, '_, 'n> {
    /// Starts a [`Request::Pull`]: checks it, takes a grace and checks the client's map is
    /// current, then sends each range of the data area as a message of its own, read where
    /// it lies (by rendezvous when large: the client's transport fetches it, and this thread
    /// never copies it). Anything malformed, from an unknown token, or beyond the client's
    /// messages in flight is dropped or refused.
    pub(super) fn pull(&mut self, node: &'n Node, b: &[u8]) {
        let Ok((seq, req)) = Request::decode(b) else {
            return;
        };
        let Request::Pull {
            token,
            ino,
            change,
            ranges,
        } = req
        else {
            return;
        };
        let Some(&id) = self.tokens.get(&token) else {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(ep) = self.peers.get(&id).and_then(|p| p.data.as_ref()) else {
            return;
        };
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let (base, _, len) = self.data;
        let mut total = 0u64;
        let inside = ranges.iter().all(|&(off, n)| {
            total = total.saturating_add(n);
            off.checked_add(n).is_some_and(|end| end <= len)
        });
        let busy = self.in_flight(id) >= SENDS_IN_FLIGHT;
        // The grace first, then the word: a block the file gave up after this check is freed
        // into the grace (the store bumps the word before it frees).
        let grace = self.store.grace();
        let refusal = if !inside || total > MAX_BYTES as u64 {
            Some(Reply::Error(libc::EINVAL))
        } else if busy {
            Some(Reply::Error(libc::EBUSY))
        } else if self.store.changes().word(ino) != change {
            Some(Reply::Stale)
        } else {
            None
        };
        if let Some(r) = refusal {
            let sent = node.send_owned(ep, r.encode(seq));
            return self.answer_pull(node, id, sent);
        }
        let mut p = Outgoing {
            peer: id,
            parts: Vec::with_capacity(ranges.len()),
            _grace: Some(grace),
            pulled: total,
            since: Instant::now(),
        };
        for (i, &(off, n)) in ranges.iter().enumerate() {
            // SAFETY: the range lies inside the data area (checked above), which the store's
            // mapping keeps mapped for longer than `node` lives; the grace keeps its blocks'
            // bytes (those of the file, as the word said) until the send is finished.
            let sent = unsafe {
                node.send_lent(
                    ep,
                    part_header(seq, i as u32),
                    Vec::new(),
                    &[(base.wrapping_add(off as usize), n as usize)],
                    n > COPIED_PIECE as u64,
                )
            };
            match sent {
                Ok(s) => p.parts.push(s),
                Err(_) => {
                    let sent = node.send_owned(ep, Reply::Error(libc::EIO).encode(seq));
                    self.outgoing.push(p);
                    return self.answer_pull(node, id, sent);
                }
            }
        }
        self.outgoing.push(p);
    }

    /// Keeps the answer to a pull of client `id` until it is taken, as replies are kept; a
    /// client with too many messages it has not taken is cut off.
    pub(super) fn answer_pull(
        &mut self,
        node: &'n Node,
        id: usize,
        sent: Result<Sending<'n>, UcxError>,
    ) {
        let kept = sent.is_ok_and(|s| self.keep(node, id, s, None));
        if !kept {
            if let Some(peer) = self.peers.remove(&id) {
                self.cut_off(node, peer);
            }
        }
    }

    /// Messages on their way to client `id`.
    pub(super) fn in_flight(&self, id: usize) -> usize {
        self.outgoing.iter().filter(|p| p.peer == id).count()
    }

    /// Keeps `s`, a message on its way to client `id` sent from blocks `grace` keeps, until
    /// it is taken; returns false if the client already has [`SENDS_IN_FLIGHT`] messages it
    /// has not taken (it is to be disconnected).
    pub(super) fn keep(
        &mut self,
        node: &'n Node,
        id: usize,
        mut s: Sending<'n>,
        grace: Option<Grace<'s>>,
    ) -> bool {
        match node.sent(&mut s) {
            Some(r) => {
                // The largest reply buffer is kept for the next read's reply.
                if let Some(b) = s.reclaim().filter(|b| b.capacity() > self.out.capacity()) {
                    self.out = b;
                }
                r.is_ok()
            }
            None => {
                let room = self.in_flight(id) < SENDS_IN_FLIGHT;
                self.outgoing.push(Outgoing {
                    peer: id,
                    parts: vec![s],
                    _grace: grace,
                    pulled: 0,
                    since: Instant::now(),
                });
                room
            }
        }
    }

    /// Ends every message that was taken (its grace with it). A message past its deadline
    /// disconnects its client.
    pub(super) fn finish_sends(&mut self, node: &'n Node) {
        let mut late = Vec::new();
        let mut i = 0;
        while i < self.outgoing.len() {
            let p = &mut self.outgoing[i];
            let mut done = true;
            let mut failed = false;
            for s in &mut p.parts {
                match node.sent(s) {
                    None => done = false,
                    Some(r) => failed |= r.is_err(),
                }
            }
            if !done {
                if p.since.elapsed() > SEND_DEADLINE {
                    late.push(p.peer);
                }
                i += 1;
                continue;
            }
            let p = self.outgoing.swap_remove(i);
            if !failed {
                self.stats
                    .pulled_bytes
                    .fetch_add(p.pulled, Ordering::Relaxed);
            }
        }
        for id in late {
            if let Some(peer) = self.peers.remove(&id) {
                self.cut_off(node, peer);
            }
        }
    }

    /// Drops what was on its way to client `id`, whose endpoints are closed (which ended
    /// their sends).
    pub(super) fn drop_sends(&mut self, id: usize) {
        self.outgoing.retain(|q| q.peer != id);
    }
}
