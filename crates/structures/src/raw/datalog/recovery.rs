//! Opening a store: reading the root and the inode table, and replaying each file's log from
//! head to tail into its DRAM index.
//!
//! The heap has already rolled back any transaction a crash interrupted, so the inode table
//! and every log's links are as some operation left them. What lies past a log's tail (a torn
//! entry, spare pages) is never read as entries. A committed entry that fails its checksum or
//! makes no sense, a broken chain, or a base page outside the heap's blocks marks the file
//! damaged: it is listed, and every operation on it returns [`DatalogError::CorruptEntry`].

use std::sync::Mutex;

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use crate::kind::describe_magic;

use super::entry::{checksum_holds, Entry};
use super::index::FileState;
use super::layout::{
    data_block_bytes, EntryImage, Inode, InodeTable, LogPage, Root, END_MARK_BYTES, ENTRY_HEADER,
    FORMAT_1_MAGIC, FORMAT_VERSION, PAGE, ROOT_BYTES, ROOT_MAGIC,
};
use super::{Datalog, DatalogError, Inner, Policy, MAX_FILES};

impl<B: Backend> Datalog<B> {
    /// Open the store whose root is at `root`, with the inodes and policy its root records (a
    /// root that holds anything else is refused with [`DatalogError::WrongKind`]): the heap
    /// has already rolled back any transaction a crash interrupted; this reads the inode table
    /// and replays every file's log into the DRAM index. A file whose log holds a corrupted
    /// committed entry opens as *damaged*: it is listed, and every operation on it returns
    /// [`DatalogError::CorruptEntry`].
    pub fn open(heap: &Heap<B>, root: u64) -> Result<Self, DatalogError> {
        let pool = heap.pool();
        let corrupt = |reason: String| DatalogError::Corrupt { root, reason };
        pool.check_range(root, ROOT_BYTES)?;
        let root_words = Root::at(root);
        let magic = root_words.read_magic(pool)?;
        if magic == FORMAT_1_MAGIC {
            return Err(corrupt(format!(
                "format version 1 (data pages without checksums), this build reads \
                 {FORMAT_VERSION}: copy the files out with a build that reads version 1"
            )));
        }
        if magic != ROOT_MAGIC {
            return Err(DatalogError::WrongKind {
                root,
                found: describe_magic(magic),
            });
        }
        let policy = Policy::decode(root_words.read_policy(pool)?).map_err(corrupt)?;
        let table = root_words.read_table(pool)?;
        let max_files = root_words.read_max_files(pool)?;
        let next_generation = root_words.read_next_generation(pool)?;
        if max_files == 0 || max_files > MAX_FILES {
            return Err(corrupt(format!("{max_files} inodes")));
        }
        if heap
            .block_size(table.offset())
            .is_none_or(|size| size < InodeTable::bytes(max_files))
        {
            return Err(corrupt(format!(
                "inode table {:#x} is not an allocated block for {max_files} inodes",
                table.offset()
            )));
        }
        let mut inner = Inner::new(max_files, next_generation);
        for slot in 0..max_files {
            let inode = table.inode(slot);
            let record = inode.read(pool)?;
            let (tail, head, generation) = (record.tail(), record.head(), record.generation());
            if generation == 0 {
                continue;
            }
            if generation >= next_generation {
                return Err(corrupt(format!(
                    "inode {slot} has generation {generation}, not below the next ({next_generation})"
                )));
            }
            let name = record
                .name()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| corrupt(format!("inode {slot} has an invalid name")))?
                .to_string();
            if inner.names.insert(name.clone(), slot as u32).is_some() {
                return Err(corrupt(format!("two files are named {name:?}")));
            }
            let state = replay(heap, name, generation, inode, head, tail)?;
            inner.slots[slot as usize] = Some(state);
        }
        Ok(Datalog {
            heap: heap.clone(),
            root,
            table,
            max_files,
            policy,
            inner: Mutex::new(inner),
        })
    }
}

