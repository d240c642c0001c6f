//! How far ahead of their weight stream the kernels over stored panels
//! prefetch, chosen once per process: decoding reads every weight once a
//! token, so it runs at the speed the stream reaches memory.
//!
//! The one-token kernels do enough work between loads to hide the stream's
//! pattern from the hardware prefetchers, on Intel and AMD alike. So they
//! prefetch [`INTEL_AHEAD`] bytes ahead on Intel CPUs and [`AMD_AHEAD`] on
//! the others (each the best distance measured on that vendor's cores).
//! The kernels that take a few tokens at once do several times that work
//! per byte: they prefetch [`BATCH_AHEAD`] bytes ahead on every CPU.
//! The F32 kernels that stream rows from memory (the tiles of the first
//! token block, each hinting its share of a group's rows, and one token's
//! eight-row kernel) prefetch [`F32_AHEAD`] bytes ahead, rounded up to
//! whole groups of the rows they read side by side.
//! `LAMINA_PREFETCH` (bytes, `0` for none) overrides every choice when
//! tuning a new machine. A prefetch never changes a result, only its speed.

use crate::KernelError;
use std::sync::OnceLock;

/// The default distance on Intel CPUs: far enough to cover a DRAM miss at
/// decoding speed, near enough that the lines are still in L2 when read.
pub const INTEL_AHEAD: usize = 3072;

/// The default distance on other x86-64 CPUs (AMD's): farther than Intel's,
/// as the decode speed of AMD EPYC Zen 5 cores peaked there.
// Miri takes the Intel distance (it has no `cpuid`).
#[cfg_attr(miri, allow(dead_code))]
pub const AMD_AHEAD: usize = 6144;

/// The default distance of the small-batch kernels over stored panels, on
/// every CPU.
pub const BATCH_AHEAD: usize = 6144;

/// The default distance of the F32 kernels on every CPU: a group of rows
/// streams from memory while the rows this far on arrive.
pub const F32_AHEAD: usize = 16384;

/// The largest distance `LAMINA_PREFETCH` takes (1 MiB: far past any use).
pub const MAX_AHEAD: usize = 1 << 20;

/// The distance a `LAMINA_PREFETCH` value asks for (`None` or empty: this
/// CPU's default).
pub fn resolve(value: Option<&str>) -> Result<usize, KernelError> {
    match value.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(default_ahead()),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&b| b <= MAX_AHEAD)
            .ok_or_else(|| KernelError::BadPrefetch(v.to_string())),
    }
}

/// The distance in use for this process: `LAMINA_PREFETCH` read and
/// checked once (the kernel tables report a bad value).
pub fn selected() -> Result<usize, KernelError> {
    cached().clone()
}

fn cached() -> &'static Result<usize, KernelError> {
    static SELECTED: OnceLock<Result<usize, KernelError>> = OnceLock::new();
    SELECTED.get_or_init(|| resolve(std::env::var("LAMINA_PREFETCH").ok().as_deref()))
}

/// [`selected`] for the kernels, read in place (a refused value's error is
/// not cloned on every call): no prefetch where it was refused (every
/// table lookup has reported that already).
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn ahead() -> usize {
    *cached().as_ref().unwrap_or(&0)
}

/// [`ahead`] for the kernels over stored panels that take two tokens or
/// more: `LAMINA_PREFETCH` where it is set, else [`BATCH_AHEAD`]; none
/// where it was refused (every table lookup has reported that already).
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn batch_ahead() -> usize {
    static SELECTED: OnceLock<usize> = OnceLock::new();
    *SELECTED.get_or_init(|| {
        resolve_or(
            std::env::var("LAMINA_PREFETCH").ok().as_deref(),
            BATCH_AHEAD,
        )
        .unwrap_or(0)
    })
}

/// [`ahead`] for the F32 kernels: `LAMINA_PREFETCH` where it is set, else
/// [`F32_AHEAD`]; none where it was refused.
#[inline]
pub(crate) fn f32_ahead() -> usize {
    static SELECTED: OnceLock<usize> = OnceLock::new();
    *SELECTED.get_or_init(|| {
        resolve_or(std::env::var("LAMINA_PREFETCH").ok().as_deref(), F32_AHEAD).unwrap_or(0)
    })
}

