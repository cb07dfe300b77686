//! Thread placement for helper threads: the one place in this crate that calls the OS
//! directly, and so the only `unsafe` in it.

/// The CPU the calling thread runs on, if the OS says.
pub(crate) fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu takes no arguments and has no preconditions.
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Pin the calling thread to an allowed CPU other than `avoid`, if there is one. Best effort:
/// on failure the thread stays where the scheduler puts it.
pub(crate) fn pin_away_from(avoid: Option<usize>) {
    #[cfg(target_os = "linux")]
    {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: cpu_set_t is plain data, for which all-zero bytes are the empty set.
        let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `allowed` is a valid, writable cpu_set_t of `size` bytes; pid 0 is this thread.
        if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
            return;
        }
        let mut cpus = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity, and `allowed` is initialised.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &allowed) });
        let Some(target) = cpus.find(|&c| Some(c) != avoid) else {
            return;
        };
        // SAFETY: as above, all-zero bytes are the empty set.
        let mut only: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `target` came from the filter above, so it is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(target, &mut only) };
        // SAFETY: `only` is a valid cpu_set_t of `size` bytes; pid 0 is this thread. A failure
        // leaves the thread's affinity as it was, which is acceptable here.
        unsafe { libc::sched_setaffinity(0, size, &only) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = avoid;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_away_from_the_avoided_cpu_when_it_can() {
        let avoid = current_cpu();
        assert!(avoid.is_some(), "sched_getcpu answered nothing on Linux");
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::thread::spawn(move || {
            pin_away_from(avoid);
            if online > 1 {
                assert_ne!(current_cpu(), avoid);
            }
        })
        .join()
        .unwrap();
    }
}
