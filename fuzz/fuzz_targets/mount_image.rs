//! Image bytes → mount either refuses or succeeds (and the mounted store can be read and
//! unmounted); it never panics or hangs. The input patches a small valid store (so the fuzzer
//! reaches deep into the logs) and is also tried as a raw image.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard_store::crash::probe_image;

fuzz_target!(|data: &[u8]| {
    probe_image(data);
});
