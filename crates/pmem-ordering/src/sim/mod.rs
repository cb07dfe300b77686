//! The crash simulator (in progress).
