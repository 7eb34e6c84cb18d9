//! Durable copies into a region the library maps: the bytes are in the file after the region
//! is closed and mapped again; a region file another handle holds is refused; a closed region
//! gives -EBADF and a null base.

use std::ffi::CString;
use std::ptr::null;

use switchyard::mover::*;
use switchyard::region::*;

#[test]
fn a_durable_copy_into_a_region_is_in_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = CString::new(dir.path().join("r.pm").to_str().unwrap()).unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 241) as u8).collect();
    // SAFETY: valid strings and out pointers; the copy stays inside the region's mapping
    // (8 MiB) while the region is open; the handles are never freed.
    unsafe {
        let mut m = std::ptr::null_mut();
        assert_eq!(sy_mover_new(null(), &mut m), 0);
        let mut r = std::ptr::null_mut();
        assert_eq!(sy_region_open(path.as_ptr(), 8 << 20, 1, &mut r), 0);
        assert_eq!(sy_region_len(r), 8 << 20);
        let mut again = std::ptr::null_mut();
        assert_eq!(
            sy_region_open(path.as_ptr(), 0, 0, &mut again),
            -libc::EBUSY,
            "one owner"
        );
        let base = sy_region_base(r).cast::<u8>();
        assert!(!base.is_null());
        let flags = SY_COPY_DURABLE;
        assert_eq!(
            sy_copy(
                m,
                base.add(4096).cast(),
                data.as_ptr().cast(),
                data.len(),
                flags
            ),
            0
        );
        assert_eq!(sy_region_close(r), 0);
        assert!(sy_region_base(r).is_null());
        assert_eq!(sy_region_len(r), -i64::from(libc::EBADF));
        assert_eq!(sy_region_close(r), -libc::EBADF);
        assert_eq!(sy_region_open(path.as_ptr(), 0, 0, &mut r), 0);
        let back = std::slice::from_raw_parts(sy_region_base(r).cast::<u8>().add(4096), data.len());
        assert_eq!(back, &data[..]);
        assert_eq!(sy_region_close(r), 0);
        assert_eq!(sy_mover_close(m), 0);
    }
}
