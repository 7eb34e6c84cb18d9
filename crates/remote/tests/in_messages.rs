//! With only `tcp` (UCX would emulate one-sided access with the server's CPU), the client
//! moves data inside requests and replies, says so, and behaves the same. A test binary of its
//! own: UCX reads `UCX_TLS` when a node starts, for the whole process.

mod common;

use switchyard_remote::{Client, DataPath};
use switchyard_store::{Files, OpenFlags};

#[test]
fn without_one_sided_access_data_moves_in_messages() {
    // SAFETY-free: set before any thread of this process starts a UCX node.
    std::env::set_var("UCX_TLS", "tcp");
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    assert_eq!(c.data_path(), DataPath::InMessages("tcp".into()));
    let fd = c.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    c.pwrite(fd, &data, 17).unwrap();
    let mut back = vec![0u8; data.len() + 17];
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), data.len() + 17);
    assert_eq!(&back[17..], &data[..]);
    assert!(back[..17].iter().all(|&b| b == 0));
    let s = c.stats();
    assert_eq!(s.one_sided_bytes, 0);
    assert!(s.message_bytes >= 2 * data.len() as u64, "{s:?}");
}
