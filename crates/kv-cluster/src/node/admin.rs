//! `CLUSTER`: the cluster as Redis Cluster clients see it (one shard holding every slot, led
//! by the Raft leader, the other members its replicas), and the Raft membership commands:
//!
//! * `CLUSTER RAFT INIT [<id> <raft-addr> <client-addr> ...]`: make the cluster, of this
//!   node alone or of the members listed (this node among them); once per cluster;
//! * `CLUSTER RAFT ADD-LEARNER <id> <raft-addr> <client-addr>`: add a node that receives
//!   the log but does not vote; answered once it has caught up, or with an error once the
//!   node's learner timeout has passed (it stays a learner);
//! * `CLUSTER RAFT PROMOTE <id>`: make a learner a voter;
//! * `CLUSTER RAFT REMOVE <id>`: take a voter or learner out of the cluster;
//! * `CLUSTER RAFT PARTITION <id> ...` and `CLUSTER RAFT HEAL`: test-only (a node started
//!   with `--test-partitions`), drop this node's Raft traffic to and from those peers, or
//!   stop dropping it; answered by any node, for itself.
//!
//! The membership commands are the leader's; elsewhere they answer `-MOVED 0 <leader>`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::metrics::WaitError;
use openraft::type_config::async_runtime::WatchReceiver;
use openraft::{ChangeMembers, RaftMetrics};
use pmem_kv_server::protocol::Reply;

use super::routing::{elsewhere, redis_id};
use super::slot::{key_slot, SLOTS};
use super::NodeShared;
use crate::error::ClusterError;
use crate::types::{KvRaft, Member, NodeId};

/// Run `CLUSTER <subcommand> ...`.
pub(crate) async fn execute(shared: &NodeShared, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let metrics = shared.raft.metrics().borrow_watched().clone();
    let view = View::of(shared, &metrics);
    match (sub.as_str(), args.len()) {
        ("slots", 2) => view.slots(),
        ("shards", 2) => view.shards(),
        ("nodes", 2) => Reply::Verbatim(view.nodes()),
        ("info", 2) => Reply::Verbatim(view.info()),
        ("myid", 2) => Reply::bulk(redis_id(shared.cluster_id, shared.me)),
        ("keyslot", 3) => Reply::Integer(i64::from(key_slot(&args[2]))),
        ("raft", n) if n >= 3 => raft(shared, &args[2..]).await,
        ("slots" | "shards" | "nodes" | "info" | "myid" | "keyslot" | "raft", _) => Reply::error(
            format!("ERR wrong number of arguments for 'cluster|{sub}' command"),
        ),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// The cluster as this node sees it.
struct View<'a> {
    shared: &'a NodeShared,
    metrics: &'a RaftMetrics<KvRaft>,
    leader: Option<NodeId>,
    members: BTreeMap<NodeId, Member>,
}

impl<'a> View<'a> {
    fn of(shared: &'a NodeShared, metrics: &'a RaftMetrics<KvRaft>) -> View<'a> {
        let members: BTreeMap<NodeId, Member> = metrics
            .membership_config
            .membership()
            .nodes()
            .map(|(id, member)| (*id, member.clone()))
            .collect();
        let leader = metrics.current_leader.filter(|id| members.contains_key(id));
        View {
            shared,
            metrics,
            leader,
            members,
        }
    }

    fn id(&self, node: NodeId) -> String {
        redis_id(self.shared.cluster_id, node)
    }

    /// `[ip, port, id]` of a member.
    fn endpoint(&self, node: NodeId, member: &Member) -> Reply {
        let (ip, port) = split(&member.client);
        Reply::Array(vec![
            Reply::bulk(ip.to_string()),
            Reply::Integer(port),
            Reply::bulk(self.id(node)),
        ])
    }

    /// How far a member has the log, as the leader knows it (its own applied index on
    /// itself).
    fn offset(&self, node: NodeId) -> i64 {
        if node == self.shared.me {
            return self.metrics.last_applied.map_or(0, |l| l.index as i64);
        }
        self.metrics
            .replication
            .as_ref()
            .and_then(|r| r.get(&node).cloned().flatten())
            .map_or(0, |l| l.index as i64)
    }

    fn slots(&self) -> Reply {
        let Some(leader) = self.leader else {
            // As a Redis node with no slot assigned answers.
            return Reply::Array(Vec::new());
        };
        let mut entry = vec![
            Reply::Integer(0),
            Reply::Integer(i64::from(SLOTS - 1)),
            self.endpoint(leader, &self.members[&leader]),
        ];
        for (id, member) in &self.members {
            if *id != leader {
                entry.push(self.endpoint(*id, member));
            }
        }
        Reply::Array(vec![Reply::Array(entry)])
    }

    fn shards(&self) -> Reply {
        let nodes = self
            .members
            .iter()
            .map(|(id, member)| {
                let (ip, port) = split(&member.client);
                let role = if Some(*id) == self.leader {
                    "master"
                } else {
                    "replica"
                };
                Reply::Map(vec![
                    (Reply::bulk("id"), Reply::bulk(self.id(*id))),
                    (Reply::bulk("port"), Reply::Integer(port)),
                    (Reply::bulk("ip"), Reply::bulk(ip.to_string())),
                    (Reply::bulk("endpoint"), Reply::bulk(ip.to_string())),
                    (Reply::bulk("role"), Reply::bulk(role)),
                    (
                        Reply::bulk("replication-offset"),
                        Reply::Integer(self.offset(*id)),
                    ),
                    (
                        Reply::bulk("health"),
                        Reply::bulk(if self.leader.is_some() {
                            "online"
                        } else {
                            "fail"
                        }),
                    ),
                ])
            })
            .collect();
        let slots = if self.leader.is_some() {
            vec![Reply::Integer(0), Reply::Integer(i64::from(SLOTS - 1))]
        } else {
            Vec::new()
        };
        Reply::Array(vec![Reply::Map(vec![
            (Reply::bulk("slots"), Reply::Array(slots)),
            (Reply::bulk("nodes"), Reply::Array(nodes)),
        ])])
    }

    fn nodes(&self) -> String {
        let term = self.metrics.current_term;
        let mut text = String::new();
        for (id, member) in &self.members {
            let myself = if *id == self.shared.me { "myself," } else { "" };
            let (role, master, slots) = match self.leader {
                Some(leader) if leader == *id => ("master", "-".to_string(), " 0-16383"),
                Some(leader) => ("slave", self.id(leader), ""),
                None => ("slave", "-".to_string(), ""),
            };
            let cport = split(&member.raft).1;
            let state = if self.leader.is_some() {
                "connected"
            } else {
                "disconnected"
            };
            text.push_str(&format!(
                "{} {}@{cport} {myself}{role} {master} 0 0 {term} {state}{slots}\n",
                self.id(*id),
                member.client
            ));
        }
        text
    }

    fn info(&self) -> String {
        let ok = self.leader.is_some();
        let assigned = if ok { SLOTS } else { 0 };
        format!(
            "cluster_enabled:1\r\ncluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{term}\r\ncluster_my_epoch:{term}\r\n",
            if ok { "ok" } else { "fail" },
            self.members.len(),
            u8::from(ok),
            term = self.metrics.current_term,
        )
    }
}

