//! `INFO [section ...]`: `server`, `clients`, `replication` (Redis's fields, the Raft leader
//! as the master and its followers as replicas, offsets as log indexes) and `raft` (the
//! node's Raft state). No argument, `all`, `default` and `everything` give every section.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use openraft::type_config::async_runtime::WatchReceiver;
use openraft::{RaftMetrics, ServerState};
use pmem_kv_server::protocol::Reply;

use super::routing::redis_id;
use super::NodeShared;
use crate::types::KvRaft;

const SECTIONS: [&str; 4] = ["server", "clients", "replication", "raft"];

/// The reply to `INFO args[1..]`.
pub(crate) fn reply(shared: &NodeShared, args: &[Bytes]) -> Reply {
    let asked: Vec<String> = args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let every = asked.is_empty()
        || asked
            .iter()
            .any(|a| matches!(a.as_str(), "all" | "default" | "everything"));
    let metrics = shared.raft.metrics().borrow_watched().clone();
    let mut text = String::new();
    for section in SECTIONS {
        if !every && !asked.iter().any(|a| a == section) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        match section {
            "server" => server(shared, &mut text),
            "clients" => clients(shared, &mut text),
            "replication" => replication(shared, &metrics, &mut text),
            _ => raft(shared, &metrics, &mut text),
        }
    }
    Reply::Verbatim(text)
}

fn server(shared: &NodeShared, out: &mut String) {
    let (_, port) = shared.member.client.rsplit_once(':').unwrap_or(("", "0"));
    let _ = write!(
        out,
        "# Server\r\nredis_version:7.2.0\r\npmem_kv_version:{}\r\nredis_mode:cluster\r\nprocess_id:{}\r\ntcp_port:{port}\r\nuptime_in_seconds:{}\r\npool:{}\r\ngranularity:{:?}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        shared.started.elapsed().as_secs(),
        shared.pool.display(),
        shared.granularity,
    );
}

fn clients(shared: &NodeShared, out: &mut String) {
    let _ = write!(
        out,
        "# Clients\r\nconnected_clients:{}\r\ntotal_connections_received:{}\r\n",
        shared.clients.load(Ordering::Relaxed),
        shared.connections.load(Ordering::Relaxed),
    );
}

fn index(log_id: Option<&crate::types::LogId>) -> u64 {
    log_id.map_or(0, |l| l.index)
}

fn replication(shared: &NodeShared, metrics: &RaftMetrics<KvRaft>, out: &mut String) {
    let membership = metrics.membership_config.membership();
    let applied = index(metrics.last_applied.as_ref());
    if metrics.state == ServerState::Leader {
        let followers: Vec<_> = membership
            .nodes()
            .filter(|(id, _)| **id != shared.me)
            .collect();
        let _ = write!(
            out,
            "# Replication\r\nrole:master\r\nconnected_slaves:{}\r\n",
            followers.len()
        );
        for (i, (id, member)) in followers.iter().enumerate() {
            let (ip, port) = member
                .client
                .rsplit_once(':')
                .unwrap_or((&member.client, "0"));
            let matched = metrics
                .replication
                .as_ref()
                .and_then(|r| r.get(*id).cloned().flatten());
            let state = if matched.is_some() {
                "online"
            } else {
                "wait_bgsave"
            };
            let offset = index(matched.as_ref());
            let _ = write!(
                out,
                "slave{i}:ip={ip},port={port},state={state},offset={offset},lag={}\r\n",
                metrics.last_log_index.unwrap_or(0).saturating_sub(offset)
            );
        }
        let _ = write!(
            out,
            "master_replid:{}\r\nmaster_repl_offset:{applied}\r\n",
            redis_id(shared.cluster_id, shared.me)
        );
    } else {
        let leader = metrics
            .current_leader
            .and_then(|id| membership.get_node(&id).map(|m| (id, m.clone())));
        let _ = write!(out, "# Replication\r\nrole:slave\r\n");
        match &leader {
            Some((id, member)) => {
                let (ip, port) = member
                    .client
                    .rsplit_once(':')
                    .unwrap_or((&member.client, "0"));
                let _ = write!(
                    out,
                    "master_host:{ip}\r\nmaster_port:{port}\r\nmaster_link_status:up\r\nmaster_replid:{}\r\n",
                    redis_id(shared.cluster_id, *id)
                );
            }
            None => {
                let _ = write!(out, "master_link_status:down\r\n");
            }
        }
        let _ = write!(
            out,
            "slave_repl_offset:{applied}\r\nslave_read_only:1\r\nconnected_slaves:0\r\nmaster_repl_offset:{applied}\r\n"
        );
    }
}

fn raft(shared: &NodeShared, metrics: &RaftMetrics<KvRaft>, out: &mut String) {
    let membership = metrics.membership_config.membership();
    let join = |ids: Vec<u64>| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let voters = join(membership.voter_ids().collect());
    let learners = join(membership.learner_ids().collect());
    let _ = write!(
        out,
        "# Raft\r\nraft_cluster:{}\r\nraft_node_id:{}\r\nraft_state:{:?}\r\nraft_term:{}\r\nraft_leader:{}\r\nraft_last_log_index:{}\r\nraft_committed_index:{}\r\nraft_last_applied_index:{}\r\nraft_snapshot_index:{}\r\nraft_purged_index:{}\r\nraft_voters:{voters}\r\nraft_learners:{learners}\r\nraft_read_policy:{:?}\r\n",
        shared.cluster,
        shared.me,
        metrics.state,
        metrics.current_term,
        metrics
            .current_leader
            .map_or_else(|| "none".to_string(), |id| id.to_string()),
        metrics.last_log_index.unwrap_or(0),
        index(metrics.cluster_committed.as_ref()),
        index(metrics.last_applied.as_ref()),
        index(metrics.snapshot.as_ref()),
        index(metrics.purged.as_ref()),
        shared.read_policy,
    );
}
