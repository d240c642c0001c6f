//! AVX-512 unpackers of ggml weight rows into the panels of [`crate::panel`].

use super::*;

/// Sixteen vectors of sixteen dwords (rows) → sixteen vectors of the rows'
/// dword `d` each: 4×4 transposes inside each 128-bit lane, then a 4×4
/// transpose of the lanes.
#[inline(always)]
unsafe fn transpose16(v: [__m512i; 16]) -> [__m512i; 16] {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe {
        // x[g][c], lane L: dword 4L + c of rows 4g..4g+4.
        let mut x = [[_mm512_setzero_si512(); 4]; 4];
        for (g, x) in x.iter_mut().enumerate() {
            let (a, b, c, d) = (v[4 * g], v[4 * g + 1], v[4 * g + 2], v[4 * g + 3]);
            let (ab_lo, ab_hi) = (_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
            let (cd_lo, cd_hi) = (_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
            x[0] = _mm512_unpacklo_epi64(ab_lo, cd_lo);
            x[1] = _mm512_unpackhi_epi64(ab_lo, cd_lo);
            x[2] = _mm512_unpacklo_epi64(ab_hi, cd_hi);
            x[3] = _mm512_unpackhi_epi64(ab_hi, cd_hi);
        }
        let mut o = [_mm512_setzero_si512(); 16];
        for c in 0..4 {
            let y0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(x[0][c], x[1][c]);
            let y1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(x[0][c], x[1][c]);
            let y2 = _mm512_shuffle_i32x4::<0b01_00_01_00>(x[2][c], x[3][c]);
            let y3 = _mm512_shuffle_i32x4::<0b11_10_11_10>(x[2][c], x[3][c]);
            o[c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(y0, y2);
            o[4 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(y0, y2);
            o[8 + c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(y1, y3);
            o[12 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(y1, y3);
        }
        o
    }
}

#[inline(always)]
pub(super) unsafe fn store512(p: *mut u8, v: __m512i) {
    // SAFETY: the caller passes 64 writable bytes; unaligned store.
    unsafe { _mm512_storeu_si512(p.cast(), v) }
}

/// The quants of block `i` of sixteen Q4_K rows (`rb` bytes apart from
/// `rows`) into panel block `dst`: each row's 128 bytes as two vectors of
/// low and high nibbles, transposed sixteen rows at a time.
#[inline(always)]
unsafe fn unpack_q4_k_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: sixteen rows of at least `i + 1` blocks and a whole panel
    // block at `dst` (the wrapper's checks); AVX-512 F/BW is enabled in the callers.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        for half in 0..2 {
            let (mut lo, mut hi) = ([_mm512_setzero_si512(); 16], [_mm512_setzero_si512(); 16]);
            for r in 0..16 {
                let q = load512(rows.add(r * rb + i * 144 + 16 + 64 * half));
                lo[r] = _mm512_and_si512(q, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
            }
            let (lo, hi) = (transpose16(lo), transpose16(hi));
            // Dword d of the vector: bytes 32j.. of the half's chunk j = d / 8,
            // low nibbles sub-block 2(2·half + j), high ones the next.
            for d in 0..16 {
                let (s, k) = (4 * half + 2 * (d / 8), d % 8);
                store512(dst.add(512 * s + 64 * k), lo[d]);
                store512(dst.add(512 * (s + 1) + 64 * k), hi[d]);
            }
        }
    }
}

/// `v` with each 16-bit lane shifted right by `2k` bits (`k` < 4).
#[inline(always)]
unsafe fn shift_pairs(v: __m512i, k: usize) -> __m512i {
    // SAFETY: AVX-512BW is enabled in every caller.
    unsafe {
        match k {
            0 => v,
            1 => _mm512_srli_epi16::<2>(v),
            2 => _mm512_srli_epi16::<4>(v),
            _ => _mm512_srli_epi16::<6>(v),
        }
    }
}

/// The quants of block `i` of sixteen Q2_K rows into panel block `dst`:
/// each row's 64 quant bytes as four vectors of two-bit fields (field `k`
/// of byte `32h + l` is value `128h + 32k + l`), each transposed sixteen
/// rows at a time.
#[inline(always)]
unsafe fn unpack_q2_k_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: sixteen rows of at least `i + 1` blocks and a whole panel
    // block at `dst` (the wrapper's checks); AVX-512 F/BW is enabled in the callers.
    unsafe {
        let m2 = _mm512_set1_epi8(3);
        let mut q = [_mm512_setzero_si512(); 16];
        for (r, q) in q.iter_mut().enumerate() {
            *q = load512(rows.add(r * rb + i * 84 + 16));
        }
        for k in 0..4 {
            let mut v = [_mm512_setzero_si512(); 16];
            for (v, &q) in v.iter_mut().zip(&q) {
                *v = _mm512_and_si512(shift_pairs(q, k), m2);
            }
            // Dword d: values 128(d / 8) + 32k + 4(d % 8).., sub-block
            // 8(d / 8) + 2k + (d % 8) / 4, its dword d % 4.
            for (d, o) in transpose16(v).into_iter().enumerate() {
                let s = 8 * (d / 8) + 2 * k + d % 8 / 4;
                store512(dst.add(256 * s + 64 * (d % 4)), o);
            }
        }
    }
}

/// The quants of block `i` of sixteen Q6_K rows as `q − 32` into panel
/// block `dst`, and the rows' `Σ_s scale_s · (−128 · Σ(q − 32))` from the
/// scales already there (decoded as the AVX-512 row kernel does, then
/// transposed sixteen rows at a time).
#[inline(always)]
unsafe fn unpack_q6_k_block(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: as for `unpack_q4_k_block`, with Q6_K rows and panel block.
    unsafe {
        let (m4, m2, b32) = (
            _mm512_set1_epi8(0x0F),
            _mm512_set1_epi8(0x30),
            _mm512_set1_epi8(32),
        );
        let ones = _mm512_set1_epi8(1);
        let mut offset = _mm512_setzero_si512();
        for h in 0..2 {
            let (mut lo, mut hi) = ([_mm512_setzero_si512(); 16], [_mm512_setzero_si512(); 16]);
            for r in 0..16 {
                let x = rows.add(r * rb + i * 210);
                let ql = load512(x.add(64 * h));
                let qh = load256(x.add(128 + 32 * h));
                let qh_a = cat(_mm256_slli_epi16::<4>(qh), _mm256_slli_epi16::<2>(qh));
                let qh_b = cat(qh, _mm256_srli_epi16::<2>(qh));
                let l = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(qh_a, m2));
                let u = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                    _mm512_and_si512(qh_b, m2),
                );
                lo[r] = _mm512_sub_epi8(l, b32);
                hi[r] = _mm512_sub_epi8(u, b32);
            }
            // Vector x of half h: values 128h + 64x + 4d.. in dword d, i.e.
            // sub-block 8h + 4x + d / 4, dword d % 4.
            for (x, v) in [transpose16(lo), transpose16(hi)].into_iter().enumerate() {
                for s4 in 0..4 {
                    let s = 8 * h + 4 * x + s4;
                    let mut sum = _mm512_setzero_si512();
                    for k in 0..4 {
                        store512(dst.add(256 * s + 64 * k), v[4 * s4 + k]);
                        sum = _mm512_dpbusd_epi32(sum, ones, v[4 * s4 + k]);
                    }
                    let scale = load512(dst.add(4096 + 64 * s));
                    offset = _mm512_add_epi32(offset, _mm512_mullo_epi32(scale, sum));
                }
            }
        }
        // × −128.
        store512(
            dst.add(5120),
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(offset)),
        );
    }
}