/// `host:port` as its host and port (0 when it has none).
fn split(addr: &str) -> (&str, i64) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().unwrap_or(0)),
        None => (addr, 0),
    }
}

fn node_id(arg: &Bytes) -> Result<NodeId, Reply> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            Reply::error(format!(
                "ERR invalid node id '{}': a node id is an unsigned 64-bit integer",
                String::from_utf8_lossy(arg)
            ))
        })
}

/// `<id> <raft-addr> <client-addr>` triples.
fn members(args: &[Bytes]) -> Result<BTreeMap<NodeId, Member>, Reply> {
    if !args.len().is_multiple_of(3) {
        return Err(Reply::error(
            "ERR members are given as <id> <raft-addr> <client-addr> triples",
        ));
    }
    let text = |arg: &Bytes| String::from_utf8_lossy(arg).into_owned();
    let mut members = BTreeMap::new();
    for triple in args.chunks(3) {
        let id = node_id(&triple[0])?;
        let member = Member {
            raft: text(&triple[1]),
            client: text(&triple[2]),
        };
        for addr in [&member.raft, &member.client] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(Reply::error(format!(
                    "ERR '{addr}' is not an address (ip:port)"
                )));
            }
        }
        if members.insert(id, member).is_some() {
            return Err(Reply::error(format!("ERR node {id} is listed twice")));
        }
    }
    Ok(members)
}

/// `CLUSTER RAFT <command> ...` (`args` from the command on).
async fn raft(shared: &NodeShared, args: &[Bytes]) -> Reply {
    let command = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let result = match command.as_str() {
        "init" => init(shared, &args[1..]).await,
        "add-learner" => match members(&args[1..]) {
            Ok(members) if members.len() == 1 => {
                let (id, member) = members.into_iter().next().expect("one member");
                add_learner(shared, id, member).await
            }
            Ok(_) => Err(Reply::error(
                "ERR ADD-LEARNER takes one <id> <raft-addr> <client-addr>",
            )),
            Err(reply) => Err(reply),
        },
        "promote" if args.len() == 2 => match node_id(&args[1]) {
            Ok(id) => {
                let change = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
                changed(shared.raft.change_membership(change, false).await)
            }
            Err(reply) => Err(reply),
        },
        "remove" if args.len() == 2 => match node_id(&args[1]) {
            Ok(id) => {
                let is_voter = shared.raft.voter_ids().any(|v| v == id);
                let change = if is_voter {
                    ChangeMembers::RemoveVoters(BTreeSet::from([id]))
                } else {
                    ChangeMembers::RemoveNodes(BTreeSet::from([id]))
                };
                changed(shared.raft.change_membership(change, false).await)
            }
            Err(reply) => Err(reply),
        },
        "partition" if args.len() >= 2 => args[1..]
            .iter()
            .map(node_id)
            .collect::<Result<BTreeSet<NodeId>, Reply>>()
            .and_then(|peers| partition(shared, peers)),
        "heal" if args.len() == 1 => partition(shared, BTreeSet::new()),
        "partition" => Err(Reply::error(
            "ERR CLUSTER RAFT PARTITION takes one or more node ids",
        )),
        "heal" => Err(Reply::error("ERR CLUSTER RAFT HEAL takes no argument")),
        "promote" | "remove" => Err(Reply::error(format!(
            "ERR CLUSTER RAFT {} takes one node id",
            command.to_uppercase()
        ))),
        _ => Err(Reply::error(format!(
            "ERR unknown CLUSTER RAFT command '{command}': INIT, ADD-LEARNER, PROMOTE or REMOVE"
        ))),
    };
    result.unwrap_or_else(|reply| reply)
}

