//! CPU time of the whole process (all threads, engine workers included).

use std::time::Duration;

/// User + system CPU time consumed by every thread of this process so far.
pub fn process() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass and reads nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
