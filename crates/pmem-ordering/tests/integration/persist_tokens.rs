//! Persist tokens are bound to their pool and thread: a token used on another pool panics
//! before any fence is issued, and flush or nt-store tokens, which only a fence of their own
//! thread orders, are neither `Send` nor `Sync`.

use std::marker::PhantomData;

use pmem_ordering::{reset_thread_stats, thread_stats, Durable, NtPending, Pending, Pool};
use pmem_ordering::{PersistModel, Written};

use super::barrier_support;
use barrier_support::{nt_write, pool, AT};

// ------------------------------------------------------------------------- wrong pool

const WRONG_POOL: &str = "a persist token was used on a pool other than the one that made it";

#[test]
#[should_panic(expected = "a persist token was used on a pool other than the one that made it")]
fn a_written_token_of_another_pool_panics_on_flush() {
    let a = pool(PersistModel::X86);
    let b = pool(PersistModel::X86);
    let w = a.write(AT, &[1]).unwrap();
    let _ = b.flush(w);
}

#[test]
#[should_panic(expected = "a persist token was used on a pool other than the one that made it")]
fn a_written_token_of_another_pool_panics_on_persist() {
    let a = pool(PersistModel::X86);
    let b = pool(PersistModel::X86);
    let w = a.write(AT, &[1]).unwrap();
    b.persist(w);
}

#[test]
#[should_panic(expected = "a persist token was used on a pool other than the one that made it")]
fn a_pending_token_of_another_pool_panics_on_fence() {
    let a = pool(PersistModel::X86);
    let b = pool(PersistModel::X86);
    let p = a.flush_range(AT, 8).unwrap();
    b.fence(p);
}

#[test]
#[should_panic(expected = "a persist token was used on a pool other than the one that made it")]
fn a_pending_token_of_another_pool_panics_in_fence_all() {
    let a = pool(PersistModel::X86);
    let b = pool(PersistModel::X86);
    let mine = b.flush_range(AT, 8).unwrap();
    let theirs = a.flush_range(AT, 8).unwrap();
    b.fence_all([mine, theirs]);
}

#[test]
#[should_panic(expected = "a persist token was used on a pool other than the one that made it")]
fn an_nt_token_of_another_pool_panics_on_write_after() {
    let a = pool(PersistModel::X86);
    let b = pool(PersistModel::X86);
    let nt = nt_write(&a, AT, &[1; 8]).unwrap();
    let _ = b.write_after(nt, AT, &[2]);
}

#[test]
#[should_panic(expected = "a persist token was used on a pool other than the one that made it")]
fn an_nt_token_of_another_pool_panics_on_order_after() {
    let a = pool(PersistModel::Themis);
    let b = pool(PersistModel::Themis);
    let nt = nt_write(&a, AT, &[1; 8]).unwrap();
    let _ = b.order_after(nt);
}

#[test]
fn a_wrong_pool_panic_happens_before_any_fence() {
    let a = pool(PersistModel::X86);
    let b = pool(PersistModel::X86);
    let p = a.flush_range(AT, 8).unwrap();
    reset_thread_stats();
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        b.fence(p);
    }))
    .unwrap_err();
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(msg.contains(WRONG_POOL), "{msg}");
    assert_eq!(thread_stats().fences, 0);
}

// ------------------------------------------------------------------------- Send / Sync

/// Answers "does `T` implement `Send` / `Sync`?" for a concrete type without specialization:
/// the inherent associated const exists only when the bound holds, and then shadows the trait's
/// fallback const (the trick of the `impls` crate).
trait Fallback {
    const SEND: bool = false;
    const SYNC: bool = false;
}

struct SendProbe<T: ?Sized>(PhantomData<T>);
impl<T: ?Sized> Fallback for SendProbe<T> {}
impl<T: ?Sized + Send> SendProbe<T> {
    const SEND: bool = true;
}

struct SyncProbe<T: ?Sized>(PhantomData<T>);
impl<T: ?Sized> Fallback for SyncProbe<T> {}
impl<T: ?Sized + Sync> SyncProbe<T> {
    const SYNC: bool = true;
}

macro_rules! is_send {
    ($t:ty) => {
        std::hint::black_box(SendProbe::<$t>::SEND)
    };
}
macro_rules! is_sync {
    ($t:ty) => {
        std::hint::black_box(SyncProbe::<$t>::SYNC)
    };
}

#[test]
fn pending_tokens_are_not_send() {
    // The probe itself works both ways.
    assert!(is_send!(u64) && is_sync!(u64));
    assert!(!is_send!(*const u8) && !is_sync!(*const u8));
    assert!(!is_send!(std::rc::Rc<u8>));
    assert!(is_send!(std::cell::Cell<u8>) && !is_sync!(std::cell::Cell<u8>));

    // Flushes and nt-stores are ordered only by a fence of their own thread.
    assert!(!is_send!(NtPending), "NtPending must be !Send");
    assert!(!is_sync!(NtPending), "NtPending must be !Sync");
    assert!(!is_send!(Pending), "Pending must be !Send");
    assert!(!is_sync!(Pending), "Pending must be !Sync");
    // A write not yet flushed may move (any thread may flush it), and proof of durability too.
    assert!(is_send!(Written));
    assert!(is_send!(Durable));
    // Pools are shared between threads.
    assert!(is_send!(Pool) && is_sync!(Pool));
}
