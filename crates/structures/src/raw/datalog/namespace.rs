//! The namespace: creating a store (its root and inode table), and creating, finding, listing,
//! renaming and removing files. The inode table is the namespace; every change to it is one
//! undo-log transaction, so after a crash it is as before or as after the operation.

use std::sync::Mutex;

use pmem_ordering::{Backend, PPtr};
use pmem_undo_log::{Heap, TxError};

use super::index::FileState;
use super::layout::{Inode, InodeTable, LogPage, NameImage, Root, MAX_NAME, PAGE, ROOT_BYTES};
use super::{Datalog, DatalogConfig, DatalogError, FileId, Inner};
use crate::kind::describe_magic;

impl<B: Backend> Datalog<B> {
    /// Make an empty store with its root at `root` (8-byte aligned, [`ROOT_BYTES`], e.g. the
    /// pool's root object), recording `config` (inodes and policy) there for
    /// [`Datalog::open`]. One transaction. A root in use (a non-zero magic word) is refused
    /// with [`DatalogError::AlreadyExists`], and left as it is.
    pub fn create(heap: &Heap<B>, root: u64, config: DatalogConfig) -> Result<Self, DatalogError> {
        config.check()?;
        let DatalogConfig { max_files, policy } = config;
        if !root.is_multiple_of(8) {
            return Err(DatalogError::InvalidConfig {
                reason: format!("root offset {root:#x} is not 8-byte aligned"),
            });
        }
        heap.pool().check_range(root, ROOT_BYTES)?;
        let magic = Root::at(root).read_magic(heap.pool())?;
        if magic != 0 {
            return Err(DatalogError::AlreadyExists {
                root,
                found: describe_magic(magic),
            });
        }
        let table = heap.transaction(|tx| {
            let bytes = InodeTable::bytes(max_files);
            let table = InodeTable::at(tx.alloc(bytes)?.offset());
            tx.write(table.offset(), &vec![0u8; bytes as usize])?;
            tx.write(root, &Root::image(table, max_files, 1, policy.encode()))?;
            Ok::<InodeTable, TxError>(table)
        })?;
        Ok(Datalog {
            heap: heap.clone(),
            root,
            table,
            max_files,
            policy,
            inner: Mutex::new(Inner::new(max_files, 1)),
        })
    }

    /// Create an empty file. One transaction: its first log page and its inode.
    pub fn create_file(&self, name: &str) -> Result<FileId, DatalogError> {
        check_name(name)?;
        let mut inner = self.lock();
        if inner.names.contains_key(name) {
            return Err(DatalogError::Exists { name: name.into() });
        }
        let slot =
            inner
                .slots
                .iter()
                .position(Option::is_none)
                .ok_or(DatalogError::TooManyFiles {
                    max: self.max_files,
                })?;
        let generation = inner.next_generation;
        let inode = self.table.inode(slot as u64);
        let head = self.heap.transaction(|tx| {
            let head = tx.alloc(PAGE)?.offset();
            tx.write(head, &LogPage::EMPTY_HEADER)?;
            let tail = LogPage::at(head).first_entry();
            tx.write(inode.offset(), &Inode::image(tail, head, generation, name))?;
            tx.write_value(
                Root::at(self.root).next_generation_word(),
                &(generation + 1),
            )?;
            Ok::<u64, TxError>(head)
        })?;
        inner.next_generation = generation + 1;
        inner.names.insert(name.to_string(), slot as u32);
        inner.slots[slot] = Some(FileState::new(name.to_string(), generation, inode, head));
        Ok(FileId {
            slot: slot as u32,
            generation,
        })
    }

    /// The handle of the file named `name`.
    pub fn open_file(&self, name: &str) -> Result<FileId, DatalogError> {
        let inner = self.lock();
        let slot = *inner
            .names
            .get(name)
            .ok_or_else(|| DatalogError::NotFound { name: name.into() })?;
        let state = inner.slots[slot as usize].as_ref().expect("named slot");
        Ok(FileId {
            slot,
            generation: state.generation,
        })
    }

    /// Every file's name, sorted.
    pub fn list(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().names.keys().cloned().collect();
        names.sort();
        names
    }

    /// Rename a file (one transaction on its inode). `to` must not exist.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), DatalogError> {
        check_name(to)?;
        let mut inner = self.lock();
        let slot = *inner
            .names
            .get(from)
            .ok_or_else(|| DatalogError::NotFound { name: from.into() })?;
        if from == to {
            return Ok(());
        }
        if inner.names.contains_key(to) {
            return Err(DatalogError::Exists { name: to.into() });
        }
        let inode = self.table.inode(u64::from(slot));
        let name = NameImage::new(to);
        self.heap
            .transaction(|tx| tx.write(inode.name_field(), name.as_bytes()))?;
        inner.names.remove(from);
        inner.names.insert(to.to_string(), slot);
        inner.slots[slot as usize]
            .as_mut()
            .expect("named slot")
            .name = to.to_string();
        Ok(())
    }

    /// Remove a file: one transaction frees its log pages and data blocks and its inode. A
    /// damaged file (see [`Datalog::open`]) is refused with [`DatalogError::CorruptEntry`]: which
    /// blocks it owns cannot be known for sure from a damaged log, and freeing a block that is
    /// not its own would corrupt another file, so nothing is freed and the file stays listed.
    pub fn remove(&self, name: &str) -> Result<(), DatalogError> {
        let mut inner = self.lock();
        let slot = *inner
            .names
            .get(name)
            .ok_or_else(|| DatalogError::NotFound { name: name.into() })?;
        let state = inner.slots[slot as usize].as_ref().expect("named slot");
        if let Some((entry, reason)) = &state.damage {
            // Its data blocks cannot be known: freeing only part of them would be wrong.
            return Err(state.corrupt(*entry, reason.clone()));
        }
        self.heap.transaction(|tx| {
            tx.write_value(state.inode.generation_word(), &0u64)?;
            for &page in state.chain.values() {
                tx.free(PPtr::<u8>::new(page))?;
            }
            for &block in state.blocks.keys() {
                tx.free(PPtr::<u8>::new(block))?;
            }
            Ok::<(), TxError>(())
        })?;
        inner.names.remove(name);
        inner.slots[slot as usize] = None;
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), DatalogError> {
    let bad = |reason| {
        Err(DatalogError::InvalidName {
            name: name.into(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME {
        return bad("it is longer than 96 bytes");
    }
    Ok(())
}

/// The live, undamaged file behind `id`.
pub(super) fn file(
    slots: &mut [Option<FileState>],
    id: FileId,
) -> Result<&mut FileState, DatalogError> {
    let f = slots
        .get_mut(id.slot as usize)
        .and_then(Option::as_mut)
        .filter(|f| f.generation == id.generation)
        .ok_or(DatalogError::StaleHandle)?;
    if let Some((entry, reason)) = &f.damage {
        return Err(f.corrupt(*entry, reason.clone()));
    }
    Ok(f)
}
