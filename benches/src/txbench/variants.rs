//! What the transaction sections compare: the sections, the Themis workloads and every
//! variant (a transaction shape under a fence policy), grouped as they run side by side.

// Through the parent, so the workloads' crate is named in one place (txbench.rs).
use super::{
    size_label, FencePolicy, TpccConfig, CTREE_KEYS, LIST_KEYS, MAP_BUCKETS, MAP_KEYS,
    OBJECT_POLICY, OBJECT_SIZES, PC_KEYS, PC_SHAPE, POLICIES, QUEUE_LEN, RB_KEYS, SPS_LEN,
    SPS_SWAPS, TATP_SUBSCRIBERS, TX_WORDS,
};

/// A section of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// K words per transaction, per policy.
    TxWords,
    /// The Themis workloads, per policy.
    ThemisWorkloads,
    /// In-place vs out-of-place object updates, per size.
    ObjectUpdate,
}

impl Section {
    /// Every section, in report order.
    pub const ALL: [Section; 3] = [
        Section::TxWords,
        Section::ThemisWorkloads,
        Section::ObjectUpdate,
    ];

    /// The section's name in reports and criterion group names.
    pub fn name(self) -> &'static str {
        match self {
            Section::TxWords => "tx_words",
            Section::ThemisWorkloads => "themis_workloads",
            Section::ObjectUpdate => "object_update",
        }
    }
}

/// A workload of Themis, Table II.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// Swap random entries of an array.
    Sps,
    /// Insert/delete nodes in a sorted linked list.
    List,
    /// Insert/delete entries in a chained hash map.
    Hashmap,
    /// Enqueue/dequeue nodes of a queue.
    Queue,
    /// TATP `update_location`.
    Tatp,
    /// TPCC `new_order`.
    Tpcc,
    /// Insert/delete keys of a crit-bit tree.
    CTree,
    /// Update values in place in a persistent cache (a hash table).
    Pc,
    /// Insert/delete keys of a red-black tree.
    Rb,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 9] = [
        Workload::Sps,
        Workload::List,
        Workload::Hashmap,
        Workload::Queue,
        Workload::Tatp,
        Workload::Tpcc,
        Workload::CTree,
        Workload::Pc,
        Workload::Rb,
    ];

    /// The paper's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Sps => "SPS",
            Workload::List => "LL",
            Workload::Hashmap => "Hashmap",
            Workload::Queue => "CQ",
            Workload::Tatp => "TATP",
            Workload::Tpcc => "TPCC",
            Workload::CTree => "CTree",
            Workload::Pc => "PC",
            Workload::Rb => "RB",
        }
    }

    /// What one transaction does.
    pub fn description(self) -> String {
        match self {
            Workload::Sps => format!(
                "swap {SPS_SWAPS} random pairs of a {} Ki-entry array",
                SPS_LEN >> 10
            ),
            Workload::List => format!(
                "insert or delete a random key of 0..{LIST_KEYS} in a sorted linked list (about \
                 half present)"
            ),
            Workload::Hashmap => format!(
                "insert or delete a random key of 0..{MAP_KEYS} in a chained hash map of \
                 {MAP_BUCKETS} buckets (about half present)"
            ),
            Workload::Queue => {
                format!("enqueue and dequeue in turn on a linked queue of about {QUEUE_LEN} values")
            }
            Workload::Tatp => {
                format!("update_location of a random subscriber of {TATP_SUBSCRIBERS} (one store)")
            }
            Workload::Tpcc => {
                let c = TpccConfig::default();
                format!(
                    "new_order of 5..=15 random items of {} in a random district of {} \
                     (order + lines allocated, the order {} back freed)",
                    c.items, c.districts, c.orders_kept
                )
            }
            Workload::CTree => format!(
                "insert or delete a random key of 0..{CTREE_KEYS} in a crit-bit tree (about half \
                 present)"
            ),
            Workload::Pc => format!(
                "update the {}-word value of a random key of 0..{PC_KEYS} in place in a cache of \
                 {} sets x {} ways (each word logged; a full set evicts)",
                PC_SHAPE.value_words, PC_SHAPE.sets, PC_SHAPE.ways
            ),
            Workload::Rb => format!(
                "insert or delete a random key of 0..{RB_KEYS} in a red-black tree (about half \
                 present)"
            ),
        }
    }
}