/// `ahead` rounded up to whole groups of `group` bytes (0 stays 0): a
/// kernel reading a group of rows side by side then hints the same row and
/// column of a later group, each line well before its turn, where a
/// distance inside the group would hint lines its other rows have read.
pub(crate) fn whole_groups(ahead: usize, group: usize) -> usize {
    match (ahead, group) {
        (0, _) | (_, 0) => 0,
        _ => ahead.div_ceil(group).saturating_mul(group),
    }
}

/// The distance a `LAMINA_PREFETCH` value asks for of kernels whose
/// default is the same on every CPU (`None` or empty: `default`).
fn resolve_or(value: Option<&str>, default: usize) -> Result<usize, KernelError> {
    match value.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(default),
        Some(v) => resolve(Some(v)),
    }
}

/// [`INTEL_AHEAD`] on Intel CPUs, else [`AMD_AHEAD`]. Under Miri (no
/// `cpuid`) the Intel distance, so that the prefetching path is interpreted
/// too.
fn default_ahead() -> usize {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let id = std::arch::x86_64::__cpuid(0);
        let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes).concat();
        if vendor == *b"GenuineIntel" {
            INTEL_AHEAD
        } else {
            AMD_AHEAD
        }
    }
    #[cfg(all(target_arch = "x86_64", miri))]
    {
        INTEL_AHEAD
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Hints the lines of `bytes` bytes starting `ahead` bytes past `p` into
/// L2 (`prefetcht1`); nothing where `ahead` is 0 or off x86-64 (where no
/// kernel calls it yet).
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn stream_ahead(p: *const u8, ahead: usize, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    if ahead > 0 {
        let start = p.wrapping_add(ahead);
        // From the line holding the first byte to the one holding the last.
        let first = start.wrapping_sub(start as usize % 64);
        let end = start.wrapping_add(bytes);
        let mut line = first;
        while line < end {
            hint_l2(line);
            line = line.wrapping_add(64);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, ahead, bytes);
}

/// Hints the line holding `p` into L2 (`prefetcht1`); nothing off x86-64.
#[inline(always)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn hint_l2(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address;
    // SSE is part of x86-64.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T1>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_parse_and_bad_ones_are_refused() {
        assert_eq!(resolve(Some("0")), Ok(0));
        assert_eq!(resolve(Some(" 4096 ")), Ok(4096));
        assert_eq!(resolve(None), Ok(default_ahead()));
        assert_eq!(resolve(Some("")), Ok(default_ahead()));
        for bad in ["-1", "4k", "2097152"] {
            let e = resolve(Some(bad)).unwrap_err();
            assert!(e.to_string().contains("LAMINA_PREFETCH"), "{e}");
        }
    }

    #[test]
    fn batch_and_f32_kernels_prefetch_by_default_unless_told_otherwise() {
        for default in [BATCH_AHEAD, F32_AHEAD] {
            assert_eq!(resolve_or(None, default), Ok(default));
            assert_eq!(resolve_or(Some(" "), default), Ok(default));
            assert_eq!(resolve_or(Some("0"), default), Ok(0));
            assert_eq!(resolve_or(Some("2048"), default), Ok(2048));
            assert!(resolve_or(Some("4k"), default).is_err());
        }
    }

    #[test]
    fn distances_round_up_to_whole_groups() {
        assert_eq!(whole_groups(16384, 6144), 18432);
        assert_eq!(whole_groups(16384, 24576), 24576);
        assert_eq!(whole_groups(16384, 4096), 16384);
        assert_eq!(whole_groups(0, 6144), 0);
        assert_eq!(whole_groups(16384, 0), 0);
    }

    #[test]
    fn streaming_ahead_touches_nothing() {
        let buf = [7u8; 256];
        // Past the end, unaligned, and off: hints only.
        stream_ahead(buf.as_ptr().wrapping_add(3), 4096, 200);
        stream_ahead(buf.as_ptr(), 0, 200);
        assert!(buf.iter().all(|&b| b == 7));
    }
}
