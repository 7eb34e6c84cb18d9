//! Round trips, refusals and bounds of the wire format.

use super::*;
use proptest::prelude::*;
use switchyard_store::{Attr, Run};

fn attr() -> impl Strategy<Value = Attr> {
    (
        any::<(u32, u32, u32, u32, u64)>(),
        any::<(i64, i64, i64, u64)>(),
    )
        .prop_map(
            |((mode, uid, gid, nlink, size), (atime, mtime, ctime, parent))| Attr {
                mode,
                uid,
                gid,
                nlink,
                size,
                atime,
                mtime,
                ctime,
                parent,
            },
        )
}

fn stat() -> impl Strategy<Value = Stat> {
    (attr(), any::<u64>(), any::<u64>()).prop_map(|(attr, blocks, generation)| Stat {
        attr,
        blocks,
        generation,
    })
}

fn lock() -> impl Strategy<Value = RecordLock> {
    (
        any::<u64>(),
        any::<u64>(),
        prop_oneof![
            Just(libc::F_RDLCK),
            Just(libc::F_WRLCK),
            Just(libc::F_UNLCK)
        ],
        any::<u32>(),
    )
        .prop_map(|(a, b, kind, pid)| RecordLock {
            start: a.min(b),
            end: a.max(b),
            kind,
            pid,
        })
}

fn falloc() -> impl Strategy<Value = Falloc> {
    prop_oneof![
        any::<bool>().prop_map(|keep_size| Falloc::Allocate { keep_size }),
        any::<bool>().prop_map(|keep_size| Falloc::ZeroRange { keep_size }),
        Just(Falloc::PunchHole),
    ]
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..40)
}

fn request() -> impl Strategy<Value = Request> {
    // Weighted by each family's kinds: every kind is as likely as the next.
    prop_oneof![
        10 => metadata_request(),
        7 => data_request(),
        6 => attribute_or_lock_request(),
    ]
}

/// Requests about names, attributes, opens and the store.
fn metadata_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<[u8; 32]>(), any::<bool>(), any::<u32>())
            .prop_map(|(mac, write, uid)| Request::Auth { mac, write, uid }),
        (any::<u64>(), bytes(), any::<bool>()).prop_map(|(parent, name, hold)| Request::Lookup {
            parent,
            name,
            hold
        }),
        any::<u64>().prop_map(|ino| Request::Getattr { ino }),
        (
            any::<(u64, u32, u64)>(),
            bytes(),
            bytes(),
            any::<(u32, u32, u32, bool)>()
        )
            .prop_map(
                |((parent, mode, rdev), name, target, (uid, gid, umask, hold))| Request::Make {
                    parent,
                    name,
                    mode,
                    rdev,
                    target,
                    uid,
                    gid,
                    umask,
                    hold,
                },
            ),
        (
            any::<u64>(),
            bytes(),
            any::<u64>(),
            bytes(),
            prop_oneof![
                Just(Rename::Replace),
                Just(Rename::NoReplace),
                Just(Rename::Exchange)
            ]
        )
            .prop_map(
                |(parent, name, new_parent, new_name, how)| Request::Rename {
                    parent,
                    name,
                    new_parent,
                    new_name,
                    how
                }
            ),
        (any::<u64>(), any::<u64>()).prop_map(|(ino, n)| Request::Forget { ino, n }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(ino, generation)| Request::Hold { ino, generation }),
        Just(Request::Counters),
        (
            any::<u64>(),
            any::<(Option<u32>, Option<u32>, Option<u32>)>(),
            any::<(Option<u64>, Option<i64>, Option<i64>)>()
        )
            .prop_map(|(ino, (mode, uid, gid), (size, atime, mtime))| {
                Request::Setattr {
                    ino,
                    set: SetAttr {
                        mode,
                        uid,
                        gid,
                        size,
                        atime,
                        mtime,
                    },
                }
            }),
        Just(Request::Statfs),
        Just(Request::Sync),
    ]
}

/// Requests about file data.
fn data_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u64>(), bytes()).prop_map(|(ino, data)| Request::Append { ino, data }),
        (any::<(u64, u64, u64)>(), falloc())
            .prop_map(|((ino, off, len), how)| { Request::Fallocate { ino, off, len, how } }),
        bytes().prop_map(|address| Request::Attach { address }),
        (
            any::<[u8; 16]>(),
            any::<(u64, u64)>(),
            prop::collection::vec(any::<(u64, u64)>(), 0..=MAX_PULL_RANGES)
        )
            .prop_map(|(token, (ino, change), ranges)| Request::Pull {
                token,
                ino,
                change,
                ranges
            }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(ino, off, len)| Request::Map {
            ino,
            off,
            len
        }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(ino, off, hole)| Request::Seek {
            ino,
            off,
            to: if hole { Seek::Hole } else { Seek::Data },
        }),
        (any::<u64>(), any::<u64>(), bytes()).prop_map(|(ino, off, data)| Request::Write {
            ino,
            off,
            data
        }),
    ]
}

