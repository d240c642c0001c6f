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
legacy_tile_fns! {
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    Q8_0, 34, q8_0_unsigned, 7, vnni_sets,
        k_q8_0_x16 => tile16_q8_0, k_q8_0_x12 => tile12_q8_0, k_q8_0_x8 => tile8_q8_0,
        k_q8_0_t4 => tile4_q8_0;
    Q4_0, 18, q4_0_unsigned, 3, vnni_sets,
        k_q4_0_x16 => tile16_q4_0, k_q4_0_x12 => tile12_q4_0, k_q4_0_x8 => tile8_q4_0,
        k_q4_0_t4 => tile4_q4_0;
    Q5_0, 22, q5_0_unsigned, 4, vnni_sets,
        k_q5_0_x16 => tile16_q5_0, k_q5_0_x12 => tile12_q5_0, k_q5_0_x8 => tile8_q5_0,
        k_q5_0_t4 => tile4_q5_0;
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

k_tiles! {
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    Q4_K: q4_k_tile(q4_k_unit), k_q4_k_x16 => tile16_q4_k, k_q4_k_x12 => tile12_q4_k,
        k_q4_k_x8 => tile8_q4_k, k_q4_k_t4 => tile4_q4_k;
    Q6_K: q6_k_tile(q6_k_unit), k_q6_k_x16 => tile16_q6_k, k_q6_k_x12 => tile12_q6_k,
        k_q6_k_x8 => tile8_q6_k, k_q6_k_t4 => tile4_q6_k;
}
