//! Active messages: sending, the callback that queues them, and taking their bodies.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr;

use super::{is_err, status_of, Body, Endpoint, Events, Incoming, Node, AM_ID};
use crate::error::{check, Error};
use crate::sys;

/// A received message: a header and a body, from an endpoint of this node.
pub struct Message<'n> {
    /// The header bytes.
    pub header: Vec<u8>,
    body: Body,
    from: usize,
    worker: sys::ucp_worker_h,
    _node: PhantomData<&'n Node>,
}

impl Message<'_> {
    /// The id of the endpoint it came on (answer with [`Node::send`] on that endpoint).
    pub fn from(&self) -> usize {
        self.from
    }

    /// The body's length in bytes.
    pub fn body_len(&self) -> usize {
        match &self.body {
            Body::Here(v) => v.len(),
            Body::Rendezvous(_, n) | Body::Held(_, n) => *n,
            Body::Gone => 0,
        }
    }
}

impl Drop for Message<'_> {
    fn drop(&mut self) {
        if let Body::Rendezvous(desc, _) | Body::Held(desc, _) = self.body {
            // SAFETY: `desc` is a descriptor the callback kept (it returned UCS_INPROGRESS)
            // and nothing received or released it; the worker outlives the message (its
            // lifetime is tied to the node's).
            unsafe { sys::ucp_am_data_release(self.worker, desc) };
        }
    }
}

/// Bodies larger than this stay in UCX's buffer until taken (where UCX allows it), so a
/// large message is copied once, by its reader, instead of twice; smaller ones are copied
/// at once, which returns UCX's buffer sooner.
const HOLD_ABOVE: usize = 16 << 10;

pub(super) unsafe extern "C" fn on_message(
    arg: *mut c_void,
    header: *const c_void,
    header_len: usize,
    data: *mut c_void,
    len: usize,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: `arg` is the node's boxed `Events` (registered with the handler); `param` is
    // valid for the callback's duration (UCX's contract).
    let (events, param) = unsafe { (&*(arg as *const Events), &*param) };
    let copy = |p: *const c_void, n: usize| {
        if n == 0 {
            Vec::new()
        } else {
            // SAFETY: UCX passes `n` readable bytes at `p` for the callback's duration.
            unsafe { std::slice::from_raw_parts(p as *const u8, n) }.to_vec()
        }
    };
    let from = if param.recv_attr & sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP as u64 != 0 {
        param.reply_ep as usize
    } else {
        0
    };
    let rendezvous = param.recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
    // A large body UCX lets us keep is read where it lies rather than copied here.
    let holdable = param.recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_DATA as u64 != 0;
    let (body, status) = if rendezvous {
        (Body::Rendezvous(data, len), sys::UCS_INPROGRESS)
    } else if holdable && len > HOLD_ABOVE {
        (Body::Held(data, len), sys::UCS_INPROGRESS)
    } else {
        (Body::Here(copy(data, len)), sys::UCS_OK)
    };
    events.messages.borrow_mut().push_back(Incoming {
        header: copy(header, header_len),
        body,
        from,
    });
    status
}

impl Node {
    /// Sends a message (header and body) on `ep` and waits until both buffers are reusable.
    /// The receiver can answer on the endpoint the message came from.
    pub fn send(&self, ep: &Endpoint, header: &[u8], body: &[u8]) -> Result<(), Error> {
        self.usable("send", ep)?;
        let mut flags = sys::UCP_AM_SEND_FLAG_REPLY;
        if self.eager(ep) {
            flags |= sys::UCP_AM_SEND_FLAG_EAGER;
        }
        // SAFETY: `header` and `body` stay borrowed until `complete` returns, which is after
        // UCX is done with them.
        let req = unsafe { start_send(ep, header, body.as_ptr(), body.len(), flags, None) };
        self.complete("send", req, Some(ep))
    }

