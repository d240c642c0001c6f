//! f32 and f16 row dot products.

use super::*;

/// 4 f16 → 4 f32 (`fcvtl`, base ARMv8 Advanced SIMD; the intrinsic needs the unstable `f16`).
#[inline(always)]
unsafe fn cvt4(p: *const u8) -> float32x4_t {
    // SAFETY: the caller passes 8 readable bytes; `fcvtl` is register-only.
    unsafe {
        let h = vld1_u16(p.cast());
        let out: float32x4_t;
        asm!("fcvtl {o:v}.4s, {i:v}.4h", o = lateout(vreg) out, i = in(vreg) h,
            options(pure, nomem, nostack));
        out
    }
}

#[inline(always)]
unsafe fn ld4_f32(p: *const u8) -> float32x4_t {
    // SAFETY: the caller passes 16 readable bytes.
    unsafe { vld1q_f32(p.cast()) }
}

#[target_feature(enable = "neon")]
unsafe fn k_float(n: usize, x: *const u8, y: *const u8, half: bool) -> f32 {
    let (es, load): (usize, unsafe fn(*const u8) -> float32x4_t) =
        if half { (2, cvt4) } else { (4, ld4_f32) };
    // SAFETY: both rows hold `n` elements of `es` bytes (checked by the wrappers).
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = (i + 4 * k) * es;
                *a = vfmaq_f32(*a, load(x.add(o)), load(y.add(o)));
            }
            i += 16;
        }
        let mut sum = vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        ));
        while i < n {
            let (a, b) = if half {
                (fp16(x.add(2 * i)), fp16(y.add(2 * i)))
            } else {
                (f32_at(x.add(4 * i)), f32_at(y.add(4 * i)))
            };
            sum += a * b;
            i += 1;
        }
        sum
    }
}

pub(crate) fn vec_dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(GgmlType::F32, n, w);
    row_blocks(GgmlType::F32, n, a);
    // SAFETY: both rows hold `n` values (checked above); reachable only after NEON detection.
    unsafe { k_float(n, w.as_ptr(), a.as_ptr(), false) }
}
pub(crate) fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(GgmlType::F16, n, w);
    row_blocks(GgmlType::F16, n, a);
    // SAFETY: both rows hold `n` values (checked above); reachable only after NEON detection.
    unsafe { k_float(n, w.as_ptr(), a.as_ptr(), true) }
}
