//! The 1×8 and 1×4 tiles of the legacy types (dotprod only: the indexed
//! `sdot` is what makes four rows per vector cheap).

use super::*;

target_fns! { dotprod:
    /// `sdot` by element: each four-byte group of `a` against four-byte group
    /// `J` of `w`, added to `acc`.
    #[inline]
    unsafe fn sdot_lane<const J: usize>(acc: int32x4_t, a: int8x16_t, w: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: register-only instruction of the dotprod extension, enabled here;
        // `J` < 4 is a valid element index.
        unsafe {
            macro_rules! indexed {
                ($j:literal) => {
                    asm!(concat!("sdot {acc:v}.4s, {a:v}.16b, {w:v}.4b[", $j, "]"),
                        acc = inout(vreg) acc, a = in(vreg) a, w = in(vreg) w,
                        options(pure, nomem, nostack))
                };
            }
            match J {
                0 => indexed!("0"),
                1 => indexed!("1"),
                2 => indexed!("2"),
                _ => indexed!("3"),
            }
        }
        acc
    }
}

/// One legacy weight row against a packed group of `4·S` Q8_0 rows (see
/// [`crate::act_pack`]; signed quants, so the group's quant sums are unused):
/// four rows per vector, each weight dword multiplied into all four by an
/// indexed `sdot`, so the lanes hold the rows' exact block sums; then
/// `acc = fma(d_w·d_a, Σ, acc)` per lane, bit for bit the row kernels.
#[inline(always)]
unsafe fn legacy_tile<const S: usize>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    packed: *const u8,
    quants: Quants,
) -> [[f32; 4]; S] {
    // SAFETY: the wrappers checked `nb` weight blocks and `nb` packed groups of
    // `4·S` rows; NEON and dotprod are enabled in the callers.
    unsafe {
        let gb = crate::act_pack::q8_0_group_block(4 * S);
        let mut acc = [vdupq_n_f32(0.0); S];
        for i in 0..nb {
            let (x, y) = (w.add(i * wsize), packed.add(i * gb));
            let (q0, q1) = quants(x);
            let dx = vdupq_n_f32(fp16(x));
            for set in 0..S {
                let at = |j: usize, half: usize| ld(y.add(32 * (j * S + set) + 16 * half));
                let mut s = vdupq_n_s32(0);
                s = sdot_lane::<0>(s, at(0, 0), q0);
                s = sdot_lane::<0>(s, at(0, 1), q1);
                s = sdot_lane::<1>(s, at(1, 0), q0);
                s = sdot_lane::<1>(s, at(1, 1), q1);
                s = sdot_lane::<2>(s, at(2, 0), q0);
                s = sdot_lane::<2>(s, at(2, 1), q1);
                s = sdot_lane::<3>(s, at(3, 0), q0);
                s = sdot_lane::<3>(s, at(3, 1), q1);
                let da = vld1q_f32(y.add(32 * 4 * S + 16 * set).cast());
                acc[set] = vfmaq_f32(acc[set], vcvtq_f32_s32(s), vmulq_f32(dx, da));
            }
        }
        let mut out = [[0.0f32; 4]; S];
        for set in 0..S {
            vst1q_f32(out[set].as_mut_ptr(), acc[set]);
        }
        out
    }
}

kernel_fns! { tiles dotprod, Q8_0;
    Q8_0 => tile8_q8_0: 2, tile4_q8_0: 1
        = |nb, w, packed| legacy_tile::<S>(nb, w, 34, packed, q8_0_quants);
    Q4_0 => tile8_q4_0: 2, tile4_q4_0: 1
        = |nb, w, packed| legacy_tile::<S>(nb, w, 18, packed, q4_0_quants);
    Q5_0 => tile8_q5_0: 2, tile4_q5_0: 1
        = |nb, w, packed| legacy_tile::<S>(nb, w, 22, packed, q5_0_quants);
}
