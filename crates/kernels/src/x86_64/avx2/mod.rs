//! AVX2 + FMA + F16C kernels.
//!
//! Each public function is a safe wrapper that checks the row lengths, then
//! calls one `#[target_feature]` entry point (both written by
//! `kernel_fns!` or `target_fns!`, see `crate::macros`); the wrappers are only reachable
//! through [`super::AVX2`] / [`super::AVX512`], which
//! [`crate::kernels_for`] hands out after detecting the features.
//! Helpers are `#[inline(always)]` so they compile inside the kernel with its
//! features. The dot-product bodies are generic over the number of
//! activation columns `N`: `N = 1` is the row kernel, `N = 4` the 1×4 tile that
//! unpacks each weight block once.
//!
//! Integer sums are exact (`maddubs` only ever sees an unsigned operand
//! ≤ 63, or |w| ≤ 128 against an activation in `[-127, 127]`: no saturation,
//! and i16 partial sums are bounded where they are kept); each block's (or
//! super-block's) exact sum is scaled with one FMA, so results differ from
//! the scalar reference by reassociation only.

use super::common::*;
use crate::prefetch::hint_l2;
use crate::scalar::k4_scales_mins;
use core::arch::x86_64::*;
use half::f16;

mod activation;
mod attention;
mod attention_q8_0;
mod attention_tile;
mod dot;
mod float;
mod half_rows;
mod kquant;
mod panel;
mod quantize;
mod stored;
mod stored_legacy;
mod tile;
mod unpack;

// The kernels the tables hold, and what sibling modules share.
pub(crate) use activation::*;
pub(crate) use attention::*;
pub(crate) use attention_q8_0::*;
pub(crate) use attention_tile::{attend_tile, tile_queries};
pub(crate) use dot::*;
pub(crate) use float::*;
pub(crate) use half_rows::*;
pub(crate) use kquant::*;
pub(crate) use panel::*;
pub(crate) use quantize::*;
pub(crate) use stored::*;
pub(crate) use stored_legacy::*;
pub(crate) use tile::*;
pub(crate) use unpack::*;

/// The f16 at `p` in all 8 lanes (a broadcast load, then one conversion).
#[inline(always)]
unsafe fn fp16_x8(p: *const u8) -> __m256 {
    if cfg!(miri) {
        // SAFETY: as for `fp16`.
        return unsafe { _mm256_set1_ps(fp16(p)) };
    }
    // SAFETY: `p` has two readable bytes; F16C is enabled in every kernel calling this.
    unsafe { _mm256_cvtph_ps(_mm_set1_epi16(rd_u16(p) as i16)) }
}

/// Σ of adjacent pairs of `u8 · i8` products, widened to 8 × i32.
#[inline(always)]
unsafe fn maddubs_i32(u: __m256i, s: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
}

/// `|x|` as unsigned bytes (-128 → 128): the weight half of the sign trick.
#[inline(always)]
unsafe fn abs_u8(x: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm256_sign_epi8(x, x) }
}

/// `y · sign(x)` for the activation half of the sign trick (`y` ∈ [-127, 127]).
#[inline(always)]
unsafe fn signed_like(y: __m256i, x: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe { _mm256_sign_epi8(y, x) }
}
