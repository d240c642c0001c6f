//! The q8_0 KV cache's block loops ([`crate::attention_q8_0`]) in AVX2,
//! with the portable loops' bits: the integer sums are exact (quants lie in
//! -127..=127, so `vpmaddubsw` never saturates) and the float steps are the
//! same operations in the same order.

use super::*;
use crate::attention::{Q8_0_BYTES, Q8_0_VALUES, RowArgs};
use crate::attention_q8_0::{heads, scale_of};
use crate::dispatch::TypeKernels;

target_fns! { avx2:
    /// [`crate::attention_q8_0`]'s heads with their block loops in AVX2.
    pub(crate) unsafe fn q8_0_heads(q8_0: &TypeKernels, args: RowArgs<'_>, out: &mut [f32]) {
        heads(q8_0, args, out, true)
    }
}

/// ggml's `vec_dot_q8_0_q8_0` over the blocks `a` and `b`.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn q8_0_dot(a: &[u8], b: &[u8]) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let mut sum = 0.0f32;
    for (x, y) in a.chunks_exact(Q8_0_BYTES).zip(b.chunks_exact(Q8_0_BYTES)) {
        // SAFETY: a block holds 34 bytes, its 32 quants from byte 2.
        let (qx, qy) = unsafe {
            (
                _mm256_loadu_si256(x.as_ptr().add(2).cast()),
                _mm256_loadu_si256(y.as_ptr().add(2).cast()),
            )
        };
        // |x| · sign(x)·y in pairs of i16, then in i32 lanes.
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
        let s = _mm256_madd_epi16(pairs, ones);
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<1>(s));
        sum += _mm_cvtsi128_si32(s) as f32 * (scale_of(x) * scale_of(y));
    }
    sum
}

/// `out += p · dequantize(blocks)`.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn q8_0_add_scaled(p: f32, blocks: &[u8], out: &mut [f32]) {
    for (b, out) in blocks
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(Q8_0_VALUES))
    {
        let s = _mm256_set1_ps(p * scale_of(b));
        for i in 0..4 {
            // SAFETY: quants 8i..8i+8 lie at bytes 2+8i.. of the 34-byte
            // block; outputs 8i..8i+8 lie in the block's 32.
            unsafe {
                let q = _mm_loadl_epi64(b.as_ptr().add(2 + 8 * i).cast());
                let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                let o = out.as_mut_ptr().add(8 * i);
                _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), _mm256_mul_ps(s, q)));
            }
        }
    }
}