/// Requests about extended attributes and record locks.
fn attribute_or_lock_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            any::<u64>(),
            bytes(),
            bytes(),
            prop_oneof![
                Just(XattrMode::Set),
                Just(XattrMode::Create),
                Just(XattrMode::Replace)
            ]
        )
            .prop_map(|(ino, name, value, mode)| Request::Setxattr {
                ino,
                name,
                value,
                mode
            }),
        (any::<u64>(), bytes()).prop_map(|(ino, name)| Request::Getxattr { ino, name }),
        any::<u64>().prop_map(|ino| Request::Listxattr { ino }),
        (any::<u64>(), any::<u64>(), lock(), any::<bool>()).prop_map(|(ino, owner, lock, wait)| {
            Request::Lock {
                ino,
                owner,
                lock,
                wait,
            }
        }),
        (any::<u64>(), any::<u64>(), lock()).prop_map(|(ino, owner, lock)| Request::TestLock {
            ino,
            owner,
            lock
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(ino, owner)| Request::Unlock { ino, owner }),
    ]
}

fn extents() -> impl Strategy<Value = Extents> {
    (
        attr(),
        any::<u64>(),
        prop::collection::vec(any::<(u64, u64, u64)>(), 0..5),
    )
        .prop_map(|(attr, change, runs)| Extents {
            attr,
            change,
            runs: runs
                .into_iter()
                .map(|(file_offset, region_offset, len)| Run {
                    file_offset,
                    region_offset,
                    len,
                })
                .collect(),
        })
}

