//! The tile products the AMX kernels share: one super-block's weights,
//! expanded into eight tiles, against sixteen prepared activation rows.
//! Each pair of tiles per 64 values carries two parts of the weights (the
//! kernel decides which), summed into two tiles of i32 per token that the
//! kernel then combines.

use core::arch::asm;

/// Super-blocks a kernel expands at a time: few enough that their tiles stay
/// in L1 while every group of tokens multiplies them.
pub(super) const WINDOW: usize = 2;

/// One super-block's weight tiles: per 64-value chunk `c`, tile `2c` holds
/// the first part of the weights and tile `2c + 1` the second (sixteen rows
/// of 64 bytes each, the tile unit's layout), 64-byte aligned.
#[repr(C, align(64))]
pub(super) struct Expanded(pub(super) [[[u8; 64]; 16]; 8]);

impl Expanded {
    pub(super) fn new() -> Self {
        Self([[[0; 64]; 16]; 8])
    }
}

/// Tile sums of one super-block for `T` tokens: `Σ a·part₀`, then
/// `Σ a·part₁`, one row of sixteen i32 (one per weight row) per token.
#[repr(C, align(64))]
pub(super) struct Sums<const T: usize>(pub(super) [[[i32; 16]; T]; 2]);

impl<const T: usize> Sums<T> {
    pub(super) fn new() -> Self {
        Self([[[0; 16]; T]; 2])
    }
}

