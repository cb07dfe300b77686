//! INFO: the sections and fields monitoring tools read, as Redis names them (`redis_version`,
//! `used_memory`, `connected_clients`, `total_commands_processed`, `used_cpu_sys`,
//! `cmdstat_*`, `db0:keys=...`), and the server's own: the pool, and what writes cost in
//! persists.
//!
//! `used_memory` is the pool's allocated bytes (the data set lives there, not in the
//! process's heap) and `maxmemory` the pool's heap size; `used_memory_rss` is the process's
//! resident memory.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use crate::shared::Shared;

/// The sections INFO knows, in the order it prints them, and whether `INFO` alone (or
/// `default`) prints each; `all` and `everything` print them all.
/// The Redis version whose replies the server follows (what `HELLO` and `INFO` report).
pub(crate) const REDIS_VERSION: &str = "7.0.15";

const SECTIONS: [(&str, bool); 10] = [
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("commandstats", false),
    ("keyspace", true),
    ("pool", true),
];

/// The INFO text for the sections asked for (the default ones for none); `commands` names
/// the server's commands in the order of their counters (`commandstats`).
pub(crate) fn render(shared: &Shared, asked: &[Bytes], commands: &[&str]) -> String {
    let asked_for = |word: &str| {
        asked
            .iter()
            .any(|a| a.eq_ignore_ascii_case(word.as_bytes()))
    };
    let every = asked_for("all") || asked_for("everything");
    let defaults = asked.is_empty() || asked_for("default");
    let mut text = String::new();
    for (section, by_default) in SECTIONS {
        if !(every || (defaults && by_default) || asked_for(section)) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        // Redis's headings: `# Server`, ..., `# CPU`.
        let mut title = section.to_string();
        if section == "cpu" {
            title.make_ascii_uppercase();
        } else {
            title[..1].make_ascii_uppercase();
        }
        let _ = write!(text, "# {title}\r\n");
        for (field, value) in fields(shared, section, commands) {
            let _ = write!(text, "{field}:{value}\r\n");
        }
    }
    text
}

/// Bytes as Redis's `bytesToHuman` writes them (`1.50M`).
fn human(bytes: u64) -> String {
    let units = [("B", 1u64), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)];
    let (unit, size) = units
        .iter()
        .rev()
        .find(|&&(_, size)| bytes >= size)
        .copied()
        .unwrap_or(("B", 1));
    if size == 1 {
        format!("{bytes}B")
    } else {
        format!("{:.2}{unit}", bytes as f64 / size as f64)
    }
}

/// The process's resident memory, from `/proc` (0 where there is none).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let kib = line.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?;
                kib.trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kib| kib * 1024)
}

/// CPU seconds the process has used in the kernel and in user space.
fn cpu_times() -> (Duration, Duration) {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let time = |t: nix::sys::time::TimeVal| {
                Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
            };
            (time(usage.system_time()), time(usage.user_time()))
        }
        Err(_) => (Duration::ZERO, Duration::ZERO),
    }
}

fn seconds(time: Duration) -> String {
    format!("{}.{:06}", time.as_secs(), time.subsec_micros())
}

