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

use crate::GgmlType;
use crate::scalar::{k4_scales_mins, row_blocks};
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

/// `sdot`: four 4-way i8 dot products added to `acc`.
#[target_feature(enable = "neon,dotprod")]
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

/// `sdot` by element: each four-byte group of `a` against four-byte group
/// `J` of `w`, added to `acc`.
#[target_feature(enable = "neon,dotprod")]
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

/// One legacy weight row against a packed group of `4·S` Q8_0 rows (see
/// [`crate::pack`]; signed quants, so the group's quant sums are unused):
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
        let gb = crate::pack::q8_0_group_block(4 * S);
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

macro_rules! instantiate {
    ($m:ident, $dot:expr, $feat:literal) => {
        pub(crate) mod $m {
            use super::*;

            #[target_feature(enable = $feat)]
            unsafe fn legacy8_0<const N: usize>(
                nb: usize,
                w: *const u8,
                wsize: usize,
                a: [*const u8; N],
                q: Quants,
            ) -> [f32; N] {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { legacy::<$dot, false, N>(nb, w, wsize, a, q) }
            }
            #[target_feature(enable = $feat)]
            unsafe fn legacy8_1<const N: usize>(
                nb: usize,
                w: *const u8,
                wsize: usize,
                a: [*const u8; N],
                q: Quants,
            ) -> [f32; N] {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { legacy::<$dot, true, N>(nb, w, wsize, a, q) }
            }
            #[target_feature(enable = $feat)]
            unsafe fn k4<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { q45_k::<$dot, false, N>(nb, w, a) }
            }
            #[target_feature(enable = $feat)]
            unsafe fn k5<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { q45_k::<$dot, true, N>(nb, w, a) }
            }
            #[target_feature(enable = $feat)]
            unsafe fn k6<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { q6_k::<$dot, N>(nb, w, a) }
            }

            /// A row kernel and its 1×4 twin (the same per-row arithmetic).
            macro_rules! kernel_fns {
                ($name:ident, $x4:ident, $ty:ident, $act:ident, |$nb:ident, $w:ident, $a:ident| $call:expr) => {
                    pub(crate) fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
                        let $nb = row_blocks(GgmlType::$ty, n, w);
                        row_blocks(GgmlType::$act, n, a);
                        let ($w, $a) = (w.as_ptr(), [a.as_ptr()]);
                        // SAFETY: both rows hold `nb` blocks (checked above); reachable only
                        // through a table handed out after this ISA's features were detected.
                        let [r] = unsafe { $call };
                        r
                    }
                    pub(crate) fn $x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
                        let $nb = row_blocks(GgmlType::$ty, n, w);
                        for c in a {
                            row_blocks(GgmlType::$act, n, c);
                        }
                        let ($w, $a) = (w.as_ptr(), a.map(<[u8]>::as_ptr));
                        // SAFETY: as for the row kernel; all five rows hold `nb` blocks.
                        unsafe { $call }
                    }
                };
            }
            kernel_fns!(vec_dot_q8_0, vec_dot_x4_q8_0, Q8_0, Q8_0, |nb, w, a| legacy8_0(nb, w, 34, a, q8_0_quants));
            kernel_fns!(vec_dot_q4_0, vec_dot_x4_q4_0, Q4_0, Q8_0, |nb, w, a| legacy8_0(nb, w, 18, a, q4_0_quants));
            kernel_fns!(vec_dot_q5_0, vec_dot_x4_q5_0, Q5_0, Q8_0, |nb, w, a| legacy8_0(nb, w, 22, a, q5_0_quants));
            kernel_fns!(vec_dot_q4_1, vec_dot_x4_q4_1, Q4_1, Q8_1, |nb, w, a| legacy8_1(nb, w, 20, a, q4_1_quants));
            kernel_fns!(vec_dot_q5_1, vec_dot_x4_q5_1, Q5_1, Q8_1, |nb, w, a| legacy8_1(nb, w, 24, a, q5_1_quants));
            kernel_fns!(vec_dot_q4_k, vec_dot_x4_q4_k, Q4_K, Q8_K, |nb, w, a| k4(nb, w, a));
            kernel_fns!(vec_dot_q5_k, vec_dot_x4_q5_k, Q5_K, Q8_K, |nb, w, a| k5(nb, w, a));
            kernel_fns!(vec_dot_q6_k, vec_dot_x4_q6_k, Q6_K, Q8_K, |nb, w, a| k6(nb, w, a));
        }
    };
}

