//! Waiting for the server's replies on a connection's endpoints.

use std::time::{Duration, Instant};

use switchyard_store::Errno;
use switchyard_ucx::{Endpoint, Node};

use super::errno;
use crate::proto::Reply;

/// Waits for a reply on `ep` (to request `seq`, or any when `None`), with a deadline.
pub(super) fn wait_reply(
    node: &Node,
    ep: &Endpoint,
    seq: Option<u64>,
    timeout: Duration,
) -> Result<(u64, Reply), Errno> {
    loop {
        let body = wait_raw(node, ep, seq, timeout)?;
        if let Ok(r) = Reply::decode(&body) {
            return Ok(r);
        }
    }
}

/// The next message from `ep` that answers request `seq` (any, with `None`), undecoded.
fn wait_raw(
    node: &Node,
    ep: &Endpoint,
    seq: Option<u64>,
    timeout: Duration,
) -> Result<Vec<u8>, Errno> {
    wait_with(node, ep, seq, timeout, <[u8]>::to_vec)
}

/// Lends `f` the body of the next message from `ep` that answers request `seq` (any, with
/// `None`), undecoded and where it lies (a large body in UCX's own buffer), and returns what
/// `f` made of it.
pub(super) fn wait_with<R>(
    node: &Node,
    ep: &Endpoint,
    seq: Option<u64>,
    timeout: Duration,
    mut f: impl FnMut(&[u8]) -> R,
) -> Result<R, Errno> {
    let deadline = Instant::now() + timeout;
    loop {
        while let Some(mut m) = node.next_message() {
            // A reply has no header (pulled pieces have one: those of an abandoned pull).
            if (m.from() != 0 && m.from() != ep.id()) || !m.header.is_empty() {
                continue;
            }
            let answer = node
                .with_body(&mut m, |body| {
                    // Every reply starts with its kind and then its request's sequence number.
                    let of = body
                        .get(1..9)
                        .map(|b| u64::from_le_bytes(b.try_into().expect("8")));
                    (of.is_some() && seq.is_none_or(|q| Some(q) == of)).then(|| f(body))
                })
                .map_err(errno)?;
            if let Some(r) = answer {
                return Ok(r);
            }
        }
        wait_more(node, ep, deadline)?;
    }
}

/// Waits a moment for more to arrive on `node`; fails if `ep` (the control endpoint) failed
/// or `deadline` passed.
pub(super) fn wait_more(node: &Node, ep: &Endpoint, deadline: Instant) -> Result<(), Errno> {
    if !node.is_open(ep) {
        return Err(Errno(libc::ENOTCONN));
    }
    if Instant::now() > deadline {
        return Err(Errno(libc::ETIMEDOUT));
    }
    node.wait(Duration::from_millis(20));
    Ok(())
}
