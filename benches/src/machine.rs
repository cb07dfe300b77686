//! What the report says about the machine and the memory it measured.

use pmem_ordering::Granularity;
use serde::Serialize;

/// The machine a run was made on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Machine {
    /// The host name.
    pub hostname: String,
    /// The CPU model, from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Logical cores available to this process.
    pub cores: usize,
}

impl Machine {
    /// Describe this machine.
    pub fn detect() -> Machine {
        Machine {
            hostname: hostname().unwrap_or_else(|| "(host name unavailable)".to_string()),
            cpu_model: cpu_model()
                .unwrap_or_else(|| "(CPU model unavailable: no /proc/cpuinfo)".to_string()),
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!name.is_empty()).then_some(name)
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    // x86 says "model name"; some other architectures say "Processor", "cpu model" or "cpu".
    ["model name", "Processor", "cpu model", "cpu"]
        .iter()
        .find_map(|key| {
            info.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

/// A plain statement of what `granularity` means for the results; `tmpfs` says whether the
/// pool's directory is on tmpfs (`None`: unknown).
pub fn granularity_note(granularity: Granularity, tmpfs: Option<bool>) -> String {
    let medium = match tmpfs {
        Some(true) => "a tmpfs file, i.e. DRAM",
        Some(false) => "a file in the page cache",
        None => "a file of unknown medium",
    };
    match granularity {
        Granularity::Emulated => format!(
            "emulated granularity on {medium}: flushes and fences are issued as on persistent \
             memory, but this is NOT persistent memory and nothing survives a power failure"
        ),
        Granularity::Page => format!(
            "page granularity on {medium}: every persist ends in msync; this is NOT persistent \
             memory"
        ),
        Granularity::CacheLine => {
            "cache-line granularity: a DAX file mapped with MAP_SYNC (persistent memory)".into()
        }
        Granularity::Byte => {
            "byte granularity (eADR): flushes skipped, fences kept (forced or detected)".into()
        }
    }
}

/// The 1, 5 and 15-minute load averages, from `/proc/loadavg` (`None` where it is missing or
/// unreadable).
pub fn load_average() -> Option<[f64; 3]> {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// The first three numbers of a `/proc/loadavg` line.
fn parse_load_average(line: &str) -> Option<[f64; 3]> {
    let mut fields = line.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_averages_are_the_first_three_fields() {
        assert_eq!(
            parse_load_average("4.38 4.19 3.71 3/512 12345\n"),
            Some([4.38, 4.19, 3.71])
        );
        assert_eq!(parse_load_average("4.38 x 3.71"), None);
        assert_eq!(parse_load_average("4.38"), None);
    }
}
