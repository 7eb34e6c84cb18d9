//! Which CPUs the `threads` engine's workers take, and which that leaves to callers.
//!
//! Workers take the process's allowed CPUs from the last down (worker `i` the `i`-th from the
//! end), callers keep the first ones. A worker on a caller's CPU only time-shares it: with
//! the caller and the worker on one core, a synchronous offloaded copy starts once the
//! caller stops polling for its completion and yields the core (49 µs here, against 0.2 µs
//! from another core), and `tune` measured offloading at 0.97× the CPU at every size and
//! wrote "never". The CPUs are read from the affinity mask, not counted from 0: under
//! `taskset -c 1` a worker pinned to "CPU n − 1" of one CPU left the set the user allowed.

/// The CPUs this thread may run on (its affinity mask), ascending; empty where the mask
/// cannot be read.
pub fn allowed() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data, zeroed is a valid empty set; sched_getaffinity(0)
    // writes at most its size into it and reads only the calling thread's mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The CPU the calling thread is running on now (it may move right after), or `None` where
/// the kernel cannot say.
pub fn current() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// The CPU worker `index` is pinned to, of the `allowed` CPUs: the `index`-th from the end
/// (wrapping); `None` without any.
pub fn worker_cpu(allowed: &[usize], index: usize) -> Option<usize> {
    let n = allowed.len();
    (n > 0).then(|| allowed[n - 1 - index % n])
}

/// The `allowed` CPUs that none of `workers` pinned workers takes, ascending (empty where the
/// workers take them all).
pub fn free_cpus(allowed: &[usize], workers: usize) -> Vec<usize> {
    let taken = workers.min(allowed.len());
    allowed[..allowed.len() - taken].to_vec()
}

/// Pins the calling thread to the CPUs `cpus` (those past `CPU_SETSIZE` are ignored); a
/// failure (a cpuset without any of them) leaves it as it was.
pub fn pin_current(cpus: &[usize]) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it (each cpu < CPU_SETSIZE,
    // checked); sched_setaffinity(0) affects only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_take_the_allowed_cpus_from_the_last_and_callers_keep_the_rest() {
        let two = [0, 1];
        assert_eq!(worker_cpu(&two, 0), Some(1));
        assert_eq!(worker_cpu(&two, 1), Some(0));
        assert_eq!(worker_cpu(&two, 2), Some(1));
        assert_eq!(free_cpus(&two, 1), [0]);
        assert!(free_cpus(&two, 2).is_empty());
        assert!(free_cpus(&two, 3).is_empty());
        // A mask that is not 0..n (taskset -c 2,5,7): the CPUs named, never others.
        let odd = [2, 5, 7];
        assert_eq!(worker_cpu(&odd, 0), Some(7));
        assert_eq!(worker_cpu(&odd, 1), Some(5));
        assert_eq!(free_cpus(&odd, 1), [2, 5]);
        // One CPU (taskset -c 1): the worker stays on it.
        assert_eq!(worker_cpu(&[1], 0), Some(1));
        assert!(free_cpus(&[1], 1).is_empty());
        assert_eq!(worker_cpu(&[], 0), None);
    }

    #[test]
    fn this_thread_runs_on_a_cpu_its_mask_allows() {
        let a = allowed();
        assert!(!a.is_empty());
        // SAFETY: sched_getcpu has no preconditions.
        let now = unsafe { libc::sched_getcpu() };
        assert!(a.contains(&(now as usize)), "{now} not in {a:?}");
    }
}
