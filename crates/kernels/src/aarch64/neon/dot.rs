//! Row and 1×4 dot products of the legacy and K-quant types, written once
//! generic over `DOT` and instantiated as [`plain`] and [`dotprod`].

use super::*;

/// Legacy weight blocks of `wsize` bytes against `N` Q8_0 (`OFFSET = false`)
/// or Q8_1 rows (`OFFSET = true`: adds `m · s` per block). Each weight block
/// is unpacked once for all `N` rows, and each row's arithmetic is the same
/// whatever `N` is: a token's result does not depend on its batch. For Q8_0
/// rows it is the 1×8 tiles' ([`legacy_tile`]): each block's exact integer
/// sum, then `acc = fma(d_w·d_a, Σ, acc)` in block order.
#[inline(always)]
unsafe fn legacy<const DOT: bool, const OFFSET: bool, const N: usize>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    a: [*const u8; N],
    quants: Quants,
) -> [f32; N] {
    let asize = if OFFSET { 36 } else { 34 };
    let aq = if OFFSET { 4 } else { 2 };
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); NEON is enabled.
    unsafe {
        let mut acc = [0.0f32; N];
        let mut summs = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(i * wsize);
            let (q0, q1) = quants(x);
            let dx = fp16(x);
            for c in 0..N {
                let y = a[c].add(i * asize);
                let p = dot16::<DOT>(
                    dot16::<DOT>(vdupq_n_s32(0), q0, ld(y.add(aq))),
                    q1,
                    ld(y.add(aq + 16)),
                );
                acc[c] = (dx * fp16(y)).mul_add(vaddvq_s32(p) as f32, acc[c]);
                if OFFSET {
                    summs[c] += fp16(x.add(2)) * fp16(y.add(2));
                }
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = acc[c] + summs[c];
        }
        out
    }
}

/// Q4_K (`HIGH = false`) / Q5_K (`HIGH = true`) against `N` Q8_K rows, each
/// weight block unpacked once for all of them (per-row arithmetic as for one).
#[inline(always)]
unsafe fn q45_k<const DOT: bool, const HIGH: bool, const N: usize>(
    nb: usize,
    w: *const u8,
    a: [*const u8; N],
) -> [f32; N] {
    let bsize = if HIGH { 176 } else { 144 };
    let qs_off = if HIGH { 48 } else { 16 };
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); NEON is enabled.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); N];
        let mut summ = [0.0f32; N];
        let one = vdupq_n_u8(1);
        for i in 0..nb {
            let x = w.add(i * bsize);
            let ys = a.map(|p| p.add(i * 292));
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut hb = if HIGH {
                [vld1q_u8(x.add(16)), vld1q_u8(x.add(32))]
            } else {
                [vdupq_n_u8(0); 2]
            };
            let mut isum = [vdupq_n_s32(0); N];
            for j in 0..4 {
                let mut lo_acc = [vdupq_n_s32(0); N];
                let mut hi_acc = [vdupq_n_s32(0); N];
                for h in 0..2 {
                    let (mut lo, mut hi) = nibbles(x.add(qs_off + 32 * j + 16 * h));
                    if HIGH {
                        lo = vorrq_u8(lo, vshlq_n_u8::<4>(vandq_u8(hb[h], one)));
                        hi = vorrq_u8(hi, vshlq_n_u8::<3>(vandq_u8(hb[h], vdupq_n_u8(2))));
                        hb[h] = vshrq_n_u8::<2>(hb[h]);
                    }
                    for c in 0..N {
                        let q8 = ys[c].add(4 + 64 * j);
                        lo_acc[c] =
                            dot16::<DOT>(lo_acc[c], vreinterpretq_s8_u8(lo), ld(q8.add(16 * h)));
                        hi_acc[c] = dot16::<DOT>(
                            hi_acc[c],
                            vreinterpretq_s8_u8(hi),
                            ld(q8.add(32 + 16 * h)),
                        );
                    }
                }
                for c in 0..N {
                    isum[c] = vmlaq_n_s32(isum[c], lo_acc[c], scales[2 * j] as i32);
                    isum[c] = vmlaq_n_s32(isum[c], hi_acc[c], scales[2 * j + 1] as i32);
                }
            }
            let (dx, dminx) = (fp16(x), fp16(x.add(2)));
            for c in 0..N {
                let dy = f32_at(ys[c]);
                acc[c] = vfmaq_f32(acc[c], vcvtq_f32_s32(isum[c]), vdupq_n_f32(dy * dx));
                let bs = &ys[c].add(260).cast::<[i16; 16]>().read_unaligned();
                let msum: i32 = (0..8)
                    .map(|j| mins[j] as i32 * (bs[2 * j] as i32 + bs[2 * j + 1] as i32))
                    .sum();
                summ[c] += (dy * dminx) * msum as f32;
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = vaddvq_f32(acc[c]) - summ[c];
        }
        out
    }
}

