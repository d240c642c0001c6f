//! AVX2 activations (gated GELU and SiLU, BERT's GELU-erf) with the scalar
//! code's bits.

use super::*;

/// [`crate::ops::gelu_mul`] in 8 lanes: the same operations in the same
/// order (no FMA contraction), so the same bits.
#[inline(always)]
unsafe fn gelu_mul_body(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX2 is enabled.
    unsafe {
        let (c, a) = (_mm256_set1_ps(0.797_884_6), _mm256_set1_ps(0.044_715));
        let (one, m2) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-2.0));
        for i in (0..n / 8).map(|i| 8 * i) {
            let u = _mm256_loadu_ps(gate.add(i));
            // z = c·u·(1 + a·u·u), evaluated left to right as the scalar code.
            let z = _mm256_mul_ps(
                _mm256_mul_ps(c, u),
                _mm256_add_ps(one, _mm256_mul_ps(_mm256_mul_ps(a, u), u)),
            );
            let g = _mm256_div_ps(u, _mm256_add_ps(one, exp_ps(_mm256_mul_ps(m2, z))));
            _mm256_storeu_ps(gate.add(i), _mm256_mul_ps(g, _mm256_loadu_ps(up.add(i))));
        }
    }
}

target_fns! { avx2:
    unsafe fn k_gelu_mul(n: usize, gate: *mut f32, up: *const f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { gelu_mul_body(n, gate, up) }
    }
}

/// [`crate::ops::silu_mul`] in 8 lanes, the same bits.
#[inline(always)]
unsafe fn silu_mul_body(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX2 is enabled.
    unsafe {
        let one = _mm256_set1_ps(1.0);
        let neg = _mm256_set1_ps(-0.0);
        for i in (0..n / 8).map(|i| 8 * i) {
            let g = _mm256_loadu_ps(gate.add(i));
            let s = _mm256_div_ps(g, _mm256_add_ps(one, exp_ps(_mm256_xor_ps(g, neg))));
            _mm256_storeu_ps(gate.add(i), _mm256_mul_ps(s, _mm256_loadu_ps(up.add(i))));
        }
    }
}

target_fns! { avx2:
    unsafe fn k_silu_mul(n: usize, gate: *mut f32, up: *const f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { silu_mul_body(n, gate, up) }
    }
}

/// [`crate::ops::erf_fast`] in 8 lanes: the same operations in the same
/// order, so the same bits. The clamp's operands are ordered so that a NaN
/// passes through, as `f32::clamp` lets it.
#[inline(always)]
unsafe fn erf_ps(x: __m256) -> __m256 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        let x = _mm256_max_ps(_mm256_set1_ps(-4.0), _mm256_min_ps(_mm256_set1_ps(4.0), x));
        let x2 = _mm256_mul_ps(x, x);
        use crate::ops::{ERF_DEN, ERF_NUM};
        let mut p = _mm256_set1_ps(ERF_NUM[0]);
        for &c in &ERF_NUM[1..] {
            p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(c));
        }
        let mut q = _mm256_set1_ps(ERF_DEN[0]);
        for &c in &ERF_DEN[1..] {
            q = _mm256_add_ps(_mm256_mul_ps(q, x2), _mm256_set1_ps(c));
        }
        _mm256_div_ps(_mm256_mul_ps(x, p), q)
    }
}

/// [`crate::ops::gelu_erf`] in 8 lanes, the same bits.
#[inline(always)]
unsafe fn gelu_erf_body(n: usize, x: *mut f32) {
    // SAFETY: the wrapper checked `n` values in the slice; AVX2 is enabled.
    unsafe {
        let (half, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
        let s = _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2);
        for i in (0..n / 8).map(|i| 8 * i) {
            let u = _mm256_loadu_ps(x.add(i));
            let e = erf_ps(_mm256_mul_ps(u, s));
            _mm256_storeu_ps(
                x.add(i),
                _mm256_mul_ps(_mm256_mul_ps(half, u), _mm256_add_ps(one, e)),
            );
        }
    }
}

target_fns! { avx2:
    unsafe fn k_gelu_erf(n: usize, x: *mut f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { gelu_erf_body(n, x) }
    }
}

/// The 8-lane part of GELU-erf: the first `len / 8 · 8` values; the caller
/// finishes the tail with the scalar code. Returns that count.
pub(crate) fn gelu_erf(x: &mut [f32]) -> usize {
    // SAFETY: the slice holds `x.len()` values; reachable only after AVX2 detection.
    unsafe { k_gelu_erf(x.len(), x.as_mut_ptr()) };
    x.len() / 8 * 8
}

/// The 8-lane part of a gated activation: the first `len / 8 · 8` values;
/// the caller finishes the tail with the scalar code. Returns that count.
pub(crate) fn gelu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; reachable only after AVX2 detection.
    unsafe { k_gelu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    gate.len() / 8 * 8
}
/// As [`gelu_mul`], for SiLU.
pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; reachable only after AVX2 detection.
    unsafe { k_silu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    gate.len() / 8 * 8
}
