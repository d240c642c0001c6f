//! AVX2 unpackers of ggml weight rows into the panels of [`crate::panel`]
//! (sixteen rows side by side, as the AVX2 panel kernels read them).

use super::*;

/// Eight rows of eight dwords transposed: lane `r` of `o[d]` is lane `d` of
/// `v[r]` (dword `d` of row `r`), in 24 shuffles.
#[inline(always)]
unsafe fn transpose8(v: [__m256i; 8]) -> [__m256i; 8] {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        // x[g][c], 128-bit half `l`: dword 4l + c of rows 4g..4g+4.
        let mut x = [[_mm256_setzero_si256(); 4]; 2];
        for (g, x) in x.iter_mut().enumerate() {
            let (a, b, c, d) = (v[4 * g], v[4 * g + 1], v[4 * g + 2], v[4 * g + 3]);
            let (ab_lo, ab_hi) = (_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
            let (cd_lo, cd_hi) = (_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
            x[0] = _mm256_unpacklo_epi64(ab_lo, cd_lo);
            x[1] = _mm256_unpackhi_epi64(ab_lo, cd_lo);
            x[2] = _mm256_unpacklo_epi64(ab_hi, cd_hi);
            x[3] = _mm256_unpackhi_epi64(ab_hi, cd_hi);
        }
        let mut o = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            o[c] = _mm256_permute2x128_si256::<0x20>(x[0][c], x[1][c]);
            o[4 + c] = _mm256_permute2x128_si256::<0x31>(x[0][c], x[1][c]);
        }
        o
    }
}

#[inline(always)]
pub(super) unsafe fn store(p: *mut u8, v: __m256i) {
    // SAFETY: the caller passes 32 writable bytes; unaligned store.
    unsafe { _mm256_storeu_si256(p.cast(), v) }
}

/// The f16 scales of block `i` of sixteen rows (`wsize` bytes per block,
/// the scale first) as f32 at `dst`.
#[inline(always)]
unsafe fn scales_f32(rows: *const u8, rb: usize, wsize: usize, i: usize, dst: *mut u8) {
    // SAFETY: sixteen rows of at least `i + 1` blocks and 64 writable bytes
    // at `dst` (the callers' contract); AVX2 and F16C are enabled in them.
    unsafe {
        let bits: [u16; 16] =
            std::array::from_fn(|r| rows.add(r * rb + wsize * i).cast::<u16>().read_unaligned());
        let v = _mm256_loadu_si256(bits.as_ptr().cast());
        _mm256_storeu_ps(dst.cast(), _mm256_cvtph_ps(_mm256_castsi256_si128(v)));
        _mm256_storeu_ps(
            dst.add(32).cast(),
            _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(v)),
        );
    }
}

/// The quants of block `i` of sixteen Q8_0 rows (`rb` bytes apart) as the
/// i16 panel's pairs: each row sign-extended to two vectors of eight pairs,
/// transposed eight rows at a time.
#[inline(always)]
unsafe fn unpack_q8_0_i16_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: sixteen rows of at least `i + 1` blocks and a whole panel block
    // at `dst` (the wrapper's checks); AVX2 is enabled in the callers.
    unsafe {
        for h in 0..2 {
            let (mut lo, mut hi) = ([_mm256_setzero_si256(); 8], [_mm256_setzero_si256(); 8]);
            for r in 0..8 {
                let x = rows.add((8 * h + r) * rb + 34 * i + 2);
                lo[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.cast()));
                hi[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(16).cast()));
            }
            let (lo, hi) = (transpose8(lo), transpose8(hi));
            for k in 0..8 {
                store(dst.add(64 * k + 32 * h), lo[k]);
                store(dst.add(64 * (8 + k) + 32 * h), hi[k]);
            }
        }
        scales_f32(rows, rb, 34, i, dst.add(1024));
    }
}