/// One variant measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxVariant {
    /// K random words snapshot, then written, in one transaction.
    Words {
        /// Words per transaction.
        k: u64,
        /// The fence policy.
        policy: FencePolicy,
    },
    /// One transaction of a Themis workload.
    Workload {
        /// The workload.
        workload: Workload,
        /// The fence policy.
        policy: FencePolicy,
    },
    /// One object update.
    Object {
        /// Bytes of the object.
        bytes: u64,
        /// Out of place (allocate, swing, free) rather than in place (snapshot, overwrite).
        out_of_place: bool,
    },
}

impl TxVariant {
    /// The section the variant belongs to.
    pub fn section(self) -> Section {
        match self {
            TxVariant::Words { .. } => Section::TxWords,
            TxVariant::Workload { .. } => Section::ThemisWorkloads,
            TxVariant::Object { .. } => Section::ObjectUpdate,
        }
    }

    /// The fence policy of the variant's heap.
    pub fn policy(self) -> FencePolicy {
        match self {
            TxVariant::Words { policy, .. } | TxVariant::Workload { policy, .. } => policy,
            TxVariant::Object { .. } => OBJECT_POLICY,
        }
    }

    /// Criterion's function id: the policy, the workload, or the update kind.
    pub fn function(self) -> String {
        match self {
            TxVariant::Words { policy, .. } => policy.name().to_string(),
            TxVariant::Workload { workload, .. } => workload.name().to_string(),
            TxVariant::Object { out_of_place, .. } => if out_of_place {
                "out-of-place"
            } else {
                "in-place"
            }
            .to_string(),
        }
    }

    /// Criterion's parameter: the word count, the policy, or the size.
    pub fn parameter(self) -> String {
        match self {
            TxVariant::Words { k, .. } => format!("{k} words"),
            TxVariant::Workload { policy, .. } => policy.name().to_string(),
            TxVariant::Object { bytes, .. } => size_label(bytes as usize),
        }
    }

    /// A unique, readable id.
    pub fn id(self) -> String {
        format!("{} {}", self.function(), self.parameter())
    }

    /// A file-name-safe form of the id.
    pub(super) fn slug(self) -> String {
        self.id()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect()
    }
}

/// The groups `pmem-bench` measures, in report order: each a name and the variants compared
/// side by side (one group per K, per workload, per object size).
pub fn groups() -> Vec<(String, Vec<TxVariant>)> {
    let mut out = Vec::new();
    for k in TX_WORDS {
        out.push((
            format!("{} K={k}", Section::TxWords.name()),
            POLICIES
                .iter()
                .map(|&policy| TxVariant::Words { k, policy })
                .collect(),
        ));
    }
    for workload in Workload::ALL {
        out.push((
            format!("{} {}", Section::ThemisWorkloads.name(), workload.name()),
            POLICIES
                .iter()
                .map(|&policy| TxVariant::Workload { workload, policy })
                .collect(),
        ));
    }
    for bytes in OBJECT_SIZES {
        out.push((
            format!(
                "{} {}",
                Section::ObjectUpdate.name(),
                size_label(bytes as usize)
            ),
            [false, true]
                .into_iter()
                .map(|out_of_place| TxVariant::Object {
                    bytes,
                    out_of_place,
                })
                .collect(),
        ));
    }
    out
}

/// Every variant of `section`, in report order.
pub fn variants(section: Section) -> Vec<TxVariant> {
    groups()
        .into_iter()
        .flat_map(|(_, v)| v)
        .filter(|v| v.section() == section)
        .collect()
}
