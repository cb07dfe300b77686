//! The crate's integration tests in one binary (a binary per file compiled and linked its own
//! copy of openraft's generic code over this crate's types); each file is a module.

mod common;
mod history;

mod cluster;
mod conformance;
mod log_store_crash;
mod log_store_proptest;
mod multi_process;
mod nodes;
mod state_machine;
mod state_machine_crash;
