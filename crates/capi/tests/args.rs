//! The C API's argument checks: null pointers, bad lengths, descriptors never opened or
//! already closed, closed handles and unknown flags give negative errnos, never a crash, and
//! leave the store working (a property test over random calls, next to a model of which
//! descriptors are open).

use std::ffi::CString;
use std::ptr::{null, null_mut};

use proptest::prelude::*;
use switchyard::mover::*;
use switchyard::store::*;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A fresh store in `dir`.
fn fresh(dir: &tempfile::TempDir) -> *mut sy_store {
    let path = c(dir.path().join("a.store").to_str().unwrap());
    let mut s = null_mut();
    // SAFETY: valid strings and out pointer.
    let r = unsafe { sy_store_create(path.as_ptr(), 32 << 20, null(), &mut s) };
    assert_eq!(r, 0);
    s
}

#[derive(Debug, Clone)]
enum Call {
    Open(u8, i32),
    Close(i32),
    Read(i32, usize, bool),
    Write(i32, usize, bool),
    Pread(i32, usize, i64),
    Seek(i32, i64, i32),
    Truncate(i32, i64),
    Stat(bool),
}

fn call() -> impl Strategy<Value = Call> {
    let fd = prop_oneof![-2i32..8, Just(i32::MAX), Just(i32::MIN)];
    let len = prop_oneof![0usize..9000, Just(usize::MAX), Just(1usize << 40)];
    prop_oneof![
        (0u8..4, any::<i32>()).prop_map(|(p, f)| Call::Open(p, f)),
        fd.clone().prop_map(Call::Close),
        (fd.clone(), len.clone(), any::<bool>()).prop_map(|(f, l, n)| Call::Read(f, l, n)),
        (fd.clone(), len.clone(), any::<bool>()).prop_map(|(f, l, n)| Call::Write(f, l, n)),
        (fd.clone(), 0usize..9000, any::<i64>()).prop_map(|(f, l, o)| Call::Pread(f, l, o)),
        (fd.clone(), any::<i64>(), -1i32..4).prop_map(|(f, o, w)| Call::Seek(f, o, w)),
        (fd, any::<i64>()).prop_map(|(f, n)| Call::Truncate(f, n)),
        any::<bool>().prop_map(Call::Stat),
    ]
}

