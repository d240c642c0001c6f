//! AVX2 row and 1×4 dot products of the K-quant types (Q8_K activations).

use super::*;

/// Σ_j mins[j] · (bsums[2j] + bsums[2j+1]) for one Q8_K block at `y`.
#[inline(always)]
unsafe fn k4_min_sum(mins: [u8; 8], y: *const u8) -> i32 {
    // SAFETY: a Q8_K block has 16 i16 bsums at offset 260; AVX2 is enabled in the callers.
    unsafe {
        let bsums = _mm256_loadu_si256(y.add(260).cast());
        let pairs = _mm_hadd_epi16(
            _mm256_castsi256_si128(bsums),
            _mm256_extracti128_si256::<1>(bsums),
        );
        let m = _mm_cvtepu8_epi16(_mm_loadl_epi64(mins.as_ptr().cast()));
        let p = _mm_madd_epi16(m, pairs);
        let p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
        let p = _mm_add_epi32(p, _mm_shuffle_epi32::<0b01>(p));
        _mm_cvtsi128_si32(p)
    }
}

/// Q4_K (`HIGH = false`) and Q5_K (`HIGH = true`) against `N` Q8_K rows.
#[inline(always)]
unsafe fn q45_k<const N: usize, const HIGH: bool>(
    nb: usize,
    w: *const u8,
    a: [*const u8; N],
) -> [f32; N] {
    let bsize = if HIGH { 176 } else { 144 };
    let qs_off = if HIGH { 48 } else { 16 };
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); AVX2/FMA/F16C are enabled.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let m1 = _mm256_set1_epi8(1);
        let mut acc = [0.0f32; N];
        let mut accm = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * bsize);
            prefetch_block(x, bsize);
            let ys = a.map(|p| p.add(i * 292));
            let (dx, dminx) = (fp16(x), fp16(x.add(2)));
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut hbits = if HIGH {
                load256(x.add(16))
            } else {
                _mm256_setzero_si256()
            };
            let mut sumi = [_mm256_setzero_si256(); N];
            for j in 0..4 {
                let q = load256(x.add(qs_off + 32 * j));
                let mut lo = _mm256_and_si256(q, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                if HIGH {
                    let h0 = _mm256_and_si256(hbits, m1);
                    let h1 = _mm256_and_si256(_mm256_srli_epi16::<1>(hbits), m1);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(h0));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(h1));
                    hbits = _mm256_srli_epi16::<2>(hbits);
                }
                let sl = _mm256_set1_epi16(scales[2 * j] as i16);
                let sh = _mm256_set1_epi16(scales[2 * j + 1] as i16);
                for c in 0..N {
                    let q8 = ys[c].add(4 + 64 * j);
                    let pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, load256(q8)));
                    let ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, load256(q8.add(32))));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(pl, ph));
                }
            }
            for c in 0..N {
                let dy = f32_at(ys[c]);
                let m = k4_min_sum(mins, ys[c]);
                (acc[c], accm[c]) =
                    k_block_step(dy * dx, hsum_i32(sumi[c]), acc[c], dy * dminx, m, accm[c]);
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = acc[c] - accm[c];
        }
        out
    }
}

/// A block's sixteen sub-block scales as i16 (`scales`), arranged for
/// [`scale_pair`]: the first eight in both 128-bit lanes, then the last eight.
#[inline(always)]
unsafe fn scale_halves(scales: __m256i) -> [__m256i; 2] {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        [
            _mm256_permute2x128_si256::<0x00>(scales, scales),
            _mm256_permute2x128_si256::<0x11>(scales, scales),
        ]
    }
}

/// Scale `s` in every i16 of the low lane and scale `s + 1` in the high one
/// (`s` even), one byte shuffle from [`scale_halves`].
#[inline(always)]
unsafe fn scale_pair(halves: &[__m256i; 2], s: usize) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        let lo = 2 * (s % 8) as i8;
        let (a, b) = (lo, lo + 2);
        let mask = _mm256_setr_epi8(
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            a,
            a + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
            b,
            b + 1,
        );
        _mm256_shuffle_epi8(halves[s / 8], mask)
    }
}

/// Adds each row's `Σ scale · q·a` over the 32 quants `q`, with `scale` the
/// i16 scales of their two sixteen-value halves ([`scale_pair`]), against
/// the activation quants at offset `at` of each Q8_K block in `ys`, into
/// `sumi` (the sub-block step every K-quant with sixteen-value scales shares).
#[inline(always)]
unsafe fn add_scaled<const N: usize>(
    q: __m256i,
    scale: __m256i,
    ys: [*const u8; N],
    at: usize,
    sumi: &mut [__m256i; N],
) {
    // SAFETY: each Q8_K block in `ys` has 32 quants at `at`; AVX2 is enabled in
    // every kernel calling this.
    unsafe {
        for c in 0..N {
            let q8 = load256(ys[c].add(at));
            let p = _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q, q8));
            sumi[c] = _mm256_add_epi32(sumi[c], p);
        }
    }
}