/// Cut this node off from `peers` (none: heal), if the node serves test partitions.
fn partition(shared: &NodeShared, peers: BTreeSet<NodeId>) -> Result<Reply, Reply> {
    let Some(cut) = &shared.cut else {
        return Err(Reply::error(
            "ERR CLUSTER RAFT PARTITION and HEAL are test-only: start the node with --test-partitions",
        ));
    };
    if peers.contains(&shared.me) {
        return Err(Reply::error(format!(
            "ERR node {} cannot be cut off from itself",
            shared.me
        )));
    }
    cut.set(peers);
    Ok(Reply::ok())
}

async fn init(shared: &NodeShared, args: &[Bytes]) -> Result<Reply, Reply> {
    let members = if args.is_empty() {
        BTreeMap::from([(shared.me, shared.member.clone())])
    } else {
        members(args)?
    };
    match shared.raft.initialize(members).await {
        Ok(()) => Ok(Reply::ok()),
        Err(RaftError::APIError(InitializeError::NotAllowed(e))) => Err(Reply::error(format!(
            "ERR the cluster is already initialized on this node: {e}"
        ))),
        Err(RaftError::APIError(InitializeError::NotInMembers(e))) => Err(Reply::error(format!(
            "ERR this node must be one of the members: {e}"
        ))),
        Err(RaftError::Fatal(e)) => Err(Reply::error(format!("ERR {e}"))),
    }
}

/// Add `id` as a learner, then wait (at most the node's learner timeout: openraft's own
/// blocking wait has no limit) until the leader has replicated to it the log up to the
/// membership entry that added it.
async fn add_learner(shared: &NodeShared, id: NodeId, member: Member) -> Result<Reply, Reply> {
    let raft_addr = member.raft.clone();
    let added = match shared.raft.add_learner(id, member, false).await {
        Ok(response) => response.log_id.index,
        Err(e) => return changed::<()>(Err(e)),
    };
    if id == shared.me {
        return Ok(Reply::ok());
    }
    let matched = |m: &RaftMetrics<KvRaft>| {
        m.replication
            .as_ref()
            .and_then(|r| r.get(&id).cloned().flatten())
            .map(|log_id| log_id.index)
    };
    // The metrics show the change a moment after it is committed; until then they say
    // nothing of the learner.
    let current = |m: &RaftMetrics<KvRaft>| {
        m.membership_config.log_id().as_ref().map(|l| l.index) >= Some(added)
    };
    let is_member =
        |m: &RaftMetrics<KvRaft>| m.membership_config.membership().get_node(&id).is_some();
    // Stop waiting too when this node stops leading or the learner is removed meanwhile.
    let settled = |m: &RaftMetrics<KvRaft>| {
        current(m)
            && (m.replication.is_none()
                || !is_member(m)
                || matched(m).is_some_and(|index| index >= added))
    };
    let waited = shared
        .raft
        .wait(Some(shared.learner_timeout))
        .metrics(settled, "the new learner catches up")
        .await;
    match waited {
        Ok(m) if m.replication.is_none() => Err(Reply::error(format!(
            "ERR node {id} was added as a learner, but this node stopped leading before it caught up; ask the new leader (CLUSTER NODES names it)"
        ))),
        Ok(m) if !is_member(&m) => Err(Reply::error(format!(
            "ERR node {id} was added as a learner, then removed before it caught up"
        ))),
        Ok(_) => Ok(Reply::ok()),
        Err(WaitError::Timeout(..)) => {
            let now = shared.raft.metrics().borrow_watched().clone();
            let behind = ClusterError::LearnerBehind {
                node: id,
                raft_addr,
                waited: shared.learner_timeout,
                matched: matched(&now),
                needed: added,
            };
            Err(Reply::error(format!("ERR {behind}")))
        }
        Err(WaitError::ShuttingDown) => Err(Reply::error(
            "ERR this node is shutting down; the learner was added, its catching up is not known",
        )),
    }
}

fn changed<T>(
    result: Result<T, RaftError<KvRaft, ClientWriteError<KvRaft>>>,
) -> Result<Reply, Reply> {
    match result {
        Ok(_) => Ok(Reply::ok()),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
            Err(elsewhere(&forward, 0))
        }
        Err(e) => Err(Reply::error(format!("ERR {e}"))),
    }
}