    /// Whether messages on `ep` are sent eagerly whatever their size: where its messages go
    /// over `tcp`. There UCX 1.13 sends anything over 8 KiB by rendezvous, which adds a round
    /// trip and moves the body in a put that the peer's UCX fragments again; eager fragments
    /// stream back to back (`bench remote --sshfs`: 1 MiB reads and writes over a veth pair,
    /// docs/remote.md). Elsewhere (shared memory, RDMA) rendezvous is UCX's zero-copy path,
    /// and UCX chooses. Decided from the endpoint's lanes at its first send.
    fn eager(&self, ep: &Endpoint) -> bool {
        let known = self.endpoints.borrow().get(&ep.id()).and_then(|e| e.2);
        if let Some(eager) = known {
            return eager;
        }
        let eager = messages_over_tcp(&self.describe(ep));
        if let Some(e) = self.endpoints.borrow_mut().get_mut(&ep.id()) {
            e.2 = Some(eager);
        }
        eager
    }

    /// The next message received, if any (progress first).
    pub fn next_message(&self) -> Option<Message<'_>> {
        let m = self.events.messages.borrow_mut().pop_front()?;
        Some(Message {
            header: m.header,
            body: m.body,
            from: m.from,
            worker: self.worker,
            _node: PhantomData,
        })
    }

    /// Takes a message's body, fetching it from the sender if it was too large to come with
    /// the header.
    pub fn body(&self, m: &mut Message<'_>) -> Result<Vec<u8>, Error> {
        match std::mem::replace(&mut m.body, Body::Gone) {
            Body::Here(v) => Ok(v),
            Body::Gone => Ok(Vec::new()),
            held @ Body::Held(..) => {
                m.body = held;
                self.with_body(m, <[u8]>::to_vec)
            }
            rendezvous @ Body::Rendezvous(_, len) => {
                m.body = rendezvous;
                let mut buf = vec![0u8; len];
                self.body_into(m, &mut buf)?;
                Ok(buf)
            }
        }
    }

    /// Lends a message's body to `f` and takes it: a body UCX let the node keep is read in
    /// place (no copy before `f`'s own), then given back to UCX; one still at the sender is
    /// fetched first, as [`Node::body`] does.
    pub fn with_body<R>(
        &self,
        m: &mut Message<'_>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, Error> {
        match std::mem::replace(&mut m.body, Body::Gone) {
            Body::Held(desc, len) => {
                // SAFETY: UCX keeps the `len` bytes at `desc` until they are released, which
                // happens only below, after `f` returns (the message no longer names them).
                let bytes = unsafe { std::slice::from_raw_parts(desc as *const u8, len) };
                let r = f(bytes);
                // SAFETY: a descriptor the callback kept, released once, here.
                unsafe { sys::ucp_am_data_release(self.worker, desc) };
                Ok(r)
            }
            other => {
                m.body = other;
                Ok(f(&self.body(m)?))
            }
        }
    }
}

/// A message on its way ([`Node::send_lent`], [`Node::send_owned`]): what UCX may still read
/// is kept here until [`Node::sent`] reports the send finished.
pub struct Sending<'n> {
    /// UCX's request (null: it finished at once).
    req: sys::ucs_status_ptr_t,
    /// The header, kept as long as UCX may read it.
    header: Vec<u8>,
    /// The pieces of a body lent in several (UCX reads the list as it sends).
    iov: Vec<sys::ucp_dt_iov_t>,
    /// The part of the body the send owns (its prefix).
    owned: Vec<u8>,
    _node: PhantomData<&'n Node>,
}

impl Sending<'_> {
    /// The body's owned prefix back, for reuse, once the send finished ([`Node::sent`] said
    /// so without an error); `None` while UCX may still read it.
    pub fn reclaim(mut self) -> Option<Vec<u8>> {
        self.req.is_null().then(|| std::mem::take(&mut self.owned))
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if self.req.is_null() || is_err(self.req) {
            return;
        }
        // SAFETY: `req` is a live request of the node this borrows (so its worker is alive),
        // not yet freed; freeing an unfinished one makes UCX release it when it finishes.
        unsafe {
            if sys::ucp_request_check_status(self.req) == sys::UCS_INPROGRESS {
                // UCX may still read them: they are never freed.
                std::mem::forget(std::mem::take(&mut self.header));
                std::mem::forget(std::mem::take(&mut self.iov));
                std::mem::forget(std::mem::take(&mut self.owned));
            }
            sys::ucp_request_free(self.req);
        }
    }
}

