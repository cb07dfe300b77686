//! What write batches keep beside the maps: the store's write-batch area, where a batch's log
//! is committed and recovered (`area.rs`, the only file that knows its bytes), and the DRAM
//! state every handle shares (`lock.rs`: the batch lock, the version readers check, the area
//! once known). Below the registry, which holds the state; the batches themselves
//! (`../batch/`) sit above both.

mod area;
mod lock;

pub(crate) use area::{Area, Log};
pub(crate) use lock::{BatchHold, Batches};
