//! Reading the CPU's persist-related features, once.
//!
//! Under Miri every feature reads as absent: Miri cannot run `cpuid` nor the `asm!` flushes and
//! streaming intrinsics, so [`super::Isa::detected`] falls back to the portable instructions,
//! whose flushes are compiler fences and whose streaming stores are plain (non-atomic) writes.

use std::sync::OnceLock;

/// What the CPU offers, read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CpuFeatures {
    pub(super) clwb: bool,
    pub(super) clflushopt: bool,
    pub(super) clflush: bool,
    pub(super) sse2: bool,
    pub(super) avx: bool,
    pub(super) avx512f: bool,
}

pub(super) fn cpu_features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(read_cpu_features)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn read_cpu_features() -> CpuFeatures {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is present on every x86-64 CPU; leaf 0 gives the highest standard leaf.
    let max_leaf = __cpuid(0).eax;
    let leaf1 = __cpuid(1);
    let (clwb, clflushopt) = if max_leaf >= 7 {
        let leaf7 = __cpuid_count(7, 0);
        (leaf7.ebx & (1 << 24) != 0, leaf7.ebx & (1 << 23) != 0)
    } else {
        (false, false)
    };
    CpuFeatures {
        clwb,
        clflushopt,
        // CPUID.1:EDX bit 19 = CLFSH.
        clflush: leaf1.edx & (1 << 19) != 0,
        sse2: std::arch::is_x86_feature_detected!("sse2"),
        avx: std::arch::is_x86_feature_detected!("avx"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
    }
}

#[cfg(any(not(target_arch = "x86_64"), miri))]
fn read_cpu_features() -> CpuFeatures {
    CpuFeatures {
        clwb: false,
        clflushopt: false,
        clflush: false,
        sse2: false,
        avx: false,
        avx512f: false,
    }
}
