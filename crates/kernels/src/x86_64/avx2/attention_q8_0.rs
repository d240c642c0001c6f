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

/// [`q8_0_dot`] of the query `y` with key rows `i` in `0..out.len()` (each
/// the head's whole blocks at `rows[i · stride..]`), eight keys a vector:
/// each block's exact integer sums for eight keys gathered by one addition
/// tree, then the same float steps lane by lane; the keys past the last
/// eight take [`q8_0_dot`].
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) unsafe fn q8_0_dot_rows(rows: &[u8], stride: usize, y: &[u8], out: &mut [f32]) {
    let nb = y.len() / Q8_0_BYTES;
    let n = out.len();
    assert!(n == 0 || rows.len() >= (n - 1) * stride + nb * Q8_0_BYTES);
    let ones = _mm256_set1_epi16(1);
    let mut j = 0;
    while j + 8 <= n {
        let mut sum = _mm256_setzero_ps();
        for b in 0..nb {
            let yb = &y[b * Q8_0_BYTES..][..Q8_0_BYTES];
            // SAFETY: the query block's 32 quants from byte 2.
            let qy = unsafe { _mm256_loadu_si256(yb.as_ptr().add(2).cast()) };
            let dy = scale_of(yb);
            let mut lanes = [_mm256_setzero_si256(); 8];
            let mut dk = [0.0f32; 8];
            for (i, lane) in lanes.iter_mut().enumerate() {
                let kb = &rows[(j + i) * stride + b * Q8_0_BYTES..][..Q8_0_BYTES];
                // SAFETY: the key block's 32 quants from byte 2.
                let qx = unsafe { _mm256_loadu_si256(kb.as_ptr().add(2).cast()) };
                let pairs =
                    _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
                *lane = _mm256_madd_epi16(pairs, ones);
                dk[i] = scale_of(kb);
            }
            // Eight lanes of eight keys → one lane a key (exact integer sums).
            let h01 = _mm256_hadd_epi32(lanes[0], lanes[1]);
            let h23 = _mm256_hadd_epi32(lanes[2], lanes[3]);
            let h45 = _mm256_hadd_epi32(lanes[4], lanes[5]);
            let h67 = _mm256_hadd_epi32(lanes[6], lanes[7]);
            let h0123 = _mm256_hadd_epi32(h01, h23);
            let h4567 = _mm256_hadd_epi32(h45, h67);
            let sums = _mm256_add_epi32(
                _mm256_permute2x128_si256::<0x20>(h0123, h4567),
                _mm256_permute2x128_si256::<0x31>(h0123, h4567),
            );
            // SAFETY: eight floats.
            let d = _mm256_mul_ps(unsafe { _mm256_loadu_ps(dk.as_ptr()) }, _mm256_set1_ps(dy));
            sum = _mm256_add_ps(sum, _mm256_mul_ps(_mm256_cvtepi32_ps(sums), d));
        }
        // SAFETY: outputs j..j+8 lie in `out`.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(j), sum) };
        j += 8;
    }
    for (i, s) in out.iter_mut().enumerate().skip(j) {
        let at = i * stride;
        // SAFETY: AVX2 is enabled here.
        *s = unsafe { q8_0_dot(&rows[at..at + nb * Q8_0_BYTES], y) };
    }
}

/// Value rows `i` in `0..ps.len()` (each the head's whole blocks at
/// `rows[i · stride..]`) added as [`q8_0_add_scaled`] adds them, in order,
/// with `out` held in registers 64 values at a time.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) unsafe fn q8_0_add_rows(rows: &[u8], stride: usize, ps: &[f32], out: &mut [f32]) {
    let blocks = out.len() / Q8_0_VALUES;
    assert!(ps.is_empty() || rows.len() >= (ps.len() - 1) * stride + blocks * Q8_0_BYTES);
    // Two blocks (64 values, eight registers) a pass over the rows.
    for b0 in (0..blocks).step_by(2) {
        let nb = (blocks - b0).min(2);
        let o = out[b0 * Q8_0_VALUES..].as_mut_ptr();
        let mut acc = [_mm256_setzero_ps(); 8];
        for (c, acc) in acc.iter_mut().enumerate().take(4 * nb) {
            // SAFETY: value `8c` of the pass lies in `out` (`nb` blocks left).
            *acc = unsafe { _mm256_loadu_ps(o.add(8 * c)) };
        }
        for (i, &p) in ps.iter().enumerate() {
            for b in 0..nb {
                let block = &rows[i * stride + (b0 + b) * Q8_0_BYTES..][..Q8_0_BYTES];
                let s = _mm256_set1_ps(p * scale_of(block));
                for k in 0..4 {
                    // SAFETY: quants 8k..8k+8 lie at bytes 2+8k.. of the block.
                    let q = unsafe { _mm_loadl_epi64(block.as_ptr().add(2 + 8 * k).cast()) };
                    let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                    acc[4 * b + k] = _mm256_add_ps(acc[4 * b + k], _mm256_mul_ps(s, q));
                }
            }
        }
        for (c, acc) in acc.iter().enumerate().take(4 * nb) {
            // SAFETY: as for the loads.
            unsafe { _mm256_storeu_ps(o.add(8 * c), *acc) };
        }
    }
}
