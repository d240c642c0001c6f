//! Quantizers of f32 activations to Q8_0, Q8_1 and Q8_K.

use super::*;

/// One 32-value block → quants at `qs`; returns (d, Σq). `fcvtas` rounds half
/// away from zero, exactly C's `roundf`.
#[inline(always)]
unsafe fn q8_block(x: *const f32, qs: *mut i8) -> (f32, i32) {
    // SAFETY: 32 readable floats at `x`, 32 writable bytes at `qs`; NEON is enabled.
    unsafe {
        let v = [0, 4, 8, 12, 16, 20, 24, 28].map(|k| vld1q_f32(x.add(k)));
        let mut m = vdupq_n_f32(0.0);
        for &v in &v {
            m = vmaxq_f32(m, vabsq_f32(v));
        }
        let d = vmaxvq_f32(m) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = v.map(|v| vcvtaq_s32_f32(vmulq_n_f32(v, id)));
        let mut sum = vdupq_n_s32(0);
        for k in 0..4 {
            sum = vaddq_s32(sum, vaddq_s32(q[2 * k], q[2 * k + 1]));
            let h = vcombine_s16(vqmovn_s32(q[2 * k]), vqmovn_s32(q[2 * k + 1]));
            vst1_s8(qs.add(8 * k), vqmovn_s16(h));
        }
        (d, vaddvq_s32(sum))
    }
}

#[inline(always)]
unsafe fn quantize_q8_blocks(nb: usize, x: *const f32, y: *mut u8, with_sum: bool) {
    let bsize = if with_sum { 36 } else { 34 };
    for i in 0..nb {
        // SAFETY: `nb` blocks of input and output (checked by the wrapper).
        unsafe {
            let b = y.add(bsize * i);
            let (d, sum) = q8_block(x.add(32 * i), b.add(bsize - 32).cast());
            b.cast::<[u8; 2]>()
                .write_unaligned(f16::from_f32(d).to_le_bytes());
            if with_sum {
                b.add(2)
                    .cast::<[u8; 2]>()
                    .write_unaligned(f16::from_f32(sum as f32 * d).to_le_bytes());
            }
        }
    }
}

#[inline(always)]
unsafe fn quantize_q8_k_blocks(nb: usize, x: *const f32, y: *mut u8) {
    for i in 0..nb {
        // SAFETY: `nb` blocks: 256 floats in, 292 bytes out each (checked by the wrapper).
        unsafe {
            let x = x.add(256 * i);
            let b = y.add(292 * i);
            let mut m = vdupq_n_f32(0.0);
            for k in 0..64 {
                m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x.add(4 * k))));
            }
            let amax = vmaxvq_f32(m);
            if amax == 0.0 {
                core::ptr::write_bytes(b, 0, 292);
                continue;
            }
            // The first value of largest magnitude sets the sign, as in the reference.
            let first = (0..256).find(|&k| (*x.add(k)).abs() == amax).unwrap_or(0);
            let iscale = -127.0 / *x.add(first);
            let magic = vdupq_n_f32(12_582_912.0);
            let mut bsums = [0i16; 16];
            for g in 0..16 {
                let mut s = vdupq_n_s32(0);
                let mut h = [vdup_n_s16(0); 4];
                for k in 0..4 {
                    let v = vaddq_f32(vmulq_n_f32(vld1q_f32(x.add(16 * g + 4 * k)), iscale), magic);
                    let bits = vandq_s32(vreinterpretq_s32_f32(v), vdupq_n_s32(0x007f_ffff));
                    let q = vminq_s32(vsubq_s32(bits, vdupq_n_s32(0x0040_0000)), vdupq_n_s32(127));
                    s = vaddq_s32(s, q);
                    h[k] = vqmovn_s32(q);
                }
                bsums[g] = vaddvq_s32(s) as i16;
                let q8 = vcombine_s8(
                    vqmovn_s16(vcombine_s16(h[0], h[1])),
                    vqmovn_s16(vcombine_s16(h[2], h[3])),
                );
                vst1q_s8(b.add(4 + 16 * g).cast(), q8);
            }
            b.cast::<f32>().write_unaligned(1.0 / iscale);
            b.add(260).cast::<[i16; 16]>().write_unaligned(bsums);
        }
    }
}

kernel_fns! { quantize neon;
    Q8_0 => quantize_q8_0 = |nb, x, y| quantize_q8_blocks(nb, x, y, false);
    Q8_1 => quantize_q8_1 = |nb, x, y| quantize_q8_blocks(nb, x, y, true);
    Q8_K => quantize_q8_k = |nb, x, y| quantize_q8_k_blocks(nb, x, y);
}