kernel_fns! { unpack avx512;
    Q2_K, 84, Q2_K_BLOCK => unpack_q2_k = |rows, rb, i, dst| unpack_q2_k_block(rows, rb, i, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q2_k_meta);
    Q4_K, 144, Q4_K_BLOCK => unpack_q4_k = |rows, rb, i, dst| unpack_q4_k_block(rows, rb, i, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q4_k_meta);
    Q6_K, 210, Q6_K_BLOCK => unpack_q6_k = |rows, rb, i, dst| unpack_q6_k_block(rows, rb, i, dst),
        meta: |rows, rb, i, dst| rows_meta(rows, rb, i, dst, crate::panel::q6_k_meta);
}

/// The quants of sixteen legacy rows (`rb` bytes apart, `nb` blocks of
/// `wsize` bytes each) into their panel (`out`), two blocks per vector:
/// each row's pair of blocks decoded unsigned by `quants` (the panel's
/// `w + 2^shift`), then transposed sixteen rows at a time.
#[inline(always)]
unsafe fn unpack_legacy_quants<const BLOCK: usize>(
    rows: *const u8,
    rb: usize,
    wsize: usize,
    nb: usize,
    quants: unsafe fn(*const u8) -> __m256i,
    out: *mut u8,
) {
    // SAFETY: sixteen rows of `nb` blocks and `nb` panel blocks (the
    // wrapper's checks); AVX-512 F/BW/VL and AVX2 are enabled in the callers.
    unsafe {
        let mut i = 0;
        while i < nb {
            let pair = i + 1 < nb;
            let mut v = [_mm512_setzero_si512(); 16];
            for (r, v) in v.iter_mut().enumerate() {
                let x = rows.add(r * rb + i * wsize);
                let next = if pair {
                    quants(x.add(wsize))
                } else {
                    _mm256_setzero_si256()
                };
                *v = cat(quants(x), next);
            }
            let o = transpose16(v);
            for d in 0..8 {
                store512(out.add(i * BLOCK + 64 * d), o[d]);
                if pair {
                    store512(out.add((i + 1) * BLOCK + 64 * d), o[8 + d]);
                }
            }
            i += 2;
        }
    }
}

