//! AVX2 quantizers of f32 activations: Q8_0, Q8_1, Q8_K rows and the legacy
//! panels' prepared Q8_0 form.

use super::*;

/// Rounds half away from zero like C's `roundf`: `trunc(x + copysign(0.5 - ulp/4, x))`
/// (the largest float below 0.5 makes `0.49999997` round down, `0.5` up).
#[inline(always)]
unsafe fn round_away(x: __m256) -> __m256 {
    // SAFETY: AVX is enabled in every caller.
    unsafe {
        let sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0));
        let half = _mm256_or_ps(sign, _mm256_set1_ps(f32::from_bits(0x3eff_ffff)));
        _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(_mm256_add_ps(x, half))
    }
}

#[inline(always)]
unsafe fn abs_ps(x: __m256) -> __m256 {
    // SAFETY: AVX is enabled in every caller.
    unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), x) }
}

#[inline(always)]
pub(super) unsafe fn hmax_ps(v: __m256) -> f32 {
    // SAFETY: AVX is enabled in every caller.
    unsafe {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        _mm_cvtss_f32(m)
    }
}

/// Four vectors of i32 (each in i8 range) → 32 bytes in order.
#[inline(always)]
unsafe fn pack_i8(v: [__m256i; 4]) -> __m256i {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        let a = _mm256_packs_epi32(v[0], v[1]);
        let b = _mm256_packs_epi32(v[2], v[3]);
        let p = _mm256_packs_epi16(a, b);
        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }
}

/// One 32-value Q8_0/Q8_1 block: returns (d, Σq) and writes the quants to `qs`.
#[inline(always)]
unsafe fn q8_block(x: *const f32, qs: *mut u8) -> (f32, i32) {
    // SAFETY: `x` has 32 readable floats, `qs` 32 writable bytes; AVX2 is enabled.
    unsafe {
        // Plain arrays, not `map` closures: closures do not inherit `target_feature`,
        // and the intrinsics inside them would be called out of line.
        let v = [
            _mm256_loadu_ps(x),
            _mm256_loadu_ps(x.add(8)),
            _mm256_loadu_ps(x.add(16)),
            _mm256_loadu_ps(x.add(24)),
        ];
        let m = _mm256_max_ps(
            _mm256_max_ps(abs_ps(v[0]), abs_ps(v[1])),
            _mm256_max_ps(abs_ps(v[2]), abs_ps(v[3])),
        );
        let d = hmax_ps(m) / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let q = [
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[0], id))),
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[1], id))),
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[2], id))),
            _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[3], id))),
        ];
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        _mm256_storeu_si256(qs.cast(), pack_i8(q));
        (d, hsum_i32(sum))
    }
}

#[inline(always)]
unsafe fn quantize_q8_0_blocks(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(34 * i);
            let (d, _) = q8_block(x.add(32 * i), b.add(2));
            b.cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(d).to_le_bytes());
        }
    }
}

#[inline(always)]
unsafe fn quantize_q8_1_blocks(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(36 * i);
            let (d, sum) = q8_block(x.add(32 * i), b.add(4));
            b.cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(d).to_le_bytes());
            b.add(2)
                .cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(sum as f32 * d).to_le_bytes());
        }
    }
}

