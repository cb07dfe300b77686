//! The crate's integration tests in one binary (a binary per file compiled and linked its own
//! copy of the generic code under test, which made the build several times slower); each file
//! is a module.

mod crash_workloads;
mod trees_and_cache;
mod workloads;
