//! AVX-512 (F, BW, VL) + VNNI kernels: `vpdpbusd` sums four `u8 · i8`
//! products into each i32 lane without the 16-bit saturation of `maddubs`.
//!
//! Reachable only through [`super::AVX512`], handed out after detection.
//! The tests run them natively where the CPU has AVX-512 VNNI, and the tests
//! named `miri_avx512_*` run them under Miri on any x86-64 machine (see
//! `.ci/isa-tests.sh`), so only intrinsics Miri implements are used here, and
//! f16 scales are decoded in software. The exception is `bf16`: Miri has
//! no `vdpbf16ps`, so its kernels run natively only, where the CPU has
//! AVX-512 BF16 (Zen 4 and later, Sapphire Rapids and later); elsewhere, and
//! under Miri, the table keeps AVX2's widened BF16 kernels.

// AVX2's tile bodies and attention plumbing, run here with VNNI units and
// 512-bit kernels.
use super::avx2::{AttendKernel, KeyRows, legacy_tile, q4_k_tile, q6_k_tile};
use super::common::*;
use crate::prefetch::{hint_l2, stream_ahead};
use crate::scalar::k4_scales_mins;
use core::arch::x86_64::*;

mod activation;
mod attention;
mod attention_chunked;
mod attention_tile;
mod bf16;
mod float;
mod kquant;
mod panel;
mod panel_kquant;
mod rows8;
mod stored;
mod tile;
mod unpack;

// The kernels the tables hold, and what sibling modules share.
pub(crate) use activation::*;
pub(crate) use attention::*;
pub(crate) use attention_chunked::{CHUNKED_QUERIES, attend_chunked};
pub(crate) use attention_tile::{attend_tile, tile_queries};
pub(crate) use bf16::*;
pub(crate) use float::*;
pub(crate) use kquant::*;
pub(crate) use panel::*;
use panel_kquant::*;
pub(crate) use panel_kquant::{q4_k_min_sums, q4_k_scale, stored_q4_k_meta, stored_q6_k_expand};
pub(crate) use rows8::*;
pub(crate) use stored::*;
pub(crate) use tile::*;
pub(crate) use unpack::*;

/// Two 32-byte halves → one 64-byte vector.
#[inline(always)]
unsafe fn cat(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// The two 256-bit halves of `v` added: lane `l` of the result sums lanes
/// `l` and `l + 8`. A 64-byte `vpdpbusd` over two 32-byte chunks folded this
/// way gives each lane exactly the byte positions the AVX2 kernels' lane
/// gathers, so the float arithmetic after it can be theirs, bit for bit.
#[inline(always)]
unsafe fn fold(v: __m512i) -> __m256i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}