impl Node {
    /// Starts sending a message whose body is `prefix` followed by `parts`, which UCX reads
    /// where they lie (the receiver sees one body), and returns at once. With `rendezvous`,
    /// the body goes by UCX's rendezvous protocol whatever its size: the receiver's transport
    /// fetches it (on one host, cross-memory attach: a system call of the receiver's), so the
    /// sender's CPU never copies it. Without, it goes as [`Node::send`] sends (over `tcp`,
    /// eagerly: the kernel copies the parts from where they lie into the socket).
    /// [`Node::sent`] says when the parts are free again; the returned [`Sending`] keeps the
    /// header and the prefix until then.
    ///
    /// # Safety
    ///
    /// The bytes of every `(address, length)` part must stay readable and unchanged until
    /// [`Node::sent`] reports the send finished or the node is dropped.
    pub unsafe fn send_lent(
        &self,
        ep: &Endpoint,
        header: Vec<u8>,
        prefix: Vec<u8>,
        parts: &[(*const u8, usize)],
        rendezvous: bool,
    ) -> Result<Sending<'_>, Error> {
        self.usable("send", ep)?;
        let flags = if rendezvous {
            sys::UCP_AM_SEND_FLAG_RNDV
        } else if self.eager(ep) {
            sys::UCP_AM_SEND_FLAG_EAGER
        } else {
            0
        };
        // The body in one piece, where it is one (no list to build).
        let single = match (prefix.is_empty(), parts) {
            (true, []) => Some((ptr::null(), 0)),
            (true, &[part]) => Some(part),
            (false, []) => Some((prefix.as_ptr(), prefix.len())),
            _ => None,
        };
        // The prefix and the header move into `s`; their buffers stay where they are.
        let mut s = Sending {
            req: ptr::null_mut(),
            header,
            iov: Vec::new(),
            owned: prefix,
            _node: PhantomData,
        };
        let req = match single {
            Some((body, len)) => {
                // SAFETY: the header (and the prefix, if it is the body) live in `s` until
                // UCX is done with them; a lent part's life is the caller's promise.
                unsafe { start_send(ep, &s.header, body, len, flags, None) }
            }
            None => {
                let prefix = (!s.owned.is_empty()).then_some((s.owned.as_ptr(), s.owned.len()));
                s.iov = prefix
                    .iter()
                    .chain(parts)
                    .map(|&(p, n)| sys::ucp_dt_iov_t {
                        buffer: p.cast_mut().cast(),
                        length: n,
                    })
                    .collect();
                // SAFETY: the header, the prefix and the list of pieces live in `s` until
                // UCX is done with them; the lent parts' bytes are the caller's promise.
                unsafe {
                    start_send(
                        ep,
                        &s.header,
                        s.iov.as_ptr().cast(),
                        s.iov.len(),
                        flags,
                        Some(sys::UCP_DATATYPE_IOV as sys::ucp_datatype_t),
                    )
                }
            }
        };
        if is_err(req) {
            return Err(Error::new("send", status_of(req)));
        }
        s.req = req;
        Ok(s)
    }

    /// Starts sending `body` (a message without header) as [`Node::send`] does, but returns
    /// at once: the returned [`Sending`] keeps the body until UCX is done with it. A sender
    /// that serves many peers uses it, so that a peer slow to take its messages holds up no
    /// one else.
    pub fn send_owned(&self, ep: &Endpoint, body: Vec<u8>) -> Result<Sending<'_>, Error> {
        // SAFETY: nothing is lent: the body is the prefix, which the send keeps.
        unsafe { self.send_lent(ep, Vec::new(), body, &[], false) }
    }

    /// Whether the send `s` finished (as of the last progress): `None` while UCX may still
    /// read its body, then its outcome. A send on an endpoint that failed or was closed
    /// finishes with an error.
    pub fn sent(&self, s: &mut Sending<'_>) -> Option<Result<(), Error>> {
        if s.req.is_null() {
            return Some(Ok(()));
        }
        if self.poisoned.get() {
            return Some(Err(Error::new("send", sys::UCS_ERR_NOT_CONNECTED)));
        }
        // SAFETY: `s.req` is a live request of this worker, not yet freed.
        let status = unsafe { sys::ucp_request_check_status(s.req) };
        if status == sys::UCS_INPROGRESS {
            return None;
        }
        // SAFETY: finished, freed once; the null left behind tells `Drop` and later calls.
        unsafe { sys::ucp_request_free(s.req) };
        s.req = ptr::null_mut();
        Some(check("send", status))
    }

    /// Takes a message's body into `out`, which must be exactly its length: a body still at
    /// the sender is fetched straight into `out` (by rendezvous, with no copy in between).
    pub fn body_into(&self, m: &mut Message<'_>, out: &mut [u8]) -> Result<(), Error> {
        if m.body_len() != out.len() {
            return Err(Error::new("receive", sys::UCS_ERR_MESSAGE_TRUNCATED));
        }
        match std::mem::replace(&mut m.body, Body::Gone) {
            Body::Rendezvous(desc, len) => {
                let param = sys::ucp_request_param_t::default();
                // SAFETY: `desc` is a rendezvous descriptor this node's callback kept; after
                // this call UCX owns it; `out` holds `len` bytes and outlives `complete`.
                let req = unsafe {
                    sys::ucp_am_recv_data_nbx(
                        self.worker,
                        desc,
                        out.as_mut_ptr().cast(),
                        len,
                        &param,
                    )
                };
                self.complete("receive", req, None)
            }
            other => {
                m.body = other;
                self.with_body(m, |b| out.copy_from_slice(b))
            }
        }
    }
}