/// The quants of block `i` of sixteen legacy rows (`wsize` bytes per block)
/// decoded unsigned by `quants` (the panel's `w + 2^shift`, or Q4_1's and
/// Q5_1's quants as they are), transposed eight rows at a time, then the
/// rows' `d`.
#[inline(always)]
unsafe fn unpack_legacy_block(
    rows: *const u8,
    rb: usize,
    wsize: usize,
    i: usize,
    quants: unsafe fn(*const u8) -> __m256i,
    dst: *mut u8,
) {
    // SAFETY: as for `unpack_q8_0_i16_block`, with legacy rows and panel block.
    unsafe {
        for h in 0..2 {
            // A plain loop, not `array::from_fn`: its closure is compiled
            // apart, without AVX2, and `quants` through it a call per block.
            let mut v = [_mm256_setzero_si256(); 8];
            for (r, v) in v.iter_mut().enumerate() {
                *v = quants(rows.add((8 * h + r) * rb + wsize * i));
            }
            for (k, o) in transpose8(v).into_iter().enumerate() {
                store(dst.add(64 * k + 32 * h), o);
            }
        }
        scales_f32(rows, rb, wsize, i, dst.add(512));
    }
}

/// The quants of block `i` of sixteen Q2_K rows into panel block `dst`:
/// each row's two 32-byte quant chunks as two-bit fields (field `k` of byte
/// `32c + l` is value `128c + 32k + l`), transposed eight rows at a time.
#[inline(always)]
unsafe fn unpack_q2_k_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: as for `unpack_q8_0_i16_block`, with Q2_K rows and panel block.
    unsafe {
        let m2 = _mm256_set1_epi8(3);
        for h in 0..2 {
            for c in 0..2 {
                let mut q = [_mm256_setzero_si256(); 8];
                for (r, q) in q.iter_mut().enumerate() {
                    *q = load256(rows.add((8 * h + r) * rb + 84 * i + 16 + 32 * c));
                }
                for k in 0..4 {
                    let mut v = [_mm256_setzero_si256(); 8];
                    for (v, &q) in v.iter_mut().zip(&q) {
                        let shifted = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k as i32));
                        *v = _mm256_and_si256(shifted, m2);
                    }
                    // Dword d: values 128c + 32k + 4d.., sub-block 8c + 2k + d / 4.
                    for (d, o) in transpose8(v).into_iter().enumerate() {
                        let s = 8 * c + 2 * k + d / 4;
                        store(dst.add(256 * s + 64 * (d % 4) + 32 * h), o);
                    }
                }
            }
        }
    }
}

/// The quants of block `i` of sixteen Q4_K rows into panel block `dst`:
/// each row's 32-byte chunk `j` as low nibbles (sub-block `2j`) and high
/// ones (`2j + 1`), transposed eight rows at a time.
#[inline(always)]
unsafe fn unpack_q4_k_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: as for `unpack_q8_0_i16_block`, with Q4_K rows and panel block.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        for h in 0..2 {
            for j in 0..4 {
                let (mut lo, mut hi) = ([_mm256_setzero_si256(); 8], [_mm256_setzero_si256(); 8]);
                for r in 0..8 {
                    let q = load256(rows.add((8 * h + r) * rb + 144 * i + 16 + 32 * j));
                    lo[r] = _mm256_and_si256(q, m4);
                    hi[r] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                }
                for (s, v) in [(2 * j, lo), (2 * j + 1, hi)] {
                    for (k, o) in transpose8(v).into_iter().enumerate() {
                        store(dst.add(512 * s + 64 * k + 32 * h), o);
                    }
                }
            }
        }
    }
}

