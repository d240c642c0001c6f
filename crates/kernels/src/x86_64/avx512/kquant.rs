//! AVX-512 VNNI row and 1×4 dot products of Q4_K and Q6_K.

use super::*;

/// Q4_K against `N` Q8_K rows: 64 values (two sub-blocks of 32) per
/// `vpdpbusd`; nibbles are unsigned, unpacked once for all `N` rows. Each
/// block's exact integer sums go through [`k_block_step`], so each result is
/// the AVX2 kernels' bit for bit.
#[inline(always)]
unsafe fn q4_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (144 and 292 bytes), checked by the
    // wrappers; AVX-512 F/BW/VL + VNNI are enabled in the callers.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let mut acc = [0.0f32; N];
        let mut summ = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(144 * i);
            prefetch_block(x, 144);
            let ys = a.map(|p| p.add(292 * i));
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut sumi = [_mm512_setzero_si512(); N];
            for j in 0..4 {
                let q = load256(x.add(16 + 32 * j));
                let both = cat(q, q);
                // Low nibbles for the first 32 values, high nibbles for the next 32.
                let q = _mm512_and_si512(_mm512_mask_srli_epi16(both, 0xFFFF_0000, both, 4), m4);
                let sc = _mm512_mask_blend_epi32(
                    0xFF00,
                    _mm512_set1_epi32(scales[2 * j] as i32),
                    _mm512_set1_epi32(scales[2 * j + 1] as i32),
                );
                for c in 0..N {
                    let y8 = _mm512_loadu_si512(ys[c].add(4 + 64 * j).cast());
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y8);
                    sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(sc, p));
                }
            }
            let (dx, dminx) = (fp16_soft(x), fp16_soft(x.add(2)));
            for c in 0..N {
                let dy = f32_at(ys[c]);
                let bsums = &ys[c].add(260).cast::<[i16; 16]>().read_unaligned();
                let msum: i32 = (0..8)
                    .map(|j| mins[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32))
                    .sum();
                let s = hsum_i32(fold(sumi[c]));
                (acc[c], summ[c]) = k_block_step(dy * dx, s, acc[c], dy * dminx, msum, summ[c]);
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = acc[c] - summ[c];
        }
        out
    }
}

/// Q6_K against `N` Q8_K rows: unsigned 6-bit quants, 64 values per
/// `vpdpbusd`, unpacked once for all `N` rows; the `-32` offset comes from the
/// bsums once per block. The exact block sum, then the AVX2 kernels' float
/// step: their result bit for bit.
#[inline(always)]
unsafe fn q6_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (210 and 292 bytes), checked by the
    // wrappers; AVX-512 F/BW/VL + VNNI are enabled in the callers.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let m2 = _mm512_set1_epi8(0x30);
        let mut acc = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(210 * i);
            prefetch_block(x, 210);
            let ys = a.map(|p| p.add(292 * i));
            let sc = &*x.add(192).cast::<[i8; 16]>();
            let mut sumi = [_mm512_setzero_si512(); N];
            for half in 0..2 {
                let ql = _mm512_loadu_si512(x.add(64 * half).cast());
                let qh = load256(x.add(128 + 32 * half));
                // High bits moved to bit 4..5: values 0..63 take qh<<4 and qh<<2,
                // values 64..127 take qh and qh>>2.
                let qh_a = cat(_mm256_slli_epi16::<4>(qh), _mm256_slli_epi16::<2>(qh));
                let qh_b = cat(qh, _mm256_srli_epi16::<2>(qh));
                let lo = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(qh_a, m2));
                let hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                    _mm512_and_si512(qh_b, m2),
                );
                for (k, q) in [lo, hi].into_iter().enumerate() {
                    // Four lanes (16 values) per scale.
                    let s = 8 * half + 4 * k;
                    let scale = _mm512_set_epi32(
                        sc[s + 3] as i32,
                        sc[s + 3] as i32,
                        sc[s + 3] as i32,
                        sc[s + 3] as i32,
                        sc[s + 2] as i32,
                        sc[s + 2] as i32,
                        sc[s + 2] as i32,
                        sc[s + 2] as i32,
                        sc[s + 1] as i32,
                        sc[s + 1] as i32,
                        sc[s + 1] as i32,
                        sc[s + 1] as i32,
                        sc[s] as i32,
                        sc[s] as i32,
                        sc[s] as i32,
                        sc[s] as i32,
                    );
                    for c in 0..N {
                        let y8 = _mm512_loadu_si512(ys[c].add(4 + 128 * half + 64 * k).cast());
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y8);
                        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(scale, p));
                    }
                }
            }
            // -32 · Σ_s scale_s · bsum_s, spread over the lanes as the AVX2 kernel does.
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr().cast()));
            let dx = fp16_soft(x.add(208));
            for c in 0..N {
                let off = _mm256_madd_epi16(sc16, load256(ys[c].add(260)));
                let sumi = _mm256_sub_epi32(fold(sumi[c]), _mm256_slli_epi32::<5>(off));
                let dy = f32_at(ys[c]);
                acc[c] = (dy * dx).mul_add(hsum_i32(sumi) as f32, acc[c]);
            }
        }
        acc
    }
}

// The K-quant tiles are AVX2's (see the AVX512 table).
kernel_fns! { dot avx512;
    Q4_K, Q8_K => vec_dot_q4_k, vec_dot_x4_q4_k = |nb, w, a| q4_k::<N>(nb, w, a);
    Q6_K, Q8_K => vec_dot_q6_k, vec_dot_x4_q6_k = |nb, w, a| q6_k::<N>(nb, w, a);
}