/// Rebuild a file's DRAM state by scanning its log from `head` to `tail`. A bad chain or a bad
/// committed entry leaves the file damaged (returned as such); only an unreadable pool fails.
pub(super) fn replay<B: Backend>(
    heap: &Heap<B>,
    name: String,
    generation: u64,
    inode: Inode,
    head: u64,
    tail: u64,
) -> Result<FileState, DatalogError> {
    let mut f = FileState::new(name, generation, inode, head);
    f.tail = tail;
    if let Err((entry, reason)) = scan(heap, &mut f, head, tail) {
        f.damage = Some((entry, reason));
    }
    Ok(f)
}

/// Replay the log from `head` to `tail` into `f`, then take in the spare pages linked past the
/// tail's; the first thing wrong is returned as (pool offset, reason).
fn scan<B: Backend>(
    heap: &Heap<B>,
    f: &mut FileState,
    head: u64,
    tail: u64,
) -> Result<(), (u64, String)> {
    let pool = heap.pool();
    let is_log_page = |p: u64| heap.block_size(p).is_some_and(|s| s >= PAGE);
    if !is_log_page(head) {
        return Err((head, format!("log head {head:#x} is not an allocated page")));
    }
    let max_pages = pool.size() / PAGE;
    let mut page = head;
    let mut pos = LogPage::at(head).first_entry();
    let mut buf = vec![0u8; PAGE as usize];
    let mut page_crcs: Vec<u32> = Vec::new();
    let read = |at: u64, buf: &mut [u8]| {
        pool.read_bytes(at, buf)
            .map_err(|e| (at, format!("unreadable: {e}")))
    };
    loop {
        if pos == tail {
            break;
        }
        let left = LogPage::at(page).room(pos);
        let at_end = !LogPage::takes_end_mark(left) || {
            let mut mark = [0u8; 8];
            read(pos, &mut mark)?;
            mark == END_MARK_BYTES
        };
        if at_end {
            let mut next = [0u8; 8];
            read(LogPage::at(page).next_word(), &mut next)?;
            let next = u64::from_le_bytes(next);
            if next == 0
                || !is_log_page(next)
                || f.seq_of.contains_key(&next)
                || f.chain.len() as u64 >= max_pages
            {
                return Err((
                    page,
                    format!("the log ends (next page {next:#x}) before its tail {tail:#x}"),
                ));
            }
            f.push_page(next);
            page = next;
            pos = LogPage::at(page).first_entry();
            continue;
        }
        read(pos, &mut buf[..ENTRY_HEADER as usize])?;
        let mut entry =
            Entry::decode_header(&buf[..ENTRY_HEADER as usize]).map_err(|r| (pos, r))?;
        let bytes = entry.bytes();
        if bytes > left || (LogPage::at(page).holds_tail(tail) && pos + bytes > tail) {
            return Err((pos, "the entry overlaps its page's end or the tail".into()));
        }
        let whole = &mut buf[..bytes as usize];
        read(pos, whole)?;
        if !checksum_holds(f.generation, whole) {
            return Err((pos, "the entry fails its checksum".into()));
        }
        page_crcs.clear();
        if let Entry::Extent { block, pages, .. } = &mut entry {
            let image = EntryImage::new(whole);
            *block = image.extent_block();
            page_crcs.extend(image.extent_page_crcs(*pages));
        }
        // Blocks the entry killed were freed when it committed: nothing to do with them.
        let _ = f.apply(pos, page, &entry, &page_crcs);
        pos += bytes;
    }
    f.tail_seq = f.next_seq - 1;
    // Spare pages linked past the tail page belong to the log too.
    loop {
        let mut next = [0u8; 8];
        read(LogPage::at(page).next_word(), &mut next)?;
        let next = u64::from_le_bytes(next);
        if next == 0 {
            break;
        }
        if !is_log_page(next) || f.seq_of.contains_key(&next) || f.chain.len() as u64 >= max_pages {
            return Err((page, format!("bad spare log page {next:#x}")));
        }
        f.push_page(next);
        page = next;
    }
    // Every live base page must lie in a block the heap allocated.
    for (p, s) in &f.pages {
        if let Some(b) = s.base {
            if heap
                .block_size(b.block)
                .is_none_or(|size| size < data_block_bytes(b.block_page + 1))
            {
                return Err((
                    b.entry,
                    format!(
                        "file page {p} points to {:#x}, not an allocated block",
                        b.block
                    ),
                ));
            }
        }
    }
    Ok(())
}
