//! AVX-512 VNNI tiles over packed activations: AVX2's tile bodies with a
//! `vpdpbusd` unit.

use super::*;

/// `S` packed sets of four rows against unsigned quants `q` with 256-bit
/// `vpdpbusd` (exact for any unsigned byte); 512-bit steps covering both sets
/// at once are slower, for the shuffles they need.
#[inline(always)]
unsafe fn vnni_sets<const S: usize>(q: __m256i, y: *const u8, init: [__m256i; S]) -> [__m256i; S] {
    // SAFETY: `y` holds 4 × S packed vectors; AVX-512 VL + VNNI are enabled
    // in the callers.
    unsafe {
        let ws = all_dwords(q);
        let mut acc = init;
        for (j, w) in ws.into_iter().enumerate() {
            for (set, acc) in acc.iter_mut().enumerate() {
                let a = _mm256_loadu_si256(y.add(32 * (j * S + set)).cast());
                *acc = _mm256_dpbusd_epi32(*acc, w, a);
            }
        }
        acc
    }
}
// The same exact block sums as the AVX2 tiles (so the same bits), with every
// weight type made unsigned.
kernel_fns! { tiles avx512, Q8_0;
    Q8_0 => tile16_q8_0: 4, tile12_q8_0: 3, tile8_q8_0: 2, tile4_q8_0: 1
        = |nb, w, packed| legacy_tile::<S, H, 7>(nb, w, 34, packed, q8_0_unsigned, vnni_sets::<S>);
    Q4_0 => tile16_q4_0: 4, tile12_q4_0: 3, tile8_q4_0: 2, tile4_q4_0: 1
        = |nb, w, packed| legacy_tile::<S, H, 3>(nb, w, 18, packed, q4_0_unsigned, vnni_sets::<S>);
    Q5_0 => tile16_q5_0: 4, tile12_q5_0: 3, tile8_q5_0: 2, tile4_q5_0: 1
        = |nb, w, packed| legacy_tile::<S, H, 4>(nb, w, 22, packed, q5_0_unsigned, vnni_sets::<S>);
}

/// One K-quant unit's exact sums against `S` packed sets of four rows with
/// `vpdpbusd` (each lane: 16 products of a quant and an i8), before scaling.
#[inline(always)]
unsafe fn vnni_unit_sums<const S: usize>(q: __m256i, y: *const u8) -> [__m256i; S] {
    // SAFETY: `y` holds the unit's 4 × S packed vectors; AVX-512 VL + VNNI are
    // enabled in the callers.
    unsafe {
        let ws = all_dwords(q);
        let mut parts = [_mm256_setzero_si256(); S];
        for (set, part) in parts.iter_mut().enumerate() {
            for (j, &w) in ws.iter().enumerate() {
                let a = _mm256_loadu_si256(y.add(32 * (j * S + set)).cast());
                *part = _mm256_dpbusd_epi32(*part, w, a);
            }
        }
        parts
    }
}

/// [`crate::x86_64::avx2::Q4KUnit`] with `vpdpbusd`: |Σ| ≤ 16·15·128 < 2^15 per lane,
/// so the i32 lanes are i16 values and one `madd` by `(scale, 0)` scales them
/// exactly.
#[inline(always)]
unsafe fn q4_k_unit<const S: usize>(q: __m256i, y: *const u8, scale: i16, acc: &mut [__m256i; S]) {
    // SAFETY: forwarded from the tile's contract; AVX-512 VL + VNNI are enabled.
    unsafe {
        let sc = _mm256_set1_epi32(scale as u16 as i32);
        for (acc, part) in acc.iter_mut().zip(vnni_unit_sums::<S>(q, y)) {
            *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(part, sc));
        }
    }
}

/// [`crate::x86_64::avx2::Q6KUnit`] with `vpdpbusd`: 16 products of up to 63·128 per
/// lane overflow i16, so the scales go on with one `vpmulld` (exact: the
/// sums stay far inside i32).
#[inline(always)]
unsafe fn q6_k_unit<const S: usize>(
    q: __m256i,
    y: *const u8,
    scales: [i8; 2],
    acc: &mut [__m256i; S],
) {
    // SAFETY: forwarded from the tile's contract; AVX-512 VL + VNNI are enabled.
    unsafe {
        let sc = _mm256_set_m128i(
            _mm_set1_epi32(scales[1] as i32),
            _mm_set1_epi32(scales[0] as i32),
        );
        for (acc, part) in acc.iter_mut().zip(vnni_unit_sums::<S>(q, y)) {
            *acc = _mm256_add_epi32(*acc, _mm256_mullo_epi32(part, sc));
        }
    }
}

kernel_fns! { tiles avx512, Q8_K;
    Q4_K => tile16_q4_k: 4, tile12_q4_k: 3, tile8_q4_k: 2, tile4_q4_k: 1
        = |nb, w, packed| q4_k_tile::<S>(nb, w, packed, q4_k_unit::<S>);
    Q6_K => tile16_q6_k: 4, tile12_q6_k: 3, tile8_q6_k: 2, tile4_q6_k: 1
        = |nb, w, packed| q6_k_tile::<S>(nb, w, packed, q6_k_unit::<S>);
}