/// The quants of block `i` of sixteen Q6_K rows as `q − 32` into panel
/// block `dst`, and the rows' `Σ_s scale_s · (−128 · Σ(q − 32))` from the
/// scales already there.
#[inline(always)]
unsafe fn unpack_q6_k_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: as for `unpack_q8_0_i16_block`, with Q6_K rows and panel block.
    unsafe {
        let (m4, m2, b32) = (
            _mm256_set1_epi8(0x0F),
            _mm256_set1_epi8(0x30),
            _mm256_set1_epi8(32),
        );
        let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
        for h in 0..2 {
            let mut offset = _mm256_setzero_si256();
            for hb in 0..2 {
                for g in 0..4 {
                    // Values 128hb + 32g..: low 4 bits from ql[64hb + 32(g % 2)..]
                    // (nibble g / 2), high 2 bits from qh[32hb..] (bits 2g..2g+2).
                    let v: [__m256i; 8] = std::array::from_fn(|r| {
                        let x = rows.add((8 * h + r) * rb + 210 * i);
                        let ql = load256(x.add(64 * hb + 32 * (g % 2)));
                        let qh = load256(x.add(128 + 32 * hb));
                        let low = match g / 2 {
                            0 => _mm256_and_si256(ql, m4),
                            _ => _mm256_and_si256(_mm256_srli_epi16::<4>(ql), m4),
                        };
                        let high = match g {
                            0 => _mm256_slli_epi16::<4>(qh),
                            1 => _mm256_slli_epi16::<2>(qh),
                            2 => qh,
                            _ => _mm256_srli_epi16::<2>(qh),
                        };
                        _mm256_sub_epi8(_mm256_or_si256(low, _mm256_and_si256(high, m2)), b32)
                    });
                    // Dword d: values 128hb + 32g + 4d.., sub-block 8hb + 2g + d / 4.
                    let o = transpose8(v);
                    for s2 in 0..2 {
                        let s = 8 * hb + 2 * g + s2;
                        let mut sum = _mm256_setzero_si256();
                        for k in 0..4 {
                            let q = o[4 * s2 + k];
                            store(dst.add(256 * s + 64 * k + 32 * h), q);
                            let pairs = _mm256_maddubs_epi16(ones8, q);
                            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones16));
                        }
                        let scale = load256(dst.add(4096 + 64 * s + 32 * h));
                        offset = _mm256_add_epi32(offset, _mm256_mullo_epi32(scale, sum));
                    }
                }
            }
            // × −128.
            store(
                dst.add(5120 + 32 * h),
                _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<7>(offset)),
            );
        }
    }
}

kernel_fns! { unpack avx2;
    Q8_0, 34, Q8_0_I16_BLOCK => unpack_q8_0_i16
        = |rows, rb, i, dst| unpack_q8_0_i16_block(rows, rb, i, dst), meta: |_, _, _, _| {};
    Q4_0, 18, LEGACY_BLOCK => unpack_q4_0
        = |rows, rb, i, dst| unpack_legacy_block(rows, rb, 18, i, q4_0_unsigned, dst),
        meta: |_, _, _, _| {};
    Q5_0, 22, LEGACY_BLOCK => unpack_q5_0
        = |rows, rb, i, dst| unpack_legacy_block(rows, rb, 22, i, q5_0_unsigned, dst),
        meta: |_, _, _, _| {};
    Q4_1, 20, OFFSET_BLOCK => unpack_q4_1
        = |rows, rb, i, dst| unpack_legacy_block(rows, rb, 20, i, q4_1_unsigned, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q4_1_meta);
    Q5_1, 24, OFFSET_BLOCK => unpack_q5_1
        = |rows, rb, i, dst| unpack_legacy_block(rows, rb, 24, i, q5_1_unsigned, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q5_1_meta);
    Q2_K, 84, Q2_K_BLOCK => unpack_q2_k = |rows, rb, i, dst| unpack_q2_k_block(rows, rb, i, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q2_k_meta);
    Q4_K, 144, Q4_K_BLOCK => unpack_q4_k = |rows, rb, i, dst| unpack_q4_k_block(rows, rb, i, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q4_k_meta);
    Q6_K, 210, Q6_K_BLOCK => unpack_q6_k = |rows, rb, i, dst| unpack_q6_k_block(rows, rb, i, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q6_k_meta);
}

/// Q3_K rows into Q6_K panels, through the Q6_K blocks of the same values.
pub(crate) fn unpack_q3_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    crate::q3_k::as_q6_k_rows(cols, rows, |q6| unpack_q6_k(cols, q6, out))
}