#[inline(always)]
unsafe fn quantize_q8_k_blocks(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input (256 floats) and output (292 bytes), checked by the wrapper.
        unsafe {
            let x = x.add(256 * i);
            let b = y.add(292 * i);
            let mut m = _mm256_setzero_ps();
            for k in 0..32 {
                m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x.add(8 * k))));
            }
            let amax = hmax_ps(m);
            if amax == 0.0 {
                core::ptr::write_bytes(b, 0, 292);
                continue;
            }
            // The first value of largest magnitude sets the sign, as in the reference.
            let am = _mm256_set1_ps(amax);
            let mut first = 0;
            for k in 0..32 {
                let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(abs_ps(_mm256_loadu_ps(x.add(8 * k))), am);
                let mask = _mm256_movemask_ps(eq);
                if mask != 0 {
                    first = 8 * k + mask.trailing_zeros() as usize;
                    break;
                }
            }
            let iscale = -127.0 / *x.add(first);
            let vs = _mm256_set1_ps(iscale);
            let magic = _mm256_set1_ps(12_582_912.0);
            let (low, bias, top) = (
                _mm256_set1_epi32(0x007f_ffff),
                _mm256_set1_epi32(0x0040_0000),
                _mm256_set1_epi32(127),
            );
            let mut bsums = [0i16; 16];
            for g in 0..8 {
                let mut q = [_mm256_setzero_si256(); 4];
                for (j, q) in q.iter_mut().enumerate() {
                    let v = _mm256_add_ps(
                        _mm256_mul_ps(vs, _mm256_loadu_ps(x.add(32 * g + 8 * j))),
                        magic,
                    );
                    let n = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(v), low), bias);
                    *q = _mm256_min_epi32(n, top);
                }
                bsums[2 * g] = hsum_i32(_mm256_add_epi32(q[0], q[1])) as i16;
                bsums[2 * g + 1] = hsum_i32(_mm256_add_epi32(q[2], q[3])) as i16;
                _mm256_storeu_si256(b.add(4 + 32 * g).cast(), pack_i8(q));
            }
            b.cast::<f32>().write_unaligned(1.0 / iscale);
            b.add(260).cast::<[i16; 16]>().write_unaligned(bsums);
        }
    }
}

kernel_fns! { quantize avx2;
    Q8_0 => quantize_q8_0 = |nb, x, y| quantize_q8_0_blocks(nb, x, y);
    Q8_1 => quantize_q8_1 = |nb, x, y| quantize_q8_1_blocks(nb, x, y);
    Q8_K => quantize_q8_k = |nb, x, y| quantize_q8_k_blocks(nb, x, y);
}

/// Quantizes `nb` blocks of 32 floats to Q8_0 and writes each in the legacy
/// panels' prepared form (see [`crate::panel`]): the 32 quants, the f16
/// scale as f32, and `−Σq · 2^SHIFT`.
#[inline(always)]
unsafe fn quantize_prepared_body<const SHIFT: u32>(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(crate::panel::LEGACY_ACT * i);
            let (d, sum) = q8_block(x.add(32 * i), b);
            let d = f16::from_f32(d).to_f32();
            b.add(32).cast::<[u8; 4]>().write_unaligned(d.to_le_bytes());
            // |Σq| ≤ 32·127 < 2^12: the offset fits an i32 for any shift ≤ 18.
            b.add(36)
                .cast::<[u8; 4]>()
                .write_unaligned((-(sum << SHIFT)).to_le_bytes());
        }
    }
}

target_fns! { avx2:
    unsafe fn k_quantize_prepared<const SHIFT: u32>(nb: usize, x: *const f32, y: *mut u8) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { quantize_prepared_body::<SHIFT>(nb, x, y) }
    }
}

fn quantize_prepared<const SHIFT: u32>(x: &[f32], out: &mut [u8]) {
    let nb = x.len() / 32;
    assert!(
        x.len().is_multiple_of(32) && out.len() == nb * crate::panel::LEGACY_ACT,
        "{} values into {} prepared bytes",
        x.len(),
        out.len()
    );
    // SAFETY: `nb` blocks of input and output (checked above); reachable only
    // through the AVX2 and AVX-512 tables, handed out after AVX2/FMA/F16C were
    // detected.
    unsafe { k_quantize_prepared::<SHIFT>(nb, x.as_ptr(), out.as_mut_ptr()) }
}

/// [`crate::panel::QuantizePreparedFn`] of the Q4_0, Q5_0 and Q8_0 panels
/// (their weights' unsigned offsets: 2^3, 2^4, 2^7).
pub(crate) fn quantize_prepared_q4_0(x: &[f32], out: &mut [u8]) {
    quantize_prepared::<3>(x, out)
}
pub(crate) fn quantize_prepared_q5_0(x: &[f32], out: &mut [u8]) {
    quantize_prepared::<4>(x, out)
}
pub(crate) fn quantize_prepared_q8_0(x: &[f32], out: &mut [u8]) {
    quantize_prepared::<7>(x, out)
}