/// Every window is aligned, holds its range, and is as small as that allows.
#[test]
fn a_map_window_holds_its_range_rounded_out() {
    for (off, len) in [
        (0, 0),
        (0, 1),
        (4095, 8192),
        (MAP_WINDOW - 1, 2),
        (5 << 20, 3 << 20),
        (u64::MAX - 5, 9),
    ] {
        let (lo, hi) = map_window(off, len);
        assert_eq!(lo % MAP_WINDOW, 0);
        assert!(
            lo <= off && hi >= off.saturating_add(len.max(1)),
            "{off} {len}"
        );
        assert!(off - lo < MAP_WINDOW);
        assert!(hi == u64::MAX || hi - off.saturating_add(len.max(1)) < MAP_WINDOW);
    }
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        any::<i32>().prop_map(Reply::Error),
        Just(Reply::Done),
        (any::<u64>(), stat()).prop_map(|(ino, stat)| Reply::Entry { ino, stat }),
        stat().prop_map(Reply::Stat),
        lock().prop_map(Reply::Lock),
        Just(Reply::Stale),
        any::<u64>().prop_map(Reply::Offset),
        prop::collection::vec((bytes(), any::<u64>()), 0..5).prop_map(Reply::Counters),
        prop::collection::vec((bytes(), any::<u64>(), any::<u32>()), 0..5).prop_map(|v| {
            Reply::Dir(
                v.into_iter()
                    .map(|(name, ino, kind)| DirEntry { name, ino, kind })
                    .collect(),
            )
        }),
        extents().prop_map(Reply::Map),
        (any::<u64>(), stat(), extents()).prop_map(|(n, stat, map)| Reply::WrittenMap {
            n,
            stat,
            map
        }),
        (
            any::<u64>(),
            prop::collection::vec(any::<(u64, u64, u64)>(), 0..5)
        )
            .prop_map(|(id, t)| Reply::Prepared {
                id,
                targets: t
                    .into_iter()
                    .map(|(offset, region_offset, len)| Target {
                        offset,
                        region_offset,
                        len
                    })
                    .collect(),
            }),
        (
            bytes(),
            any::<(bool, u32)>(),
            any::<(u64, u64, u64, u64)>(),
            bytes(),
            bytes()
        )
            .prop_map(
                |(
                    address,
                    (writable, server_uid),
                    (data_start, data_len, data_addr, changes_addr),
                    data_key,
                    changes_key,
                )| {
                    Reply::Welcome(Welcome {
                        address,
                        writable,
                        data_start,
                        data_len,
                        data_addr,
                        data_key,
                        changes_addr,
                        changes_key,
                        server_uid,
                    })
                }
            ),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(seq: u64, req in request()) {
        prop_assert_eq!(Request::decode(&req.encode(seq)), Ok((seq, req)));
    }

    #[test]
    fn replies_round_trip(seq: u64, rep in reply()) {
        prop_assert_eq!(Reply::decode(&rep.encode(seq)), Ok((seq, rep)));
    }

    #[test]
    fn a_bytes_reply_filled_in_place_is_the_encoded_one(
        seq: u64,
        data in prop::collection::vec(any::<u8>(), 0..3000),
        max in 0usize..4000,
        old in prop::collection::vec(any::<u8>(), 0..5000),
    ) {
        let mut out = old;
        let n = Reply::bytes_filled(seq, max, &mut out, |b| -> Result<usize, ()> {
            let n = data.len().min(b.len());
            b[..n].copy_from_slice(&data[..n]);
            Ok(n)
        })
        .unwrap();
        prop_assert_eq!(n, data.len().min(max));
        let want = Reply::Bytes(data[..data.len().min(max)].to_vec());
        prop_assert_eq!(&out, &want.encode(seq));
        prop_assert_eq!(Reply::bytes_of(&out), Some((seq, &data[..data.len().min(max)])));
    }

    #[test]
    fn a_write_encoded_from_a_borrowed_slice_is_the_encoded_one(
        seq: u64, ino: u64, off: u64, data in prop::collection::vec(any::<u8>(), 0..3000),
    ) {
        let b = Request::encode_write(seq, ino, off, &data);
        prop_assert_eq!(&b, &Request::Write { ino, off, data: data.clone() }.encode(seq));
        prop_assert_eq!(Request::write_of(&b), Some((seq, ino, off, &data[..])));
    }

    #[test]
    fn write_of_takes_only_a_write(seq: u64, req in request()) {
        let b = req.encode(seq);
        prop_assert_eq!(Request::write_of(&b).is_some(), matches!(req, Request::Write { .. }));
    }

    #[test]
    fn bytes_of_takes_only_a_bytes_reply(seq: u64, rep in reply()) {
        let b = rep.encode(seq);
        let is_bytes = matches!(rep, Reply::Bytes(_));
        prop_assert_eq!(Reply::bytes_of(&b).is_some(), is_bytes);
    }

    #[test]
    fn a_part_header_names_its_pull_and_piece_and_nothing_else_is_one(
        seq: u64,
        index: u32,
        other in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        prop_assert_eq!(part_of(&part_header(seq, index)), Some((seq, index)));
        if other.len() != 13 || other[0] != PART_KIND {
            prop_assert_eq!(part_of(&other), None);
        }
    }

    #[test]
    fn any_bytes_decode_or_are_refused(b in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Request::decode(&b);
        let _ = Reply::decode(&b);
    }

    #[test]
    fn a_cut_message_is_refused(seq: u64, req in request(), cut in 1usize..8) {
        let b = req.encode(seq);
        let n = b.len().saturating_sub(cut);
        prop_assert!(Request::decode(&b[..n]).is_err());
    }
}

#[test]
fn a_huge_count_allocates_nothing() {
    let mut b = Reply::Dir(Vec::new()).encode(1);
    b.truncate(9);
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(Reply::decode(&b), Err(Malformed));
}

#[test]
fn a_pull_of_too_many_ranges_is_refused() {
    let pull = |n| Request::Pull {
        token: [7; 16],
        ino: 2,
        change: 3,
        ranges: vec![(0, 4096); n],
    };
    assert!(Request::decode(&pull(MAX_PULL_RANGES).encode(1)).is_ok());
    assert_eq!(
        Request::decode(&pull(MAX_PULL_RANGES + 1).encode(1)),
        Err(Malformed)
    );
}

/// A seek and its answer, byte for byte (the seeds of the fuzz corpus
/// `fuzz/corpus/remote_message` hold these): kind 35, sequence number, inode, offset, then 0
/// for data and 1 for a hole; the answer is kind 16 and the offset.
#[test]
fn a_seek_and_its_answer_are_as_documented() {
    let mut want = vec![35];
    for v in [7u64, 2, 4096] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    want.push(1);
    let seek = Request::Seek {
        ino: 2,
        off: 4096,
        to: Seek::Hole,
    };
    assert_eq!(seek.encode(7), want);
    assert_eq!(Request::decode(&want), Ok((7, seek)));
    *want.last_mut().unwrap() = 2;
    assert_eq!(Request::decode(&want), Err(Malformed));
    let mut offset = vec![16];
    offset.extend_from_slice(&7u64.to_le_bytes());
    offset.extend_from_slice(&8192u64.to_le_bytes());
    assert_eq!(Reply::Offset(8192).encode(7), offset);
}
