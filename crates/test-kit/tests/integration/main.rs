//! The crate's integration tests in one binary (a binary per file compiled and linked its own
//! copy of the generic code under test, which made the build several times slower); each file
//! is a module.

mod crash_modes;
mod driver;
mod fuzz_seeds;
mod record_crash;
mod record_regressions;
mod record_seeds;
mod store_seeds;