/// Each row's sums started at `−2^SHIFT · Σ_s scale_s · bsum_s`: the offset
/// taken back from quants used unsigned (`q + 2^SHIFT`), one per block
/// through the Q8_K blocks' sixteen bsums.
#[inline(always)]
unsafe fn offset_sums<const N: usize, const SHIFT: i32>(
    scales: __m256i,
    ys: [*const u8; N],
) -> [__m256i; N] {
    // SAFETY: a Q8_K block has 16 i16 bsums at offset 260; AVX2 is enabled in
    // every kernel calling this.
    unsafe {
        ys.map(|y| {
            let off = _mm256_madd_epi16(scales, _mm256_loadu_si256(y.add(260).cast()));
            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<SHIFT>(off))
        })
    }
}

/// The block's float step per row, `acc = fma(d_w·d_a, Σ, acc)` with Σ the
/// row's exact sum (`sumi`) and `d_a` the Q8_K block's scale.
#[inline(always)]
unsafe fn float_steps<const N: usize>(
    acc: &mut [f32; N],
    dx: f32,
    ys: [*const u8; N],
    sumi: [__m256i; N],
) {
    // SAFETY: each Q8_K block in `ys` starts with its f32 scale; AVX2 is
    // enabled in every kernel calling this.
    unsafe {
        for c in 0..N {
            let dy = f32_at(ys[c]);
            acc[c] = (dy * dx).mul_add(hsum_i32(sumi[c]) as f32, acc[c]);
        }
    }
}

/// Quants `32k..32k+32` of a 128-value half whose two-bit quants lie in
/// `qs` as Q2_K and Q3_K keep them: bits `2k..2k+2` of each byte.
#[inline(always)]
unsafe fn two_bits(qs: __m256i, k: usize) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        // Shifts of whole 16-bit lanes: the mask keeps each byte's own bits.
        let shifted = _mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * k as i32));
        _mm256_and_si256(shifted, _mm256_set1_epi8(3))
    }
}

/// The 128 unsigned 6-bit quants (0..63) of half `half` of the Q6_K block at
/// `x`, as four vectors of 32 consecutive values.
#[inline(always)]
pub(super) unsafe fn q6_k_quants(x: *const u8, half: usize) -> [__m256i; 4] {
    // SAFETY: a Q6_K block has ql at 0 (128 bytes) and qh at 128 (64 bytes);
    // AVX2 is enabled in every kernel calling this.
    unsafe {
        let (m4, m2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
        let ql = x.add(64 * half);
        let qh = load256(x.add(128 + 32 * half));
        let (b1, b2) = (load256(ql), load256(ql.add(32)));
        // Two high bits moved to bits 4..5 (a helper, not a closure: closures
        // do not inherit `target_feature`).
        #[inline(always)]
        unsafe fn high(bits: __m256i, m2: __m256i) -> __m256i {
            // SAFETY: AVX2 is enabled in every kernel calling this.
            unsafe { _mm256_slli_epi16::<4>(_mm256_and_si256(bits, m2)) }
        }
        [
            _mm256_or_si256(_mm256_and_si256(b1, m4), high(qh, m2)),
            _mm256_or_si256(
                _mm256_and_si256(b2, m4),
                high(_mm256_srli_epi16::<2>(qh), m2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                high(_mm256_srli_epi16::<4>(qh), m2),
            ),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                high(_mm256_srli_epi16::<6>(qh), m2),
            ),
        ]
    }
}

/// Q6_K against `N` Q8_K rows. The quants are used unsigned (0..63); the
/// `-32` offset is applied once per block through the activation's bsums.
/// Per block, the exact integer sum, then `acc = fma(d_w·d_a, Σ, acc)`.
#[inline(always)]
unsafe fn q6_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * 210);
            prefetch_block(x, 210);
            let ys = a.map(|p| p.add(i * 292));
            let dx = fp16(x.add(208));
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.add(192).cast()));
            let halves = scale_halves(sc16);
            let mut sumi = offset_sums::<N, 5>(sc16, ys);
            for half in 0..2 {
                let q = q6_k_quants(x, half);
                for (k, &qk) in q.iter().enumerate() {
                    let scale = scale_pair(&halves, 8 * half + 2 * k);
                    add_scaled(qk, scale, ys, 4 + 128 * half + 32 * k, &mut sumi);
                }
            }
            float_steps(&mut acc, dx, ys, sumi);
        }
        acc
    }
}

/// The sixteen signed scales of the Q3_K block whose scale bytes are at
/// `p`: four low bits from the first eight bytes, two high bits from the
/// last four, less 32 (as `crate::q3_k::scales`, in 32-bit lanes).
#[inline(always)]
unsafe fn q3_k_scales(p: *const u8) -> __m128i {
    // SAFETY: the caller passes the block's twelve scale bytes; SSE2 is
    // enabled in every caller.
    unsafe {
        let word = |i: usize| p.add(4 * i).cast::<u32>().read_unaligned();
        let (a0, a1, t) = (word(0), word(1), word(2));
        let (lo, hi) = (0x0f0f_0f0fu32, 0x0303_0303u32);
        let s = [
            (a0 & lo) | ((t & hi) << 4),
            (a1 & lo) | (((t >> 2) & hi) << 4),
            ((a0 >> 4) & lo) | (((t >> 4) & hi) << 4),
            ((a1 >> 4) & lo) | (((t >> 6) & hi) << 4),
        ];
        let v = _mm_loadu_si128(s.as_ptr().cast());
        _mm_sub_epi8(v, _mm_set1_epi8(32))
    }
}