fn fields(shared: &Shared, section: &str, commands: &[&str]) -> Vec<(String, String)> {
    let mut fields: Vec<(&str, String)> = Vec::new();
    let totals = shared.db.counters.totals();
    match section {
        "server" => {
            let uptime = shared.started.elapsed().as_secs();
            fields.extend([
                ("redis_version", REDIS_VERSION.into()),
                ("redis_mode", "standalone".into()),
                ("server_name", "pmem-kv-server".into()),
                ("server_version", env!("CARGO_PKG_VERSION").into()),
                ("os", std::env::consts::OS.into()),
                ("arch_bits", (usize::BITS).to_string()),
                ("process_id", std::process::id().to_string()),
                ("tcp_port", shared.addr.port().to_string()),
                ("uptime_in_seconds", uptime.to_string()),
                ("uptime_in_days", (uptime / 86_400).to_string()),
                ("worker_threads", shared.threads.to_string()),
            ]);
        }
        "clients" => fields.extend([
            (
                "connected_clients",
                shared.clients.load(Ordering::Relaxed).to_string(),
            ),
            ("blocked_clients", "0".into()),
            ("maxclients", shared.limits.max_connections.to_string()),
            ("max_value_bytes", shared.limits.max_value_bytes.to_string()),
            ("max_args", shared.limits.max_args.to_string()),
        ]),
        "memory" => {
            let (used, total) = pool_bytes(shared);
            let rss = resident_bytes();
            fields.extend([
                ("used_memory", used.to_string()),
                ("used_memory_human", human(used)),
                ("used_memory_rss", rss.to_string()),
                ("used_memory_rss_human", human(rss)),
                ("maxmemory", total.to_string()),
                ("maxmemory_human", human(total)),
                ("maxmemory_policy", "noeviction".into()),
                ("mem_allocator", "pmem-structures".into()),
            ]);
        }
        "persistence" => {
            let (keys, fences, flushes) = (totals.keys_written, totals.fences, totals.flushes);
            let per = |n: u64| {
                if keys == 0 {
                    "0.00".to_string()
                } else {
                    format!("{:.2}", n as f64 / keys as f64)
                }
            };
            fields.extend([
                ("loading", "0".into()),
                (
                    "durable_when",
                    "a write is durable before its reply is sent".into(),
                ),
                ("keys_written", keys.to_string()),
                ("fences", fences.to_string()),
                ("flushes", flushes.to_string()),
                ("fences_per_write", per(fences)),
                ("flushes_per_write", per(flushes)),
            ]);
        }
        "stats" => fields.extend([
            (
                "total_connections_received",
                shared
                    .connections_received
                    .load(Ordering::Relaxed)
                    .to_string(),
            ),
            ("total_commands_processed", totals.commands.to_string()),
            (
                "rejected_connections",
                shared
                    .rejected_connections
                    .load(Ordering::Relaxed)
                    .to_string(),
            ),
            ("total_error_replies", totals.errors.to_string()),
        ]),
        "replication" => {
            fields.extend([("role", "master".into()), ("connected_slaves", "0".into())])
        }
        "cpu" => {
            let (system, user) = cpu_times();
            fields.extend([
                ("used_cpu_sys", seconds(system)),
                ("used_cpu_user", seconds(user)),
                ("used_cpu_sys_children", seconds(Duration::ZERO)),
                ("used_cpu_user_children", seconds(Duration::ZERO)),
            ]);
        }
        "commandstats" => {
            return command_stats(shared, commands);
        }
        "keyspace" => {
            let keys = shared.db.with_map(|map| map.len()).unwrap_or(0);
            // As in Redis, a database without keys has no line.
            if keys > 0 {
                let expires = shared.db.deadline_count();
                let average = shared.db.average_ttl(crate::expiry::now_ms());
                fields.push((
                    "db0",
                    format!("keys={keys},expires={expires},avg_ttl={average}"),
                ));
            }
        }
        "pool" => {
            let store = shared.db.store();
            let space = store.space();
            let path = store
                .path()
                .map_or_else(|| "(anonymous)".into(), |p| p.display().to_string());
            fields.extend([
                ("pool_path", path),
                ("pool_granularity", shared.granularity.name().into()),
                ("pool_heap_bytes", space.capacity.to_string()),
                ("pool_used_bytes", space.used.to_string()),
                ("pool_free_bytes", space.free.to_string()),
                ("pool_used_percent", format!("{:.2}", space.used_percent())),
                ("pool_records", space.records.to_string()),
            ]);
        }
        _ => {}
    }
    fields
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

/// The pool's allocated bytes and its heap's size.
fn pool_bytes(shared: &Shared) -> (u64, u64) {
    let space = shared.db.store().space();
    (space.used, space.capacity)
}

/// `cmdstat_<name>:calls=..,usec=..,usec_per_call=..,rejected_calls=..,failed_calls=..` for
/// every command that was asked for at least once.
fn command_stats(shared: &Shared, commands: &[&str]) -> Vec<(String, String)> {
    commands
        .iter()
        .enumerate()
        .filter_map(|(index, name)| {
            let counts = shared.db.counters.command_totals(index);
            if counts.calls == 0 && counts.failed == 0 && counts.rejected == 0 {
                return None;
            }
            let per_call = if counts.calls == 0 {
                0.0
            } else {
                counts.micros as f64 / counts.calls as f64
            };
            Some((
                format!("cmdstat_{name}"),
                format!(
                    "calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
                    counts.calls, counts.micros, counts.rejected, counts.failed
                ),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_as_redis_writes_them() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(3 << 20), "3.00M");
        assert_eq!(human(5 << 30), "5.00G");
    }
}
