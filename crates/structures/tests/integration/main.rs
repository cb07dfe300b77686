//! The crate's integration tests in one binary: a test binary per file would each compile and
//! link its own copy of the structures' generic code, which made the build several times
//! slower. Each file is a module; `cargo test --release -p pmem-structures --test integration
//! <module>::` runs one file's tests.
//!
//! Left out, as binaries of their own: the tests the DAX guest runs by binary (`store`,
//! `store_files`, `verify_store`, and the kill tests, which re-execute their binary by test
//! name) and `open_or_create_race`, which re-executes its binary as racing processes.

mod batches;
mod batches_crash;
mod batches_crash_leaves;
mod batches_proptest;
mod bit_flips;
mod borrowed_reads;
mod cceh;
mod cceh_crash;
mod datalog;
mod datalog_crash;
mod datalog_damage;
mod datalog_model;
mod fastfair;
mod fastfair_crash;
mod full_store_removal;
mod full_store_shrinks;
mod golden;
mod leaf_layout;
mod leaf_map_crash;
mod leaf_map_proptest;
mod lending_scans;
mod owned_handles;
mod record_header_damage;
mod record_maps_crash;
mod record_maps_proptest;
mod record_space;
mod record_tree_format;
mod roots;
mod steady_state;
mod store_crash;
mod store_proptest;
mod store_scans;
mod typed_catalog;
mod typed_maps;
mod u64map;
mod verify;
mod verify_datalog;
mod verify_records;
