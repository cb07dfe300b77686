//! INFO: the server, its clients, the keyspace, the pool and what writes cost in persists.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::server::Shared;

/// The sections INFO knows, in the order it prints them.
const SECTIONS: [&str; 5] = ["server", "clients", "keyspace", "pool", "persistence"];

/// The INFO text for the sections asked for (all of them for none, `all` or `everything`).
pub(crate) fn render(shared: &Shared, asked: &[Bytes]) -> String {
    let wanted = |section: &str| {
        asked.is_empty()
            || asked.iter().any(|a| {
                a.eq_ignore_ascii_case(section.as_bytes())
                    || a.eq_ignore_ascii_case(b"all")
                    || a.eq_ignore_ascii_case(b"everything")
                    || a.eq_ignore_ascii_case(b"default")
            })
    };
    let mut text = String::new();
    for section in SECTIONS.into_iter().filter(|s| wanted(s)) {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let mut title = section.to_string();
        title[..1].make_ascii_uppercase();
        let _ = write!(text, "# {title}\r\n");
        for (field, value) in fields(shared, section) {
            let _ = write!(text, "{field}:{value}\r\n");
        }
    }
    text
}

fn fields(shared: &Shared, section: &str) -> Vec<(&'static str, String)> {
    match section {
        "server" => vec![
            ("server_name", "pmem-kv-server".into()),
            ("server_version", env!("CARGO_PKG_VERSION").into()),
            ("redis_mode", "standalone".into()),
            ("tcp_port", shared.addr.port().to_string()),
            ("process_id", std::process::id().to_string()),
            (
                "uptime_in_seconds",
                shared.started.elapsed().as_secs().to_string(),
            ),
            ("worker_threads", shared.threads.to_string()),
        ],
        "clients" => vec![
            (
                "connected_clients",
                shared.clients.load(Ordering::Relaxed).to_string(),
            ),
            ("maxclients", shared.limits.max_connections.to_string()),
            ("max_value_bytes", shared.limits.max_value_bytes.to_string()),
            ("max_args", shared.limits.max_args.to_string()),
            (
                "total_commands_processed",
                shared.db.counters.totals().commands.to_string(),
            ),
        ],
        "keyspace" => {
            let keys = shared.db.with_map(|map| map.len()).unwrap_or(0);
            vec![
                ("keys", keys.to_string()),
                ("db0", format!("keys={keys},expires=0,avg_ttl=0")),
            ]
        }
        "pool" => {
            let store = shared.db.store();
            let stats = store.heap().alloc_stats();
            let used = stats.bytes_allocated;
            let total = used + stats.bytes_free;
            let path = store
                .path()
                .map_or_else(|| "(anonymous)".into(), |p| p.display().to_string());
            vec![
                ("pool_path", path),
                ("pool_granularity", shared.granularity.name().into()),
                ("pool_heap_bytes", total.to_string()),
                ("pool_used_bytes", used.to_string()),
                ("pool_free_bytes", stats.bytes_free.to_string()),
                (
                    "pool_used_percent",
                    format!("{:.2}", 100.0 * used as f64 / total.max(1) as f64),
                ),
                ("pool_records", stats.record_objects.to_string()),
            ]
        }
        "persistence" => {
            let totals = shared.db.counters.totals();
            let (keys, fences, flushes) = (totals.keys_written, totals.fences, totals.flushes);
            let per = |n: u64| {
                if keys == 0 {
                    "0.00".to_string()
                } else {
                    format!("{:.2}", n as f64 / keys as f64)
                }
            };
            vec![
                (
                    "durable_when",
                    "a write is durable before its reply is sent".into(),
                ),
                ("keys_written", keys.to_string()),
                ("fences", fences.to_string()),
                ("flushes", flushes.to_string()),
                ("fences_per_write", per(fences)),
                ("flushes_per_write", per(flushes)),
            ]
        }
        _ => Vec::new(),
    }
}
