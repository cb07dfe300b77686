//! [`Cceh::insert_batch`] and the speculative helper thread of Optane buffering (EuroSys'22),
//! Sec. 4.1: a second thread walks the lookup path of the keys a few places ahead of the
//! inserting thread and prefetches it. It only loads and prefetches (no store, no lock), so it
//! can change how fast a batch runs, never what it does.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use pmem_ordering::Backend;

use super::hashing::hash;
use super::{BatchOptions, Cceh, CcehError, KeyWords, EMPTY_KEY, RESERVED};
use crate::sync::affinity::{current_cpu, pin_away_from};

impl<B: Backend> Cceh<B> {
    /// Insert every pair, as [`Cceh::insert`] would one after the other; returns how many keys
    /// were new. Key 0 anywhere in the batch is refused before anything is written, and so is
    /// a batch for a table whose key words are hashes of byte keys
    /// ([`CcehError::InvalidConfig`]): its entries are written through the byte-key map.
    ///
    /// With `options.helper`, a second thread (pinned to another core where the machine
    /// allows) walks the lookup path of the keys up to `options.depth` ahead of this one, hash
    /// -> directory entry -> segment -> the four buckets of the probing window, and prefetches
    /// them, so the inserting thread finds them in the cache: the speculative helper thread of
    /// Optane buffering (EuroSys'22), Sec. 4.1. The helper only loads and prefetches: it makes
    /// no store and takes no lock, so it cannot change what the batch does, only how fast. It
    /// stops when the batch ends. With `options.inline_prefetch`, this thread prefetches the
    /// same path itself, `options.depth` keys ahead, before each insert.
    pub fn insert_batch(
        &self,
        items: &[(u64, u64)],
        options: BatchOptions,
    ) -> Result<u64, CcehError> {
        if items.iter().any(|&(k, _)| k == EMPTY_KEY) {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        if self.key_words == KeyWords::Hashed {
            return Err(CcehError::InvalidConfig {
                reason: "insert_batch takes u64 keys, and this table's key words are hashes of \
                         byte keys: insert its entries through the byte-key map"
                    .into(),
            });
        }
        let ahead = options.depth.max(1);
        let words = self.pool_words()?;
        let insert_all = |progress: Option<&AtomicUsize>| {
            let mut inserted = 0;
            for (i, &(key, value)) in items.iter().enumerate() {
                if let Some(p) = progress {
                    p.store(i, Ordering::Release);
                }
                if options.inline_prefetch {
                    if let Some(&(next, _)) = items.get(i + ahead) {
                        self.prefetch_path(words, hash(next));
                    }
                }
                if self.insert(key, value)? {
                    inserted += 1;
                }
            }
            Ok(inserted)
        };
        if !options.helper || items.len() < 2 {
            return insert_all(None);
        }
        let progress = AtomicUsize::new(0);
        let finished = AtomicBool::new(false);
        let worker_cpu = current_cpu();
        std::thread::scope(|s| {
            s.spawn(|| {
                pin_away_from(worker_cpu);
                self.speculate(items, &progress, &finished, options.depth.max(1));
            });
            let result = insert_all(Some(&progress));
            finished.store(true, Ordering::Release);
            result
        })
    }

    /// The helper thread's walk: stay between 1 and `depth` keys ahead of the worker.
    fn speculate(
        &self,
        items: &[(u64, u64)],
        progress: &AtomicUsize,
        finished: &AtomicBool,
        depth: usize,
    ) {
        // The helper only prefetches: without a view of the pool it has nothing to do.
        let Ok(words) = self.pool_words() else {
            return;
        };
        let mut next = 1;
        while next < items.len() && !finished.load(Ordering::Acquire) {
            let worker = progress.load(Ordering::Acquire);
            // Behind the worker, skip ahead; too far ahead, wait for it (one pause: the worker
            // moves on within an insert, and the helper must not fall behind it).
            next = next.max(worker + 1);
            if next > worker + depth {
                std::hint::spin_loop();
                continue;
            }
            if next >= items.len() {
                break;
            }
            self.prefetch_path(words, hash(items[next].0));
            next += 1;
        }
    }
}
