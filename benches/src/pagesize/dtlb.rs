//! A counter of data-TLB load misses from `perf_event_open`, or why there is none.
//!
//! The counter is the generic hardware-cache event `dTLB` / read / miss, counted in user mode
//! only (`exclude_kernel`, which `perf_event_paranoid` 2 still allows), for the calling thread
//! and the threads it starts while the counter runs (`inherit`). A machine without hardware
//! counters (most virtual machines) refuses to open it: the benchmark then prints the reason.

use std::io;

/// `perf_event_attr` as the kernel reads it (the fields up to `config2`, 72 bytes: size
/// `PERF_ATTR_SIZE_VER1`, which every kernel since 2.6.33 accepts).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// disabled (bit 0), inherit (1), exclude_kernel (5), exclude_hv (6).
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
}

const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_COUNT_HW_CACHE_DTLB: u64 = 3;
const PERF_COUNT_HW_CACHE_OP_READ: u64 = 0;
const PERF_COUNT_HW_CACHE_RESULT_MISS: u64 = 1;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_INHERIT: u64 = 1 << 1;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// `_IO('$', 0)`, `_IO('$', 1)`, `_IO('$', 3)`.
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;

/// An open dTLB load-miss counter.
#[derive(Debug)]
pub struct DtlbCounter {
    fd: libc::c_int,
}

impl DtlbCounter {
    /// Open the counter (stopped), or say why it cannot be had here.
    pub fn open() -> Result<DtlbCounter, String> {
        let attr = PerfEventAttr {
            kind: PERF_TYPE_HW_CACHE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_HW_CACHE_DTLB
                | (PERF_COUNT_HW_CACHE_OP_READ << 8)
                | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16),
            flags: FLAG_DISABLED | FLAG_INHERIT | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            ..PerfEventAttr::default()
        };
        // SAFETY: `attr` is a valid, initialised perf_event_attr of the size it declares; the
        // other arguments are plain integers (this thread, any CPU, no group, no flags).
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                0 as libc::c_ulong,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                    "this CPU or hypervisor exposes no dTLB counter (as in most virtual machines)"
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    "perf_event_paranoid or a seccomp policy forbids counters"
                }
                Some(libc::ENOSYS) => "the kernel has no perf_event_open",
                _ => "perf_event_open refused",
            };
            return Err(format!(
                "perf_event_open(dTLB read misses) failed: {e}: {why}"
            ));
        }
        Ok(DtlbCounter {
            fd: fd as libc::c_int,
        })
    }

    fn ioctl(&self, request: libc::c_ulong) -> io::Result<()> {
        // SAFETY: `fd` is an open perf event descriptor owned by `self`; these requests take
        // no argument.
        if unsafe { libc::ioctl(self.fd, request as _, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The misses counted while `f` ran (on this thread and the threads it started), and what
    /// `f` returned.
    pub fn count<R>(&self, f: impl FnOnce() -> R) -> io::Result<(u64, R)> {
        self.ioctl(PERF_EVENT_IOC_RESET)?;
        self.ioctl(PERF_EVENT_IOC_ENABLE)?;
        let result = f();
        self.ioctl(PERF_EVENT_IOC_DISABLE)?;
        let mut value = 0u64;
        // SAFETY: reading 8 bytes (the counter, read_format 0) into a u64 owned here.
        let n = unsafe { libc::read(self.fd, (&mut value as *mut u64).cast(), 8) };
        if n != 8 {
            return Err(io::Error::last_os_error());
        }
        Ok((value, result))
    }
}

impl Drop for DtlbCounter {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by `self` and closed once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_counts_or_says_why_it_cannot() {
        match DtlbCounter::open() {
            Ok(counter) => {
                // 64 MiB touched a page at a time: far past any TLB's reach.
                let buf = vec![1u8; 64 << 20];
                let (misses, sum) = counter
                    .count(|| buf.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>())
                    .unwrap();
                assert_eq!(sum, (64 << 20) / 4096);
                assert!(misses > 0, "no dTLB miss over 16384 pages");
            }
            Err(reason) => {
                assert!(reason.starts_with("perf_event_open"), "{reason}");
                println!("not available: {reason}");
            }
        }
    }
}
