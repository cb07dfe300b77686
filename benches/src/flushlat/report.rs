//! The two sections' tables, as text and markdown, with the papers' figures beside ours.

use super::perc::PercResults;
use super::rap::RapResults;
use super::{FlushResults, Skipped};
use crate::report::Block;

/// Whether a load after a persist looks like a cache hit or like a miss to memory: the midpoint
/// between the hit and cold medians (cycles) decides.
pub fn eviction_verdict(hit: u64, cold: u64, after: u64) -> &'static str {
    if cold <= hit {
        "undecided (cold loads were no slower than hits)"
    } else if after <= hit + (cold - hit) / 2 {
        "kept in the cache (load near a hit)"
    } else {
        "evicted (load near a miss to memory)"
    }
}

fn skipped_lines(skipped: &[Skipped]) -> Vec<String> {
    skipped
        .iter()
        .map(|s| format!("skipped: {}: {}", s.variant, s.reason))
        .collect()
}

fn machine_block(r: &FlushResults) -> Block {
    let caches = if r.caches.is_empty() {
        r.caches_unavailable.clone().unwrap_or_default()
    } else {
        r.caches
            .iter()
            .map(|c| {
                format!(
                    "{} {} KiB, {}-way, {} sets x {} B (set stride {} KiB)",
                    c.label(),
                    c.bytes() >> 10,
                    c.ways,
                    c.sets,
                    c.line_bytes,
                    c.set_stride() >> 10
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Block {
        title: Some("flush and load micro-benchmarks: what they ran on".to_string()),
        header: vec!["", ""],
        rows: vec![
            vec!["CPU".to_string(), r.cpu_model.clone()],
            vec!["logical cores".to_string(), r.cores.to_string()],
            vec!["flush instructions".to_string(), r.flushes.join(", ")],
            vec![
                "TSC rate".to_string(),
                format!("{:.3} GHz (measured)", r.tsc_ghz),
            ],
            vec!["memory".to_string(), r.memory.clone()],
            vec!["caches (cpu0, sysfs)".to_string(), caches],
        ],
        text_columns: &[0, 1],
        group_gaps: false,
        legend: Vec::new(),
    }
}

fn rap_block(r: &RapResults) -> Block {
    let median_of = |variant: &str, delay: u64| {
        r.rows
            .iter()
            .find(|row| row.variant == variant && row.delay_ns == delay)
            .map(|row| row.median_cycles)
    };
    let mut legend = vec![format!(
        "each row: {} lines {} B apart, each loaded once per round in a random order, {} \
         rounds; cycles include the timing window (empty window: median {} cycles); the load \
         reads word 7 of the line, the store wrote word 0",
        r.lines, r.spacing_bytes, r.rounds, r.timer_overhead_cycles
    )];
    let hit = median_of("cache hit (line just loaded)", 0);
    let cold = median_of("cold (clflushed long before)", 0);
    let longest = super::rap::DELAYS_NS.iter().copied().max().unwrap_or(0);
    if let (Some(hit), Some(cold)) = (hit, cold) {
        // Right after the fence the load may still find the line before the flush has taken
        // it (loads are not ordered after sfence), so the verdict reads the longest delay.
        for row in r
            .rows
            .iter()
            .filter(|row| row.delay_ns == longest && row.variant != "store, no flush")
        {
            let at_once = median_of(&row.variant, 0).unwrap_or(0);
            legend.push(format!(
                "{}: load after {} us: median {} cycles (at once: {}) against hit {} and cold \
                 {}: {}",
                row.variant,
                longest / 1000,
                row.median_cycles,
                at_once,
                hit,
                cold,
                eviction_verdict(hit, cold, row.median_cycles)
            ));
        }
    }
    legend.push(
        "Optane buffering (EuroSys'22), Sec. 3.5 (Fig. 7), loads at a RAP distance from the line \
         being persisted: on G1 Optane clwb and nt-store delay a following load of the same \
         address up to 2,500 cycles (3,200 remote), about 10x the on-DIMM buffer latency; on \
         DRAM the gap is 2x. clwb + sfence at distance <= 1 stays low, then jumps to \
         800/1,000 cycles (G1 clwb invalidates). On G2 clwb no longer invalidates, and only \
         nt-stores keep the long delay. Here the memory is DRAM, not Optane."
            .to_string(),
    );
    legend.extend(skipped_lines(&r.skipped));
    Block {
        title: Some("read-after-persist: one load of a line after its persist (DRAM)".to_string()),
        header: vec![
            "before the load",
            "delay ns",
            "loads",
            "median cyc",
            "p90 cyc",
            "median ns",
            "p90 ns",
        ],
        rows: r
            .rows
            .iter()
            .map(|row| {
                vec![
                    row.variant.clone(),
                    row.delay_ns.to_string(),
                    row.samples.to_string(),
                    row.median_cycles.to_string(),
                    row.p90_cycles.to_string(),
                    format!("{:.1}", row.median_ns),
                    format!("{:.1}", row.p90_ns),
                ]
            })
            .collect(),
        text_columns: &[0],
        group_gaps: true,
        legend,
    }
}

fn perc_blocks(r: &PercResults) -> Vec<Block> {
    let net = |ns: f64| format!("{:.1}", ns - r.empty_loop_ns);
    let empty = format!(
        "net: minus the empty loop ({:.2} ns per iteration, the same loop with no memory work; \
         PERC, Sec. 3.3.2: the no-op test); medians over {} rounds",
        r.empty_loop_ns, r.rounds
    );
    let fence = Block {
        title: Some(format!(
            "perc: a fence every N flushes ({} distinct lines, each stored to and flushed)",
            r.fence_lines
        )),
        header: vec!["flush", "sfence every", "ns/line", "net ns/line"],
        rows: r
            .fence_rows
            .iter()
            .map(|row| {
                vec![
                    row.flush.clone(),
                    row.fence_every
                        .map_or("never".to_string(), |n| n.to_string()),
                    format!("{:.1}", row.ns_per_line),
                    net(row.ns_per_line),
                ]
            })
            .collect(),
        text_columns: &[0],
        group_gaps: true,
        legend: vec![
            empty.clone(),
            "PERC, Sec. 4.3.3 (Fig. 4.20-4.21, Optane, Skylake): clflushopt improves as the fence \
             period grows, with minimal gain past one sfence per four writes; Sec. 4.6.3 \
             (Fig. 4.28-4.29): periodic fences without flushes look much the same."
                .to_string(),
        ],
    };
    let sets = Block {
        title: Some(
            "perc: lines of one cache set against different sets (each visit: counter + 1, then \
             the persist; same set: lines one set stride apart; different: stride + 64 B)"
                .to_string(),
        ),
        header: vec![
            "level",
            "stride KiB",
            "layout",
            "lines",
            "visit",
            "ns/line",
            "net ns/line",
        ],
        rows: r
            .set_rows
            .iter()
            .map(|row| {
                vec![
                    row.level.clone(),
                    (row.set_stride_bytes >> 10).to_string(),
                    row.layout.clone(),
                    row.lines.to_string(),
                    row.persist.clone(),
                    format!("{:.1}", row.ns_per_line),
                    net(row.ns_per_line),
                ]
            })
            .collect(),
        text_columns: &[0, 2, 4],
        group_gaps: true,
        legend: vec![
            empty.clone(),
            "PERC, Sec. 4.3.1: same set = same offset in 4 KiB pages (an L1 set); Sec. 4.5.2 \
             (Fig. 4.25): clwb on one set converges to about 19 ticks per write, 16 for the \
             8-entry list; Sec. 4.3.2: unflushed lists slow down at 64 entries."
                .to_string(),
        ],
    };
    let chase = Block {
        title: Some(format!(
            "perc: pointer chasing over {} lines in one random cycle",
            r.chase_nodes
        )),
        header: vec!["visit", "ns/node", "net ns/node"],
        rows: r
            .chase_rows
            .iter()
            .map(|row| {
                vec![
                    row.variant.clone(),
                    format!("{:.1}", row.ns_per_node),
                    net(row.ns_per_node),
                ]
            })
            .collect(),
        text_columns: &[0],
        group_gaps: false,
        legend: vec![
            empty,
            "PERC, Sec. 4.6.1-4.6.2 (Fig. 4.26-4.27): lists of one line per page (one set); the \
             flushed walks cost so much more that the unflushed ones vanish in the chart."
                .to_string(),
        ],
    };
    let mut blocks = vec![fence, sets, chase];
    if let Some(last) = blocks.last_mut() {
        last.legend.extend(skipped_lines(&r.skipped));
    }
    blocks
}

/// The tables, in print order.
pub fn blocks(r: &FlushResults) -> Vec<Block> {
    let mut blocks = vec![machine_block(r)];
    if let Some(rap) = &r.read_after_persist {
        blocks.push(rap_block(rap));
    }
    if let Some(perc) = &r.perc {
        blocks.extend(perc_blocks(perc));
    }
    blocks
}

/// The tables as text.
pub fn text(r: &FlushResults) -> String {
    blocks(r)
        .iter()
        .map(|b| format!("{}\n", b.text()))
        .collect()
}

/// The tables as markdown.
pub fn markdown(r: &FlushResults) -> String {
    blocks(r).iter().map(Block::markdown).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_follows_the_midpoint() {
        assert!(eviction_verdict(50, 350, 60).starts_with("kept"));
        assert!(eviction_verdict(50, 350, 300).starts_with("evicted"));
        assert!(eviction_verdict(50, 350, 200).starts_with("kept"));
        assert!(eviction_verdict(50, 40, 300).starts_with("undecided"));
    }
}
