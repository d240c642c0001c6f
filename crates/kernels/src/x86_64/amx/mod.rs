//! AMX kernels: the tile unit multiplies sixteen prepared activation rows
//! by a block of weights expanded into its layout (four consecutive values
//! of each of sixteen rows per 64 bytes, the panels' own). Everything
//! around the tile products (scales, float steps) is the AVX-512 kernels'
//! arithmetic, so every output keeps their bits.
//!
//! Rust has no stable AMX intrinsics, so the tile instructions are inline
//! assembly on fixed tile registers. Linux hands out the tile state only on
//! request ([`usable`]); each thread loads its tile shapes before its first
//! tile instruction ([`configure`]). Miri runs no assembly, so these kernels
//! are tested natively only, against the AVX-512 and scalar kernels.

use crate::panel::MANY_TOKENS;
use core::arch::asm;
use std::cell::Cell;

mod q4_k;
mod q6_k;
mod tiles;

pub(crate) use q4_k::*;
pub(crate) use q6_k::*;

/// Whether this process may run the tile instructions: the CPU has AMX-TILE
/// and AMX-INT8, and the kernel granted the tile state (asked once).
pub(crate) fn usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| !cfg!(miri) && cpu_has_amx() && request_tile_state())
}

/// CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
fn cpu_has_amx() -> bool {
    let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
    leaf7.edx & (1 << 24) != 0 && leaf7.edx & (1 << 25) != 0
}

/// Asks Linux for the tile data state (`ARCH_REQ_XCOMP_PERM`): without it
/// the first tile instruction kills the process.
#[cfg(target_os = "linux")]
fn request_tile_state() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: `arch_prctl` with this request reads no memory; it only
    // grants (or refuses) the state for the whole process.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn request_tile_state() -> bool {
    false
}

/// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

thread_local! {
    /// Whether this thread's tiles are configured.
    static CONFIGURED: Cell<bool> = const { Cell::new(false) };
}

/// Configures this thread's tiles, where they are not already: all eight
/// hold [`MANY_TOKENS`] rows of 64 bytes (sums of sixteen i32 per token,
/// 64 activation bytes per token, or sixteen weight rows' 64 bytes).
///
/// # Safety
/// [`usable`] must have returned true.
#[inline(always)]
pub(super) unsafe fn configure() {
    CONFIGURED.with(|c| {
        if c.get() {
            return;
        }
        let mut cfg = TileConfig([0; 64]);
        cfg.0[0] = 1;
        for t in 0..8 {
            cfg.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
            cfg.0[48 + t] = MANY_TOKENS as u8;
        }
        // SAFETY: a valid palette-1 configuration; the caller made sure the
        // process holds the tile state.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly)) };
        c.set(true);
    });
}