/// Defines `$one` (the tile sums of one group of `T` rows) and `$two` (of
/// two groups, four sums in flight so that the tile unit does not wait for
/// one product before the next on the same sums), the first part of the
/// weights multiplied with `$first`, the second with `$second`.
macro_rules! tile_sums {
    ($one:ident, $two:ident, $first:literal, $second:literal) => {
        /// The tile sums of one super-block: `sums.0[p][t] = Σ a_t·part_p`
        /// over its 256 values, `a` the `T` prepared rows' quants (`arow`
        /// bytes apart, from `a`).
        ///
        /// # Safety
        /// Tiles configured ([`super::configure`]), `T` being their rows; `a`
        /// holds `T` rows of 256 bytes `arow` apart.
        #[inline(always)]
        pub(super) unsafe fn $one<const T: usize>(
            a: *const u8,
            arow: usize,
            e: &Expanded,
            sums: &mut Sums<T>,
        ) {
            // SAFETY: the caller's contract; `e` holds the eight weight tiles
            // and `sums` two of `T` rows.
            unsafe {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tileloadd tmm2, [{a} + {arow} * 1]",
                    "tileloadd tmm4, [{e} + {row} * 1]",
                    "tileloadd tmm5, [{e} + {row} * 1 + 1024]",
                    concat!($first, " tmm0, tmm2, tmm4"),
                    concat!($second, " tmm1, tmm2, tmm5"),
                    "tileloadd tmm3, [{a} + {arow} * 1 + 64]",
                    "tileloadd tmm6, [{e} + {row} * 1 + 2048]",
                    "tileloadd tmm7, [{e} + {row} * 1 + 3072]",
                    concat!($first, " tmm0, tmm3, tmm6"),
                    concat!($second, " tmm1, tmm3, tmm7"),
                    "tileloadd tmm2, [{a} + {arow} * 1 + 128]",
                    "tileloadd tmm4, [{e} + {row} * 1 + 4096]",
                    "tileloadd tmm5, [{e} + {row} * 1 + 5120]",
                    concat!($first, " tmm0, tmm2, tmm4"),
                    concat!($second, " tmm1, tmm2, tmm5"),
                    "tileloadd tmm3, [{a} + {arow} * 1 + 192]",
                    "tileloadd tmm6, [{e} + {row} * 1 + 6144]",
                    "tileloadd tmm7, [{e} + {row} * 1 + 7168]",
                    concat!($first, " tmm0, tmm3, tmm6"),
                    concat!($second, " tmm1, tmm3, tmm7"),
                    "tilestored [{s} + {row} * 1], tmm0",
                    "tilestored [{s1} + {row} * 1], tmm1",
                    a = in(reg) a,
                    arow = in(reg) arow,
                    e = in(reg) e.0.as_ptr(),
                    s = in(reg) sums.0[0].as_mut_ptr(),
                    s1 = in(reg) sums.0[1].as_mut_ptr(),
                    row = in(reg) 64usize,
                    options(nostack),
                );
            }
        }

        /// [`$one`] of two groups of `T` rows (`a[0]`, `a[1]`) into
        /// `sums[0]` and `sums[1]`.
        ///
        /// # Safety
        /// As for [`$one`], for both groups.
        #[inline(always)]
        pub(super) unsafe fn $two<const T: usize>(
            a: [*const u8; 2],
            arow: usize,
            e: &Expanded,
            sums: &mut [Sums<T>; 2],
        ) {
            // SAFETY: the caller's contract; `e` holds the eight weight tiles
            // and `sums` two pairs of `T` rows.
            unsafe {
                let [s0, s1] = sums;
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    "tileloadd tmm4, [{a0} + {arow} * 1 + 0]",
                    "tileloadd tmm5, [{a1} + {arow} * 1 + 0]",
                    "tileloadd tmm6, [{e} + {row} * 1 + 0]",
                    "tileloadd tmm7, [{e} + {row} * 1 + 1024]",
                    concat!($first, " tmm0, tmm4, tmm6"),
                    concat!($second, " tmm1, tmm4, tmm7"),
                    concat!($first, " tmm2, tmm5, tmm6"),
                    concat!($second, " tmm3, tmm5, tmm7"),
                    "tileloadd tmm4, [{a0} + {arow} * 1 + 64]",
                    "tileloadd tmm5, [{a1} + {arow} * 1 + 64]",
                    "tileloadd tmm6, [{e} + {row} * 1 + 2048]",
                    "tileloadd tmm7, [{e} + {row} * 1 + 3072]",
                    concat!($first, " tmm0, tmm4, tmm6"),
                    concat!($second, " tmm1, tmm4, tmm7"),
                    concat!($first, " tmm2, tmm5, tmm6"),
                    concat!($second, " tmm3, tmm5, tmm7"),
                    "tileloadd tmm4, [{a0} + {arow} * 1 + 128]",
                    "tileloadd tmm5, [{a1} + {arow} * 1 + 128]",
                    "tileloadd tmm6, [{e} + {row} * 1 + 4096]",
                    "tileloadd tmm7, [{e} + {row} * 1 + 5120]",
                    concat!($first, " tmm0, tmm4, tmm6"),
                    concat!($second, " tmm1, tmm4, tmm7"),
                    concat!($first, " tmm2, tmm5, tmm6"),
                    concat!($second, " tmm3, tmm5, tmm7"),
                    "tileloadd tmm4, [{a0} + {arow} * 1 + 192]",
                    "tileloadd tmm5, [{a1} + {arow} * 1 + 192]",
                    "tileloadd tmm6, [{e} + {row} * 1 + 6144]",
                    "tileloadd tmm7, [{e} + {row} * 1 + 7168]",
                    concat!($first, " tmm0, tmm4, tmm6"),
                    concat!($second, " tmm1, tmm4, tmm7"),
                    concat!($first, " tmm2, tmm5, tmm6"),
                    concat!($second, " tmm3, tmm5, tmm7"),
                    "tilestored [{s0} + {row} * 1], tmm0",
                    "tilestored [{s0} + {row} * 1 + {half}], tmm1",
                    "tilestored [{s1} + {row} * 1], tmm2",
                    "tilestored [{s1} + {row} * 1 + {half}], tmm3",
                    a0 = in(reg) a[0],
                    a1 = in(reg) a[1],
                    arow = in(reg) arow,
                    e = in(reg) e.0.as_ptr(),
                    s0 = in(reg) s0.0.as_mut_ptr(),
                    s1 = in(reg) s1.0.as_mut_ptr(),
                    row = in(reg) 64usize,
                    half = const 64 * T,
                    options(nostack),
                );
            }
        }
    };
}

// Q4_K: signed activations against weights made unsigned, both parts.
tile_sums!(signed_unsigned, signed_unsigned2, "tdpbsud", "tdpbsud");
// Q6_K: activations plus 128 (unsigned) against the products' unsigned low
// bytes, then their signed high bytes.
tile_sums!(unsigned_mixed, unsigned_mixed2, "tdpbuud", "tdpbusd");