instantiate!(plain, false, "neon");
instantiate!(dotprod, true, "neon,dotprod");

/// The 1×8 and 1×4 tiles of the legacy types (dotprod only: the indexed
/// `sdot` is what makes four rows per vector cheap).
pub(crate) mod tiles {
    use super::*;

    macro_rules! tile_fns {
        ($($ty:ident, $size:expr, $quants:ident, $k8:ident => $f8:ident, $k4:ident => $f4:ident;)*) => {$(
            #[target_feature(enable = "neon,dotprod")]
            unsafe fn $k8(nb: usize, w: *const u8, packed: *const u8) -> [f32; 8] {
                // SAFETY: forwarded from the wrapper's checks.
                let [a, b] = unsafe { legacy_tile::<2>(nb, w, $size, packed, $quants) };
                [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
            }
            #[target_feature(enable = "neon,dotprod")]
            unsafe fn $k4(nb: usize, w: *const u8, packed: *const u8) -> [f32; 4] {
                // SAFETY: forwarded from the wrapper's checks.
                unsafe { legacy_tile::<1>(nb, w, $size, packed, $quants)[0] }
            }
            pub(crate) fn $f8(n: usize, w: &[u8], packed: &[u8]) -> [f32; 8] {
                let nb = row_blocks(GgmlType::$ty, n, w);
                assert_eq!(packed.len(), crate::pack::group_bytes(GgmlType::Q8_0, n, 8), "packed group size");
                // SAFETY: `nb` weight blocks and `nb` packed block groups (checked above);
                // reachable only through the DOTPROD table, after detection.
                unsafe { $k8(nb, w.as_ptr(), packed.as_ptr()) }
            }
            pub(crate) fn $f4(n: usize, w: &[u8], packed: &[u8]) -> [f32; 4] {
                let nb = row_blocks(GgmlType::$ty, n, w);
                assert_eq!(packed.len(), crate::pack::group_bytes(GgmlType::Q8_0, n, 4), "packed group size");
                // SAFETY: as for the 8-row tile, with groups of 4 rows.
                unsafe { $k4(nb, w.as_ptr(), packed.as_ptr()) }
            }
        )*};
    }

    tile_fns! {
        Q8_0, 34, q8_0_quants, k_q8_0_x8 => tile8_q8_0, k_q8_0_t4 => tile4_q8_0;
        Q4_0, 18, q4_0_quants, k_q4_0_x8 => tile8_q4_0, k_q4_0_t4 => tile4_q4_0;
        Q5_0, 22, q5_0_quants, k_q5_0_x8 => tile8_q5_0, k_q5_0_t4 => tile4_q5_0;
    }
}

// ------------------------------------------------------------------- floats

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

// --------------------------------------------------------------- quantizers

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

#[target_feature(enable = "neon")]
unsafe fn k_quantize_q8(nb: usize, x: *const f32, y: *mut u8, with_sum: bool) {
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

#[target_feature(enable = "neon")]
unsafe fn k_quantize_q8_k(nb: usize, x: *const f32, y: *mut u8) {
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

fn check_quantize(src: &[f32], dst: &[u8], ty: GgmlType) -> usize {
    let bs = ty.block_size();
    assert!(
        src.len().is_multiple_of(bs),
        "{} values is not a whole number of blocks",
        src.len()
    );
    assert_eq!(
        dst.len(),
        src.len() / bs * ty.type_size(),
        "activation buffer size"
    );
    src.len() / bs
}

pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let nb = check_quantize(src, dst, GgmlType::Q8_0);
    // SAFETY: `nb` whole blocks in and out (checked above); reachable only after NEON detection.
    unsafe { k_quantize_q8(nb, src.as_ptr(), dst.as_mut_ptr(), false) }
}
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let nb = check_quantize(src, dst, GgmlType::Q8_1);
    // SAFETY: as for `quantize_q8_0`.
    unsafe { k_quantize_q8(nb, src.as_ptr(), dst.as_mut_ptr(), true) }
}
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let nb = check_quantize(src, dst, GgmlType::Q8_K);
    // SAFETY: as for `quantize_q8_0`.
    unsafe { k_quantize_q8_k(nb, src.as_ptr(), dst.as_mut_ptr()) }
}
