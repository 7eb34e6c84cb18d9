//! With only `tcp` (UCX would emulate one-sided access with the server's CPU), the client
//! moves data inside requests and replies, says so, and behaves the same. A test binary of its
//! own: UCX reads `UCX_TLS` when a node starts, for the whole process.

mod common;

use switchyard_mover::config::TenantConfig;
use switchyard_mover::Config;
use switchyard_remote::{Client, DataPath};
use switchyard_store::{Files, OpenFlags, Owner};

#[test]
fn without_one_sided_access_data_moves_in_messages() {
    // SAFETY-free: set before any thread of this process starts a UCX node.
    std::env::set_var("UCX_TLS", "tcp");
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    assert_eq!(c.data_path(), DataPath::InMessages("tcp".into()));
    assert!(!c.change_words_mapped(), "tcp shares no memory");
    let fd = c.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    c.pwrite(fd, &data, 17).unwrap();
    let mut back = vec![0u8; data.len() + 17];
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), data.len() + 17);
    assert_eq!(&back[17..], &data[..]);
    assert!(back[..17].iter().all(|&b| b == 0));
    // Reads at odd offsets and lengths, ending inside and past the end of the file, and
    // longer than one request carries.
    let size = back.len();
    let part = 256 << 10;
    for (off, len) in [
        (0, part),
        (0, 2 * part),
        (5, part),
        (part - 1, part + 2),
        (3 * part, 4 * part + 1),
        (size - part, part),
        (size - 10, part),
        (size - 2 * part - 3, 3 * part),
        (size, 100),
        (0, 9 << 20),
    ] {
        let mut got = vec![0xEEu8; len];
        let n = c.pread(fd, &mut got, off as u64).unwrap();
        let end = (off + len).min(size);
        assert_eq!(n, end.saturating_sub(off), "read of {len} at {off}");
        assert_eq!(
            &got[..n],
            &back[off.min(size)..end],
            "read of {len} at {off}"
        );
    }
    let s = c.stats();
    assert_eq!(s.one_sided_bytes, 0);
    assert!(s.message_bytes >= 2 * data.len() as u64, "{s:?}");
}

/// A sparse file read in messages: ranges inside its data (sent from where they lie), across
/// its hole (copied, zeros for the hole) and past its end, each as the file holds it.
#[test]
fn sparse_reads_in_messages_return_zeros_for_holes() {
    std::env::set_var("UCX_TLS", "tcp");
    let srv = common::start(false);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    let fd = c.open("/sparse", OpenFlags::CREATE, 0o644).unwrap();
    let a: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let b: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8 ^ 0x5a).collect();
    let far = 3u64 << 20;
    c.pwrite(fd, &a, 0).unwrap();
    c.pwrite(fd, &b, far).unwrap();
    let size = far as usize + b.len();
    let mut want = vec![0u8; size];
    want[..a.len()].copy_from_slice(&a);
    want[far as usize..].copy_from_slice(&b);
    for (off, len) in [
        (0, a.len()),
        (4096, 200_000),
        (0, size),
        (100_000, 1 << 20),
        (far as usize - 70_000, 140_000),
        (far as usize + 1, 150_000),
        (size - 65_536, 1 << 20),
    ] {
        let mut got = vec![0xEEu8; len];
        let n = c.pread(fd, &mut got, off as u64).unwrap();
        let end = (off + len).min(size);
        assert_eq!(n, end - off, "read of {len} at {off}");
        assert!(got[..n] == want[off..end], "read of {len} at {off}");
    }
}

/// The server classes a connection by the uid its client acts for (`uids` in
/// `[[qos.tenants]]`): the copies of its in-message reads and writes are that tenant's. (The
/// reads are small ones: a large read is sent from where it lies, with no copy to class.)
#[test]
fn a_connection_is_the_tenant_of_the_uid_it_acts_for() {
    std::env::set_var("UCX_TLS", "tcp");
    let me = Owner::current().uid;
    let mut config = Config::default();
    config.engine.channels = 2;
    config.qos.tenants = vec![
        TenantConfig {
            uids: vec![me.wrapping_add(1)],
            ..TenantConfig::bulk("someone else")
        },
        TenantConfig {
            uids: vec![me],
            ..TenantConfig::bulk("me")
        },
    ];
    let srv = common::start_with(false, config);
    let c = Client::connect(srv.addr, &srv.key, true).unwrap();
    let fd = c.open("/f", OpenFlags::CREATE, 0o644).unwrap();
    let data = vec![7u8; 1 << 20];
    c.pwrite(fd, &data, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    for (i, piece) in back.chunks_mut(16 << 10).enumerate() {
        let n = c.pread(fd, piece, (i * (16 << 10)) as u64).unwrap();
        assert_eq!(n, piece.len());
    }
    assert_eq!(back, data);
    c.close(fd).unwrap();
    drop(c);
    let store = srv.stop();
    let t = store.mover().tenants();
    assert_eq!(t[0].bytes, 0, "{t:?}");
    assert!(t[1].bytes >= 2 << 20, "{t:?}");
}
