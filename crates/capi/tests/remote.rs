//! A store another process serves, through the C API: `sy_store_connect` proves the key, and
//! the same calls as on a local store work on it (the server here runs in a thread of the
//! test, on loopback); a wrong key is refused.

use std::ffi::CString;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use switchyard::store::*;
use switchyard_media::{Persist, Region};
use switchyard_mover::{Config, Mover};
use switchyard_remote::{serve, Key, ServeOptions, ServerStats};
use switchyard_store::{Owner, Store};

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

#[test]
fn a_served_store_works_through_the_c_api() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("s.key");
    let key = Key::load_or_create(&key_path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let st = stop.clone();
    let server = std::thread::spawn(move || {
        let region = Region::memory(64 << 20, Persist::detect()).unwrap();
        let mover = Arc::new(Mover::start(&Config::default()).unwrap());
        let store = Store::format(region, mover, Owner::current()).unwrap();
        let opts = ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            read_only: false,
            key,
        };
        serve(&store, &opts, &ServerStats::default(), &st, |a| {
            tx.send(a).unwrap()
        })
        .unwrap();
    });
    let addr = c(&rx.recv().unwrap().to_string());
    let key_c = c(key_path.to_str().unwrap());
    let wrong = dir.path().join("wrong.key");
    Key::load_or_create(&wrong).unwrap();
    // SAFETY: valid strings, out pointers and buffers throughout; the store is closed once.
    unsafe {
        let mut s = null_mut();
        let w = c(wrong.to_str().unwrap());
        assert!(sy_store_connect(addr.as_ptr(), w.as_ptr(), 1, &mut s) < 0);
        assert_eq!(
            sy_store_connect(addr.as_ptr(), key_c.as_ptr(), 1, &mut s),
            0
        );
        assert_eq!(sy_mkdir(s, c("/d").as_ptr(), 0o755), 0);
        let fd = sy_open(s, c("/d/f").as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
        assert!(fd >= 0, "{fd}");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(
            sy_pwrite(s, fd, data.as_ptr().cast(), data.len(), 5),
            200_000
        );
        let mut back = vec![0u8; data.len() + 5];
        assert_eq!(
            sy_pread(s, fd, back.as_mut_ptr().cast(), back.len(), 0),
            200_005
        );
        assert_eq!(&back[5..], &data[..]);
        let mut a = sy_attr::default();
        assert_eq!(sy_fstat(s, fd, &mut a), 0);
        assert_eq!(a.size, 200_005);
        // The server syncs (its store is in memory: nothing to write back).
        assert_eq!(sy_fsync(s, fd), 0);
        assert_eq!(sy_sync(s), 0);
        assert_eq!(sy_close(s, fd), 0);
        assert_eq!(sy_stat(s, c("/d/none").as_ptr(), &mut a), -libc::ENOENT);
        assert_eq!(sy_store_close(s), 0);
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}
