//! The allocators compared, behind one interface ([`Allocator`]): ours (the undo-log heap, by
//! transaction and by record block), the system allocator, jemalloc and, with the `pmdk`
//! feature, libpmemobj.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::Arc;

use pmem_ordering::pool::PageSize;
use pmem_ordering::{Granularity, Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, RecordBlock};
use tikv_jemallocator::Jemalloc;

use super::AllocBenchError;

/// The alignment asked of the volatile allocators: 16 bytes, what `malloc` guarantees.
const ALIGN: usize = 16;

/// A block handed out by an [`Allocator`], to be given back to the same one.
pub enum Block {
    /// An offset in our heap's pool (a transaction's block).
    Offset(u64),
    /// A record block of our heap.
    Record(RecordBlock),
    /// An address from a volatile allocator.
    Address(NonNull<u8>),
    /// An object of libpmemobj.
    #[cfg(feature = "pmdk")]
    Obj(crate::pmdk::ObjBlock),
}

/// One allocator under measurement, shared by the threads of a run.
pub trait Allocator: Sync {
    /// The name in the report.
    fn name(&self) -> &'static str;
    /// What an allocation costs it, in a few words.
    fn durability(&self) -> &'static str;
    /// Allocate `size` bytes.
    fn alloc(&self, size: usize) -> Result<Block, AllocBenchError>;
    /// Free `block`, which this allocator made with `size` bytes.
    fn free(&self, block: Block, size: usize) -> Result<(), AllocBenchError>;
}

/// An anonymous pool at emulated granularity on `page_size` pages, every page written once,
/// formatted as a heap (batched fences, the default).
pub fn heap(pool_bytes: u64, page_size: PageSize) -> Result<Heap, AllocBenchError> {
    let options = PoolOptions::new()
        .granularity(Granularity::Emulated)
        .page_size(page_size);
    let pool = Pool::anonymous("pmem-bench-alloc", pool_bytes, &options)?;
    let zeros = vec![0u8; 1 << 20];
    let mut offset = pool.heap_offset();
    while offset < pool_bytes {
        let n = zeros.len().min((pool_bytes - offset) as usize);
        let _ = pool.write(offset, &zeros[..n])?;
        offset += n as u64;
    }
    Ok(Heap::create(
        Arc::new(pool),
        HeapConfig::default(),
        FencePolicy::Batched,
    )?)
}

/// Ours, the durable way a program allocates: one undo-log transaction per `alloc` and per
/// `free` (`Heap::transaction` with `Tx::alloc` / `Tx::free`).
pub struct OursTx(pub Heap);

impl Allocator for OursTx {
    fn name(&self) -> &'static str {
        "ours (transaction)"
    }

    fn durability(&self) -> &'static str {
        "one undo-log transaction each: bitmap word logged, written, flushed; commit fences"
    }

    fn alloc(&self, size: usize) -> Result<Block, AllocBenchError> {
        let ptr = self.0.transaction(|tx| tx.alloc(size as u64))?;
        Ok(Block::Offset(ptr.offset()))
    }

    fn free(&self, block: Block, _size: usize) -> Result<(), AllocBenchError> {
        let Block::Offset(offset) = block else {
            return Err(AllocBenchError::ForeignBlock(self.name()));
        };
        self.0
            .transaction(|tx| tx.free(pmem_ordering::PPtr::<u8>::new(offset)))?;
        Ok(())
    }
}

/// Ours without transactions: the record-block API the byte-key maps use (reserve, publish
/// with its bit flushed, one fence; retire with one fence, release).
pub struct OursRecord(pub Heap);

impl Allocator for OursRecord {
    fn name(&self) -> &'static str {
        "ours (record block)"
    }

    fn durability(&self) -> &'static str {
        "no transaction: bitmap bit stored and flushed, one fence each"
    }

    fn alloc(&self, size: usize) -> Result<Block, AllocBenchError> {
        let block = self.0.reserve_record(size as u64)?;
        let pending = self.0.publish_record(block)?;
        self.0.pool().fence(pending);
        Ok(Block::Record(block))
    }

    fn free(&self, block: Block, _size: usize) -> Result<(), AllocBenchError> {
        let Block::Record(block) = block else {
            return Err(AllocBenchError::ForeignBlock(self.name()));
        };
        let (retired, pending) = self.0.retire_record(block.offset)?;
        self.0.pool().fence(pending);
        self.0.release_record(retired)?;
        Ok(())
    }
}

fn layout(size: usize) -> Result<Layout, AllocBenchError> {
    Layout::from_size_align(size, ALIGN).map_err(|_| AllocBenchError::BadSize(size))
}

/// A volatile allocator through the `GlobalAlloc` interface, called directly (it is not the
/// process's global allocator).
pub struct Volatile<A: GlobalAlloc + Sync> {
    allocator: A,
    name: &'static str,
}

/// The system allocator (glibc `malloc` / `free`).
pub fn system() -> Volatile<System> {
    Volatile {
        allocator: System,
        name: "system (glibc malloc)",
    }
}

/// jemalloc (`tikv-jemallocator`).
pub fn jemalloc() -> Volatile<Jemalloc> {
    Volatile {
        allocator: Jemalloc,
        name: "jemalloc",
    }
}

impl<A: GlobalAlloc + Sync> Allocator for Volatile<A> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn durability(&self) -> &'static str {
        "volatile: nothing flushed or fenced"
    }

    fn alloc(&self, size: usize) -> Result<Block, AllocBenchError> {
        let layout = layout(size)?;
        // SAFETY: `layout` has a nonzero size (the sizes measured are 64 B and up).
        let p = unsafe { self.allocator.alloc(layout) };
        NonNull::new(p)
            .map(Block::Address)
            .ok_or(AllocBenchError::OutOfMemory(self.name, size))
    }

    fn free(&self, block: Block, size: usize) -> Result<(), AllocBenchError> {
        let Block::Address(p) = block else {
            return Err(AllocBenchError::ForeignBlock(self.name));
        };
        // SAFETY: `p` came from this allocator's `alloc` with the same layout (the caller
        // passes the size it allocated with), and is freed once (the block is consumed).
        unsafe { self.allocator.dealloc(p.as_ptr(), layout(size)?) };
        Ok(())
    }
}

/// libpmemobj's `pmemobj_alloc` / `pmemobj_free` on a pool file.
#[cfg(feature = "pmdk")]
pub struct PmemObj(pub crate::pmdk::ObjAllocPool);

#[cfg(feature = "pmdk")]
impl Allocator for PmemObj {
    fn name(&self) -> &'static str {
        "libpmemobj"
    }

    fn durability(&self) -> &'static str {
        "pmemobj_alloc / pmemobj_free: redo-logged metadata, persisted before returning"
    }

    fn alloc(&self, size: usize) -> Result<Block, AllocBenchError> {
        Ok(Block::Obj(self.0.alloc(size)?))
    }

    fn free(&self, block: Block, _size: usize) -> Result<(), AllocBenchError> {
        let Block::Obj(block) = block else {
            return Err(AllocBenchError::ForeignBlock(self.name()));
        };
        self.0.free(block);
        Ok(())
    }
}