/// Starts sending an active message on `ep` (open: the caller checked) with `flags`; returns
/// UCX's request (null: done at once; an error status). The body is `len` contiguous bytes at
/// `body`, or with `datatype` (UCX's iov type), a list of `len` parts at `body`.
///
/// # Safety
///
/// `header` and the body (and, for a list, every part it names) must stay readable until the
/// request completes.
unsafe fn start_send(
    ep: &Endpoint,
    header: &[u8],
    body: *const u8,
    len: usize,
    flags: u32,
    datatype: Option<sys::ucp_datatype_t>,
) -> sys::ucs_status_ptr_t {
    let mut param = sys::ucp_request_param_t {
        op_attr_mask: sys::UCP_OP_ATTR_FIELD_FLAGS,
        flags,
        ..Default::default()
    };
    if let Some(dt) = datatype {
        param.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype = dt;
    }
    // SAFETY: `ep` is open; the buffers' life is the caller's promise.
    unsafe {
        sys::ucp_am_send_nbx(
            ep.h,
            AM_ID,
            header.as_ptr().cast(),
            header.len(),
            body.cast(),
            len,
            &param,
        )
    }
}

/// Whether the lane that carries an endpoint's active messages (role `am`) is a `tcp` one, in
/// UCX's description of the endpoint (`ucp_ep_print_info`), whose lanes read like
/// `lane[1]:  1:tcp/lo.0 md[1] -> md[1]/tcp/sysdev[255] rma_bw#0 am am_bw#0 wireup`.
fn messages_over_tcp(description: &str) -> bool {
    description.lines().any(|l| {
        let Some((_, lane)) = l.split_once("]:") else {
            return false;
        };
        let mut words = lane.split_whitespace();
        let transport = words
            .next()
            .and_then(|w| w.split_once(':'))
            .and_then(|(_, t)| t.split('/').next());
        transport == Some("tcp") && words.any(|w| w == "am")
    })
}

#[cfg(test)]
mod tests {
    use super::messages_over_tcp;

    #[test]
    fn messages_go_eagerly_only_where_their_lane_is_tcp() {
        let tcp = "#                 lane[0]: cm rdmacm\n\
                   #                 lane[1]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] rma_bw#0 am am_bw#0 wireup\n\
                   #                 lane[2]:  2:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] rma_bw#1\n";
        assert!(messages_over_tcp(tcp));
        let shm = "#                 lane[0]:  8:posix/memory.0 md[5]      -> md[5]/posix/sysdev[255] am am_bw#0\n\
                   #                 lane[1]:  2:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] rma_bw#1 wireup\n";
        assert!(!messages_over_tcp(shm), "tcp only for one-sided lanes");
        let rc = "#                 lane[0]:  3:rc_mlx5/mlx5_0:1.0 md[2] -> md[2]/ib/sysdev[255] rma_bw#0 am am_bw#0 wireup\n";
        assert!(!messages_over_tcp(rc));
        assert!(!messages_over_tcp(""));
    }
}