/// The errno range a failure may take.
fn is_errno(r: i64) -> bool {
    (-4095..0).contains(&r)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every call returns a count or a negative errno; a descriptor that was never opened
    /// or is closed gives -EBADF (before a bad buffer, as read(2) does); a null buffer with
    /// a length on an open one -EFAULT (or -EBADF for the wrong access); afterwards the store
    /// still reads back what it wrote.
    #[test]
    fn bad_arguments_give_errnos_and_leave_the_store_working(calls in proptest::collection::vec(call(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let s = fresh(&dir);
        let paths = [c("/a"), c("/b"), c("/dir/x"), c("")];
        let mut open = std::collections::BTreeSet::new();
        let mut buf = vec![0u8; 9000];
        for call in calls {
            // SAFETY: `s` is a live store; `buf` is 9000 bytes and a length past it is only
            // ever passed with a null pointer.
            let r: i64 = unsafe {
                match &call {
                    Call::Open(p, flags) => {
                        let r = sy_open(s, paths[*p as usize].as_ptr(), *flags, 0o644);
                        if r >= 0 {
                            prop_assert!(open.insert(r), "descriptor {r} given twice");
                        }
                        i64::from(r)
                    }
                    Call::Close(fd) => {
                        let r = sy_close(s, *fd);
                        prop_assert_eq!(r == 0, open.remove(fd), "close {}", fd);
                        i64::from(r)
                    }
                    Call::Read(fd, len, null_buf) => {
                        let (p, l) = if *null_buf || *len > buf.len() { (null_mut(), *len) } else { (buf.as_mut_ptr().cast(), *len) };
                        let r = sy_read(s, *fd, p, l);
                        if p.is_null() && l > 0 && open.contains(fd) {
                            prop_assert!(r == -i64::from(libc::EFAULT) || r == -i64::from(libc::EBADF), "{}", r);
                        }
                        r
                    }
                    Call::Write(fd, len, null_buf) => {
                        let (p, l) = if *null_buf || *len > buf.len() { (null(), *len) } else { (buf.as_ptr().cast(), *len) };
                        let r = sy_write(s, *fd, p, l);
                        if p.is_null() && l > 0 && open.contains(fd) {
                            prop_assert!(r == -i64::from(libc::EFAULT) || r == -i64::from(libc::EBADF), "{}", r);
                        }
                        r
                    }
                    Call::Pread(fd, len, off) => sy_pread(s, *fd, buf.as_mut_ptr().cast(), *len, *off),
                    Call::Seek(fd, off, whence) => sy_lseek(s, *fd, *off, *whence),
                    Call::Truncate(fd, n) => i64::from(sy_ftruncate(s, *fd, *n)),
                    Call::Stat(null_out) => {
                        let mut a = sy_attr::default();
                        let out = if *null_out { null_mut() } else { &mut a as *mut sy_attr };
                        let r = sy_stat(s, c("/").as_ptr(), out);
                        prop_assert_eq!(r == 0, !*null_out);
                        i64::from(r)
                    }
                }
            };
            prop_assert!(r >= 0 || is_errno(r), "{call:?} gave {r}");
            let fd = match &call {
                Call::Read(fd, ..) | Call::Write(fd, ..) | Call::Pread(fd, ..) | Call::Seek(fd, ..) | Call::Truncate(fd, _) => Some(*fd),
                _ => None,
            };
            if let Some(fd) = fd {
                if !open.contains(&fd) {
                    prop_assert_eq!(r, -i64::from(libc::EBADF), "{:?} on a descriptor not open", call);
                }
            }
        }
        // The store still works.
        // SAFETY: as above; the strings outlive the calls.
        unsafe {
            let fd = sy_open(s, c("/check").as_ptr(), libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o600);
            prop_assert!(fd >= 0);
            prop_assert_eq!(sy_pwrite(s, fd, b"intact".as_ptr().cast(), 6, 0), 6);
            let mut back = [0u8; 6];
            prop_assert_eq!(sy_pread(s, fd, back.as_mut_ptr().cast(), 6, 0), 6);
            prop_assert_eq!(&back, b"intact");
            prop_assert_eq!(sy_store_close(s), 0);
        }
    }
}

/// Null handles give -EFAULT; closed handles -EBADF on every later call, a second close
/// included; unknown copy flags and overlapping buffers -EINVAL.
#[test]
fn null_and_closed_handles_and_bad_copies_give_errnos() {
    store_handles_give_errnos();
    mover_handles_and_bad_copies_give_errnos();
}

/// The store's and a directory listing's handles: null, closed, and bad arguments.
fn store_handles_give_errnos() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: each call gets null, a live handle or a closed one (never freed), and valid
    // buffers where it reads or writes.
    unsafe {
        assert_eq!(sy_open(null(), c("/a").as_ptr(), 0, 0), -libc::EFAULT);
        assert_eq!(sy_store_close(null()), -libc::EFAULT);
        let s = fresh(&dir);
        assert_eq!(sy_open(s, null(), 0, 0), -libc::EFAULT);
        let bad_utf8 = [0xffu8, 0];
        assert_eq!(sy_open(s, bad_utf8.as_ptr().cast(), 0, 0), -libc::EINVAL);
        let fd = sy_open(s, c("/f").as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600);
        assert!(fd >= 0);
        let mut d = null_mut();
        assert_eq!(sy_opendir(s, c("/").as_ptr(), &mut d), 0);
        use switchyard::aio::*;
        let mut one = [0u8; 16];
        assert_eq!(sy_submit_pread(s, fd, null_mut(), 16, 0, 1), -libc::EFAULT);
        assert_eq!(
            sy_submit_pread(s, -1, one.as_mut_ptr().cast(), 16, 0, 1),
            -libc::EBADF
        );
        assert_eq!(
            sy_submit_pwrite(s, fd, one.as_ptr().cast(), 16, -5, 1),
            -libc::EINVAL
        );
        assert_eq!(sy_store_wait(s, null_mut(), 0, 1), -i64::from(libc::EINVAL));
        assert_eq!(sy_store_pending(s), 0);
        assert_eq!(sy_store_close(s), 0);
        assert_eq!(
            sy_submit_pwrite(s, fd, one.as_ptr().cast(), 16, 0, 1),
            -libc::EBADF
        );
        assert_eq!(
            sy_write(s, fd, b"x".as_ptr().cast(), 1),
            -i64::from(libc::EBADF)
        );
        assert_eq!(sy_store_close(s), -libc::EBADF);
        let mut e = std::mem::zeroed::<sy_dirent>();
        assert_eq!(sy_readdir(d, &mut e), 1, "a listing outlives its store");
        assert_eq!(sy_closedir(d), 0);
        assert_eq!(sy_readdir(d, &mut e), -libc::EBADF);
        assert_eq!(sy_closedir(d), -libc::EBADF);
    }
}

/// The mover's handle, null and closed, and copies, fills and compares with bad arguments.
fn mover_handles_and_bad_copies_give_errnos() {
    // SAFETY: each call gets null, a live handle or a closed one (never freed), and valid
    // buffers where it reads or writes.
    unsafe {
        let mut m = null_mut();
        assert_eq!(sy_mover_new(null(), &mut m), 0);
        let mut a = vec![1u8; 4096];
        let p = a.as_mut_ptr();
        assert_eq!(
            sy_copy(m, p.add(1).cast(), p.cast(), 100, 0),
            -libc::EINVAL,
            "overlap"
        );
        assert_eq!(sy_copy(m, p.cast(), null(), 100, 0), -libc::EFAULT);
        assert_eq!(
            sy_copy(m, p.add(2048).cast(), p.cast(), 100, 1 << 30),
            -libc::EINVAL
        );
        assert_eq!(sy_copy(m, null_mut(), null(), 0, 0), 0, "nothing to copy");
        assert_eq!(sy_fill(m, null_mut(), 1, 10, 0), -libc::EFAULT);
        assert_eq!(sy_fill(m, p.cast(), 1, 10, 1 << 30), -libc::EINVAL);
        assert_eq!(sy_fill(m, null_mut(), 1, 0, 0), 0, "nothing to fill");
        assert_eq!(sy_fill(m, p.add(100).cast(), 9, 3000, 0), 0);
        assert!(a[100..3100].iter().all(|&b| b == 9) && a[99] == 1 && a[3100] == 1);
        let p = a.as_mut_ptr();
        let mut at = 0usize;
        assert_eq!(
            sy_compare(m, p.cast(), null(), 10, 0, &mut at),
            -libc::EFAULT
        );
        assert_eq!(
            sy_compare(m, p.add(100).cast(), p.add(200).cast(), 2900, 0, &mut at),
            0
        );
        assert_eq!(
            sy_compare(m, p.cast(), p.add(100).cast(), 500, 0, &mut at),
            1
        );
        assert_eq!(at, 0);
        assert_eq!(
            sy_compare(m, p.add(50).cast(), p.add(100).cast(), 100, 0, null_mut()),
            1
        );
        assert_eq!(
            sy_compare(m, null(), null(), 0, 0, &mut at),
            0,
            "nothing to compare"
        );
        assert_eq!(sy_mover_wait(m, null_mut(), 1, 2), -i64::from(libc::EINVAL));
        let mut v = 0u64;
        assert_eq!(
            sy_mover_counter(m, c("no such").as_ptr(), &mut v),
            -libc::ENOENT
        );
        let need = sy_mover_stats_json(m, null_mut(), 0);
        assert!(need > 10);
        let mut text = vec![0 as std::ffi::c_char; 8];
        assert_eq!(sy_mover_stats_json(m, text.as_mut_ptr(), 8), need);
        assert_eq!(text[7], 0, "cut and terminated");
        assert_eq!(sy_mover_close(m), 0);
        assert_eq!(sy_copy(m, p.add(2048).cast(), p.cast(), 1, 0), -libc::EBADF);
        assert_eq!(sy_fill(m, p.cast(), 0, 1, 0), -libc::EBADF);
        assert_eq!(
            sy_compare(m, p.cast(), p.cast(), 1, 0, null_mut()),
            -libc::EBADF
        );
        assert_eq!(sy_mover_close(m), -libc::EBADF);
        let msg = std::ffi::CStr::from_ptr(switchyard::sy_last_error());
        assert!(msg.to_str().unwrap().contains("closed"), "{msg:?}");
    }
}
