//! AVX-512 gated activations (GELU, SiLU) with the scalar code's bits.

use super::*;

/// [`crate::ops::exp_fast`] in 16 lanes, with AVX2's `exp_ps` bits per
/// lane (NaN included: clamped to −87 as `max_ps` does). Float compares,
/// `min`/`max` and conversions are done on the bits with integer ops, which
/// Miri implements: a float's bits order like its value among the
/// positives as signed integers, among the negatives reversed as unsigned.
#[inline(always)]
unsafe fn exp_ps16(x: __m512) -> __m512 {
    // SAFETY: AVX-512 F is enabled in every kernel calling this.
    unsafe {
        let bits = _mm512_castps_si512(x);
        let abs = _mm512_and_si512(bits, _mm512_set1_epi32(i32::MAX));
        let nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F80_0000));
        let lowest = (-87.0f32).to_bits() as i32;
        let below = _mm512_cmpgt_epu32_mask(bits, _mm512_set1_epi32(lowest)) & !nan;
        let above =
            _mm512_cmpgt_epi32_mask(bits, _mm512_set1_epi32(88.0f32.to_bits() as i32)) & !nan;
        let x = _mm512_mask_mov_ps(x, below | nan, _mm512_set1_ps(-87.0));
        let x = _mm512_mask_mov_ps(x, above, _mm512_set1_ps(88.0));
        let magic = _mm512_set1_ps(12_582_912.0);
        let shifted = _mm512_add_ps(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
            magic,
        );
        let n = _mm512_sub_ps(shifted, magic);
        let r = _mm512_sub_ps(
            _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693_359_4))),
            _mm512_mul_ps(n, _mm512_set1_ps(-2.121_944_4e-4)),
        );
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c));
        }
        let e = _mm512_add_ps(
            _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
            _mm512_set1_ps(1.0),
        );
        // `n` as an integer: `shifted` is 1.5·2^23 + n, whose bits step by one
        // per unit within its binade (|n| ≤ 127 after the clamp).
        let n = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(magic));
        let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(n, _mm512_set1_epi32(127)));
        _mm512_maskz_mov_ps(!below, _mm512_mul_ps(e, _mm512_castsi512_ps(pow2)))
    }
}

/// [`crate::ops::gelu_mul`] in 16 lanes: AVX2's `k_gelu_mul` operation for
/// operation, so the same bits, in half the instructions (see [`k_silu_mul`]).
#[inline(always)]
unsafe fn gelu_mul_body(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX-512 F is enabled.
    unsafe {
        let (c, a) = (_mm512_set1_ps(0.797_884_6), _mm512_set1_ps(0.044_715));
        let (one, m2) = (_mm512_set1_ps(1.0), _mm512_set1_ps(-2.0));
        for i in (0..n / 16).map(|i| 16 * i) {
            let u = _mm512_loadu_ps(gate.add(i));
            let z = _mm512_mul_ps(
                _mm512_mul_ps(c, u),
                _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(a, u), u)),
            );
            let g = _mm512_div_ps(u, _mm512_add_ps(one, exp_ps16(_mm512_mul_ps(m2, z))));
            _mm512_storeu_ps(gate.add(i), _mm512_mul_ps(g, _mm512_loadu_ps(up.add(i))));
        }
    }
}

target_fns! { avx512:
    unsafe fn k_gelu_mul(n: usize, gate: *mut f32, up: *const f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { gelu_mul_body(n, gate, up) }
    }
}

/// [`crate::ops::silu_mul`] in 16 lanes, the same bits as AVX2's: a decoded
/// token's serial SiLU·mul is bound by the division and the `exp` chain, so
/// twice the lanes halve it.
#[inline(always)]
unsafe fn silu_mul_body(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX-512 F is enabled.
    unsafe {
        let one = _mm512_set1_ps(1.0);
        let sign = _mm512_set1_epi32(i32::MIN);
        for i in (0..n / 16).map(|i| 16 * i) {
            let g = _mm512_loadu_ps(gate.add(i));
            let minus_g = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
            let s = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps16(minus_g)));
            _mm512_storeu_ps(gate.add(i), _mm512_mul_ps(s, _mm512_loadu_ps(up.add(i))));
        }
    }
}

target_fns! { avx512:
    unsafe fn k_silu_mul(n: usize, gate: *mut f32, up: *const f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { silu_mul_body(n, gate, up) }
    }
}

/// The SIMD part of a gated activation: 16 lanes, then AVX2's 8 for a
/// remaining half vector; the caller finishes the tail with the scalar
/// code. Returns the count done. Reachable only after AVX-512 detection.
pub(crate) fn gelu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; AVX-512 was detected.
    unsafe { k_gelu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    let done = gate.len() / 16 * 16;
    done + crate::x86_64::avx2::gelu_mul(&mut gate[done..], &up[done..])
}

/// As [`gelu_mul`], for SiLU.
pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; AVX-512 was detected.
    unsafe { k_silu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    let done = gate.len() / 16 * 16;
    done + crate::x86_64::avx2::silu_mul(&mut gate[done..], &up[done..])
}
