//! Advanced SIMD kernels, with and without the `dotprod` extension.
//!
//! The integer dot products are written once, generic over `DOT`: `true`
//! uses `sdot` (inline asm: the intrinsic is unstable), `false` widening
//! `smull` + pairwise adds. `plain::*` and `dotprod::*` are the safe
//! wrappers of the two instantiations, reachable only through
//! [`super::NEON`] / [`super::DOTPROD`] after detection. Quants are handled
//! as signed bytes in `[-128, 127]`; every product fits `i16`.

// Loops index several parallel arrays of vectors by sub-block; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

mod dot;
mod float;
mod quantize;
mod tile;

pub(crate) use dot::{dotprod, plain};
pub(crate) use float::*;
pub(crate) use quantize::*;
pub(crate) use tile::*;

use crate::scalar::k4_scales_mins;
use core::arch::aarch64::*;
use core::arch::asm;
use half::f16;

#[inline(always)]
unsafe fn fp16(p: *const u8) -> f32 {
    // SAFETY: the caller passes two readable bytes.
    f16::from_bits(unsafe { p.cast::<u16>().read_unaligned() }).to_f32()
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    // SAFETY: the caller passes four readable bytes.
    unsafe { p.cast::<f32>().read_unaligned() }
}

target_fns! { dotprod:
    /// `sdot`: four 4-way i8 dot products added to `acc`.
    #[inline]
    unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: register-only instruction of the dotprod extension, enabled here.
        unsafe {
            asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b,
                options(pure, nomem, nostack));
        }
        acc
    }
}

/// `acc + Σ a·b`, the sixteen products folded into four i32 lanes.
#[inline(always)]
unsafe fn dot16<const DOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if DOT {
        // SAFETY: DOT is only instantiated inside kernels compiled with dotprod.
        unsafe { sdot(acc, a, b) }
    } else {
        // SAFETY: NEON is enabled in every caller.
        unsafe {
            let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
            let hi = vmull_high_s8(a, b);
            vpadalq_s16(vpadalq_s16(acc, lo), hi)
        }
    }
}

#[inline(always)]
unsafe fn ld(p: *const u8) -> int8x16_t {
    // SAFETY: the caller passes 16 readable bytes.
    unsafe { vld1q_s8(p.cast()) }
}

/// 16 bytes → (low nibbles, high nibbles) as unsigned values 0..15.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller passes 16 readable bytes.
    unsafe {
        let b = vld1q_u8(p);
        (vandq_u8(b, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(b))
    }
}

/// The 32 signed quants of a legacy block as two halves (values 0..15, 16..31).
type Quants = unsafe fn(*const u8) -> (int8x16_t, int8x16_t);

#[inline(always)]
unsafe fn q8_0_quants(x: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: a Q8_0 block has 32 quants at offset 2.
    unsafe { (ld(x.add(2)), ld(x.add(18))) }
}
#[inline(always)]
unsafe fn q4_0_quants(x: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: a Q4_0 block has 16 nibble bytes at offset 2.
    unsafe {
        let (lo, hi) = nibbles(x.add(2));
        let m8 = vdupq_n_s8(8);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), m8),
            vsubq_s8(vreinterpretq_s8_u8(hi), m8),
        )
    }
}
#[inline(always)]
unsafe fn q4_1_quants(x: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: a Q4_1 block has 16 nibble bytes at offset 4.
    unsafe {
        let (lo, hi) = nibbles(x.add(4));
        (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
    }
}
/// A 5-bit block's 32 quants, unsigned 0..31, as two halves (values
/// 0..15, 16..31): `qh` (bit `j` is value `j`'s fifth bit) and 16 nibble bytes.
#[inline(always)]
unsafe fn five_bit_quants(qh: *const u8, qs: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller passes 4 readable bytes at `qh` and 16 at `qs`.
    unsafe {
        let bits = vld1q_u8([1u8, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128].as_ptr());
        let spread = |a: u8, b: u8| {
            let t = vtstq_u8(vcombine_u8(vdup_n_u8(a), vdup_n_u8(b)), bits);
            vandq_u8(t, vdupq_n_u8(0x10))
        };
        let (lo, hi) = nibbles(qs);
        (
            vorrq_u8(lo, spread(*qh, *qh.add(1))),
            vorrq_u8(hi, spread(*qh.add(2), *qh.add(3))),
        )
    }
}
#[inline(always)]
unsafe fn q5_0_quants(x: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: a Q5_0 block has qh at offset 2 and 16 nibble bytes at 6.
    unsafe {
        let (lo, hi) = five_bit_quants(x.add(2), x.add(6));
        let m16 = vdupq_n_s8(16);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), m16),
            vsubq_s8(vreinterpretq_s8_u8(hi), m16),
        )
    }
}
#[inline(always)]
unsafe fn q5_1_quants(x: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: a Q5_1 block has qh at offset 4 and 16 nibble bytes at 8.
    unsafe {
        let (lo, hi) = five_bit_quants(x.add(4), x.add(8));
        (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
    }
}
