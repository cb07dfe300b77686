//! In-place and out-of-place object updates.
//!
//! An object is a block reached through an 8-byte persistent pointer (a *slot*). Replacing its
//! contents can be done two ways, both failure-atomic:
//!
//! * **in place**: snapshot the object into the undo log, overwrite it; the log holds a copy of
//!   the old bytes, so every byte is written twice (log and data);
//! * **out of place**: allocate a new block, write the new bytes into it (no snapshot: it is
//!   fresh), swing the slot to it with one logged 8-byte write, free the old block, all in one
//!   transaction; only the pointer and the allocator's metadata are logged.

use pmem_ordering::{Backend, PPtr};

use crate::{Heap, TxError};

/// Allocate an object holding `bytes` and store its pointer in the slot at `slot`, in one
/// transaction. The slot's old pointer is overwritten, not freed.
pub fn create<B: Backend>(heap: &Heap<B>, slot: u64, bytes: &[u8]) -> Result<PPtr<u8>, TxError> {
    heap.transaction(|tx| {
        let object = tx.alloc(bytes.len() as u64)?;
        tx.write(object.offset(), bytes)?;
        tx.set(PPtr::<PPtr<u8>>::new(slot), &object)?;
        Ok(object)
    })
}

/// Replace the contents of the object the slot at `slot` points to, in place under the undo
/// log. `bytes` must fit the object's block (the caller knows its size).
pub fn update_in_place<B: Backend>(heap: &Heap<B>, slot: u64, bytes: &[u8]) -> Result<(), TxError> {
    heap.transaction(|tx| {
        let object: PPtr<u8> = tx.get(PPtr::new(slot))?;
        tx.write(object.offset(), bytes)
    })
}

/// Replace the object the slot at `slot` points to by a new one holding `bytes`: free the old
/// block, allocate, write, swing the pointer, in one transaction. Returns the new object.
///
/// The free comes first (it takes effect at commit either way) so that its intents are in the
/// log before the pointer's write, whose fence orders them before the commit's metadata writes:
/// the transaction then issues no fence for the allocator (`alloc/publish.rs`).
pub fn update_out_of_place<B: Backend>(
    heap: &Heap<B>,
    slot: u64,
    bytes: &[u8],
) -> Result<PPtr<u8>, TxError> {
    heap.transaction(|tx| {
        let slot = PPtr::<PPtr<u8>>::new(slot);
        let old = tx.get(slot)?;
        if !old.is_null() {
            tx.free(old)?;
        }
        let object = tx.alloc(bytes.len() as u64)?;
        tx.write(object.offset(), bytes)?;
        tx.set(slot, &object)?;
        Ok(object)
    })
}
