//! The crate's integration tests in one binary (a binary per file compiled and linked its own
//! copy of the code under test); each file is a module. The pool tests the DAX guest runs by
//! binary (`pool`, `pool_create`, `pool_open`, `pool_lock`, `page_size`, `process_crash`) stay
//! binaries of their own.

mod barrier_support;
#[path = "../common/mod.rs"]
mod common;

mod barriers;
mod concurrent_access;
mod error_messages;
mod persist_tokens;
mod simulator;
mod streaming;
