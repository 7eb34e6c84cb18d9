//! Bytes from the network → a request or reply either decodes or is refused; it never
//! panics, hangs or allocates more than the bytes allow. What decodes encodes back to the
//! same bytes (the encoding is canonical, so nothing is smuggled past a re-encoding check).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_remote::proto::{Reply, Request};

fuzz_target!(|data: &[u8]| {
    if let Ok((seq, req)) = Request::decode(data) {
        assert_eq!(req.encode(seq), data);
    }
    if let Ok((seq, rep)) = Reply::decode(data) {
        assert_eq!(rep.encode(seq), data);
    }
});