/// Q6_K against `N` Q8_K rows: unsigned 6-bit quants, the `-32` applied
/// through the bsums; each weight block unpacked once for all rows.
#[inline(always)]
unsafe fn q6_k<const DOT: bool, const N: usize>(
    nb: usize,
    w: *const u8,
    a: [*const u8; N],
) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (checked by the wrappers); NEON is enabled.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); N];
        let m4 = vdupq_n_u8(0x0F);
        let m3 = vdupq_n_u8(3);
        for i in 0..nb {
            let x = w.add(i * 210);
            let ys = a.map(|p| p.add(i * 292));
            let sc = &*x.add(192).cast::<[i8; 16]>();
            let mut isum = [vdupq_n_s32(0); N];
            for half in 0..2 {
                let ql = x.add(64 * half);
                let qh = x.add(128 + 32 * half);
                for cc in 0..2 {
                    let (l0, l1) = (vld1q_u8(ql.add(16 * cc)), vld1q_u8(ql.add(32 + 16 * cc)));
                    let h = vld1q_u8(qh.add(16 * cc));
                    let q = [
                        vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8::<4>(vandq_u8(h, m3))),
                        vorrq_u8(
                            vandq_u8(l1, m4),
                            vshlq_n_u8::<2>(vandq_u8(h, vdupq_n_u8(0x0C))),
                        ),
                        vorrq_u8(vshrq_n_u8::<4>(l0), vandq_u8(h, vdupq_n_u8(0x30))),
                        vorrq_u8(
                            vshrq_n_u8::<4>(l1),
                            vshrq_n_u8::<2>(vandq_u8(h, vdupq_n_u8(0xC0))),
                        ),
                    ];
                    for (k, &qk) in q.iter().enumerate() {
                        let s = sc[8 * half + 2 * k + cc] as i32;
                        for c in 0..N {
                            let q8 = ys[c].add(4 + 128 * half);
                            let p = dot16::<DOT>(
                                vdupq_n_s32(0),
                                vreinterpretq_s8_u8(qk),
                                ld(q8.add(32 * k + 16 * cc)),
                            );
                            isum[c] = vmlaq_n_s32(isum[c], p, s);
                        }
                    }
                }
            }
            let dx = fp16(x.add(208));
            for c in 0..N {
                let bs = &ys[c].add(260).cast::<[i16; 16]>().read_unaligned();
                let off: i32 = sc.iter().zip(bs).map(|(&s, &b)| s as i32 * b as i32).sum();
                let total = vaddvq_s32(isum[c]) - 32 * off;
                acc[c] = vsetq_lane_f32::<0>(
                    vgetq_lane_f32::<0>(acc[c]) + (f32_at(ys[c]) * dx) * total as f32,
                    acc[c],
                );
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = vaddvq_f32(acc[c]);
        }
        out
    }
}

/// The row and 1×4 kernels of every type, compiled for one feature set
/// (`$dot`: whether the bodies use `sdot`).
macro_rules! instantiate {
    ($m:ident, $dot:literal, $isa:ident) => {
        pub(crate) mod $m {
            use super::*;

            kernel_fns! { dot $isa;
                Q8_0, Q8_0 => vec_dot_q8_0, vec_dot_x4_q8_0
                    = |nb, w, a| legacy::<$dot, false, N>(nb, w, 34, a, q8_0_quants);
                Q4_0, Q8_0 => vec_dot_q4_0, vec_dot_x4_q4_0
                    = |nb, w, a| legacy::<$dot, false, N>(nb, w, 18, a, q4_0_quants);
                Q5_0, Q8_0 => vec_dot_q5_0, vec_dot_x4_q5_0
                    = |nb, w, a| legacy::<$dot, false, N>(nb, w, 22, a, q5_0_quants);
                Q4_1, Q8_1 => vec_dot_q4_1, vec_dot_x4_q4_1
                    = |nb, w, a| legacy::<$dot, true, N>(nb, w, 20, a, q4_1_quants);
                Q5_1, Q8_1 => vec_dot_q5_1, vec_dot_x4_q5_1
                    = |nb, w, a| legacy::<$dot, true, N>(nb, w, 24, a, q5_1_quants);
                Q4_K, Q8_K => vec_dot_q4_k, vec_dot_x4_q4_k
                    = |nb, w, a| q45_k::<$dot, false, N>(nb, w, a);
                Q5_K, Q8_K => vec_dot_q5_k, vec_dot_x4_q5_k
                    = |nb, w, a| q45_k::<$dot, true, N>(nb, w, a);
                Q6_K, Q8_K => vec_dot_q6_k, vec_dot_x4_q6_k = |nb, w, a| q6_k::<$dot, N>(nb, w, a);
            }
        }
    };
}

instantiate!(plain, false, neon);
instantiate!(dotprod, true, dotprod);
