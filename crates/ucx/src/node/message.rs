//! Active messages: sending, the callback that queues them, and taking their bodies.

use std::ffi::c_void;
use std::marker::PhantomData;

use super::{Body, Endpoint, Events, Incoming, Node, AM_ID};
use crate::error::Error;
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
            Body::Rendezvous(_, n) => *n,
            Body::Gone => 0,
        }
    }
}

impl Drop for Message<'_> {
    fn drop(&mut self) {
        if let Body::Rendezvous(desc, _) = self.body {
            // SAFETY: `desc` is a rendezvous descriptor the callback kept (it returned
            // UCS_INPROGRESS) and nothing received it; the worker outlives the message (its
            // lifetime is tied to the node's).
            unsafe { sys::ucp_am_data_release(self.worker, desc) };
        }
    }
}

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
    let (body, status) = if rendezvous {
        (Body::Rendezvous(data, len), sys::UCS_INPROGRESS)
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
        let param = sys::ucp_request_param_t {
            op_attr_mask: sys::UCP_OP_ATTR_FIELD_FLAGS,
            flags: sys::UCP_AM_SEND_FLAG_REPLY,
            ..Default::default()
        };
        // SAFETY: `ep` is open; `header` and `body` stay borrowed until `complete` returns,
        // which is after UCX is done with them.
        let req = unsafe {
            sys::ucp_am_send_nbx(
                ep.h,
                AM_ID,
                header.as_ptr().cast(),
                header.len(),
                body.as_ptr().cast(),
                body.len(),
                &param,
            )
        };
        self.complete("send", req, Some(ep))
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
            Body::Rendezvous(desc, len) => {
                let mut buf = vec![0u8; len];
                let param = sys::ucp_request_param_t::default();
                // SAFETY: `desc` is a rendezvous descriptor this node's callback kept; after
                // this call UCX owns it; `buf` holds `len` bytes and outlives `complete`.
                let req = unsafe {
                    sys::ucp_am_recv_data_nbx(
                        self.worker,
                        desc,
                        buf.as_mut_ptr().cast(),
                        len,
                        &param,
                    )
                };
                self.complete("receive", req, None)?;
                Ok(buf)
            }
        }
    }
}
