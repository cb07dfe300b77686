//! Tests of the write hook of [`FastFair::put_with`](super::FastFair::put_with) and
//! [`FastFair::remove_with`](super::FastFair::remove_with), on the simulator: where the hook
//! runs among the operation's events, that its `Err` changes nothing, that it costs no fence,
//! and that its flushed store is durable when the operation returns, in every crash image.
//! They are unit tests because the hooked operations are crate-private.

mod crash;
mod fences;
mod fixture;
mod ordering;