kernel_fns! { unpack_legacy avx512;
    Q8_0, 34, LEGACY_BLOCK => unpack_q8_0
        = |rows, rb, nb, out| unpack_legacy_quants::<LEGACY_BLOCK>(rows, rb, 34, nb, q8_0_unsigned, out),
        meta: crate::panel::legacy_meta;
    Q4_0, 18, LEGACY_BLOCK => unpack_q4_0
        = |rows, rb, nb, out| unpack_legacy_quants::<LEGACY_BLOCK>(rows, rb, 18, nb, q4_0_unsigned, out),
        meta: crate::panel::legacy_meta;
    Q5_0, 22, LEGACY_BLOCK => unpack_q5_0
        = |rows, rb, nb, out| unpack_legacy_quants::<LEGACY_BLOCK>(rows, rb, 22, nb, q5_0_unsigned, out),
        meta: crate::panel::legacy_meta;
    Q4_1, 20, OFFSET_BLOCK => unpack_q4_1
        = |rows, rb, nb, out| unpack_legacy_quants::<OFFSET_BLOCK>(rows, rb, 20, nb, q4_1_unsigned, out),
        meta: crate::panel::offset_meta;
    Q5_1, 24, OFFSET_BLOCK => unpack_q5_1
        = |rows, rb, nb, out| unpack_legacy_quants::<OFFSET_BLOCK>(rows, rb, 24, nb, q5_1_unsigned, out),
        meta: crate::panel::offset_meta;
}

/// Q3_K rows into Q6_K panels, through the Q6_K blocks of the same values.
pub(crate) fn unpack_q3_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    crate::q3_k::as_q6_k_rows(cols, rows, |q6| unpack_q6_k(cols, q6, out))
}