/// Q3_K against `N` Q8_K rows, with the Q6_K kernel's arithmetic: each
/// quant is used as `q + 4` (0..7, from its two low bits and its hmask bit),
/// the `-4` offset applied once per block through the activation's bsums,
/// then `acc = fma(d_w·d_a, Σ, acc)` per block. Σ is the integer the Q6_K
/// kernels form for the same block rewritten as Q6_K (`crate::q3_k`), so
/// batches on the Q6_K panels keep this kernel's bits.
#[inline(always)]
unsafe fn q3_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); AVX2/FMA/F16C are enabled.
    unsafe {
        let m1 = _mm256_set1_epi8(1);
        let mut acc = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * 110);
            prefetch_block(x, 110);
            let ys = a.map(|p| p.add(i * 292));
            let dx = fp16(x.add(108));
            let sc128 = q3_k_scales(x.add(96));
            let sc16 = _mm256_cvtepi8_epi16(sc128);
            let halves = scale_halves(sc16);
            let mut sumi = offset_sums::<N, 2>(sc16, ys);
            let hmask = load256(x);
            for half in 0..2 {
                let qs = load256(x.add(32 + 32 * half));
                for k in 0..4 {
                    // This chunk's hmask bit (a 16-bit lane shift: the mask keeps
                    // each byte's own bit).
                    let hshift = _mm_cvtsi32_si128((4 * half + k) as i32);
                    let high = _mm256_and_si256(_mm256_srl_epi16(hmask, hshift), m1);
                    let q = _mm256_or_si256(two_bits(qs, k), _mm256_slli_epi16::<2>(high));
                    let scale = scale_pair(&halves, 8 * half + 2 * k);
                    add_scaled(q, scale, ys, 4 + 128 * half + 32 * k, &mut sumi);
                }
            }
            float_steps(&mut acc, dx, ys, sumi);
        }
        acc
    }
}

/// Q2_K against `N` Q8_K rows: per sixteen values a 4-bit scale and a
/// 4-bit min; the quants (0..3) are two bits of `qs` laid out as Q3_K's low
/// bits. Per block the exact scaled sum and the exact sum of mins against
/// the activation's bsums, each in its own chain (as Q4_K's), then
/// `acc − accm`.
#[inline(always)]
unsafe fn q2_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); AVX2/FMA/F16C are enabled.
    unsafe {
        let m4 = _mm_set1_epi8(0x0F);
        let mut acc = [0.0f32; N];
        let mut accm = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * 84);
            prefetch_block(x, 84);
            let ys = a.map(|p| p.add(i * 292));
            let (dx, dminx) = (fp16(x.add(80)), fp16(x.add(82)));
            let packed = _mm_loadu_si128(x.cast());
            let halves = scale_halves(_mm256_cvtepu8_epi16(_mm_and_si128(packed, m4)));
            let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
            let mut sumi = [_mm256_setzero_si256(); N];
            for half in 0..2 {
                let qs = load256(x.add(16 + 32 * half));
                for k in 0..4 {
                    let scale = scale_pair(&halves, 8 * half + 2 * k);
                    add_scaled(
                        two_bits(qs, k),
                        scale,
                        ys,
                        4 + 128 * half + 32 * k,
                        &mut sumi,
                    );
                }
            }
            for c in 0..N {
                let dy = f32_at(ys[c]);
                let m = hsum_i32(_mm256_madd_epi16(
                    mins,
                    _mm256_loadu_si256(ys[c].add(260).cast()),
                ));
                (acc[c], accm[c]) =
                    k_block_step(dy * dx, hsum_i32(sumi[c]), acc[c], dy * dminx, m, accm[c]);
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = acc[c] - accm[c];
        }
        out
    }
}

kernel_fns! { dot avx2;
    Q2_K, Q8_K => vec_dot_q2_k, vec_dot_x4_q2_k = |nb, w, a| q2_k::<N>(nb, w, a);
    Q3_K, Q8_K => vec_dot_q3_k, vec_dot_x4_q3_k = |nb, w, a| q3_k::<N>(nb, w, a);
    Q4_K, Q8_K => vec_dot_q4_k, vec_dot_x4_q4_k = |nb, w, a| q45_k::<N, false>(nb, w, a);
    Q5_K, Q8_K => vec_dot_q5_k, vec_dot_x4_q5_k = |nb, w, a| q45_k::<N, true>(nb, w, a);
    Q6_K, Q8_K => vec_dot_q6_k, vec_dot_x4_q6_k = |nb, w, a| q6_k::<N>(nb, w, a);
}
