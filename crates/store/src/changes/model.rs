//! The change-word mirror ([`Changes::mirror`]) under shuttle's randomized and PCT schedulers,
//! with the real table on shuttle's atomics and lock (`crate::sync` under `--cfg shuttle`).
//!
//! Modelled: two committers bumping one word (a file both change) and one of another, the
//! server making the mirror while they run, a reader outside the process loading the
//! mirrored word again and again (a remote client checking its map), and the server ending
//! the mirror.
//!
//! Checked: a mirrored word never falls and never passes the table's word (a reader that
//! found its map's word again after reading blocks read them before any later commit freed
//! them); once made, the mirror holds every word the table holds when the committers are
//! done; after its end, bumps leave it alone.

use shuttle::sync::Arc;
use shuttle::thread;

use super::{Changes, CHANGE_WORDS};
use crate::sync::{AtomicU64, Ordering};

fn scenario() {
    let c = Arc::new(Changes::default());
    let mirror: Arc<Vec<AtomicU64>> = Arc::new(
        (0..CHANGE_WORDS)
            .map(|_| AtomicU64::new(u64::MAX))
            .collect(),
    );
    let bumpers: Vec<_> = [1u64, 1 + CHANGE_WORDS as u64, 2]
        .into_iter()
        .map(|ino| {
            let c = c.clone();
            thread::spawn(move || {
                for _ in 0..2 {
                    c.bump(ino);
                }
            })
        })
        .collect();
    let server = {
        let (c, m) = (c.clone(), mirror.clone());
        // SAFETY: the words live in `mirror`, held by this scenario past `unmirror`.
        thread::spawn(move || unsafe { c.mirror(m.as_ptr() as *mut u8) })
    };
    let reader = {
        let (c, m) = (c.clone(), mirror.clone());
        thread::spawn(move || {
            let mut last = 0;
            for _ in 0..6 {
                let seen = m[1].load(Ordering::SeqCst);
                if seen == u64::MAX {
                    continue; // not mirrored yet
                }
                assert!(seen >= last, "a mirrored word fell: {last} then {seen}");
                assert!(seen <= c.word(1), "a mirrored word passed the table's");
                last = seen;
            }
        })
    };
    for b in bumpers {
        b.join().unwrap();
    }
    server.join().unwrap();
    reader.join().unwrap();
    for w in 0..CHANGE_WORDS as u64 {
        assert_eq!(
            mirror[w as usize].load(Ordering::SeqCst),
            c.word(w),
            "word {w}"
        );
    }
    c.unmirror();
    c.bump(2);
    assert_eq!(
        mirror[2].load(Ordering::SeqCst) + 1,
        c.word(2),
        "bumped after its end"
    );
}

#[test]
fn the_mirror_follows_the_table_random_schedules() {
    shuttle::check_random(scenario, 3000);
}

#[test]
fn the_mirror_follows_the_table_pct_schedules() {
    shuttle::check_pct(scenario, 3000, 3);
}
