//! Weight panels ([`crate::panel`]) on AVX2: the AVX-512 layouts, multiplied
//! with `vpmaddubsw` in place of `vpdpbusd`.
//!
//! `vpmaddubsw` sums adjacent pairs of `u8 · i8` products into saturating
//! i16 lanes, so each kernel adds as many of them in i16 as the quants' range
//! allows without saturating, then widens once with `vpmaddwd` (by 1, or by
//! the sub-block's scale): on this ISA the widening and the float steps take
//! the same two pipes as `vpmaddubsw`, and every one saved is a multiply-add
//! won. Q8_0 (full 8-bit quants against 8-bit activations) would saturate
//! one pair, so its panel holds i16 quants for `vpmaddwd`.
//!
//! A 256-bit vector holds half a panel (eight rows). Two loads per cycle
//! feed the two `vpmaddubsw` pipes only if each load feeds more than one
//! multiply, so every kernel makes one pass per group of four tokens
//! over both halves, each broadcast activation meeting both halves' quants.
//! Every pass computes its (row, token) results with the row kernel's bits.

use super::*;
use crate::panel::{
    LEGACY_ACT, LEGACY_BLOCK, OFFSET_BLOCK, Q2_K_BLOCK, Q4_K_ACT, Q4_K_ACT_QUANTS, Q4_K_ACT_SUMS,
    Q4_K_BLOCK, Q6_K_ACT, Q6_K_ACT_QUANTS, Q6_K_BLOCK, Q8_0_I16_ACT, Q8_0_I16_BLOCK,
};

/// Tokens per pass.
pub(super) const G: usize = 4;

#[inline(always)]
pub(super) unsafe fn bcast(p: *const u8) -> __m256i {
    // SAFETY: the caller passes four readable bytes.
    unsafe { _mm256_set1_epi32(p.cast::<i32>().read_unaligned()) }
}

#[inline(always)]
unsafe fn bcast_ps(p: *const u8) -> __m256 {
    // SAFETY: the caller passes four readable bytes.
    unsafe { _mm256_set1_ps(p.cast::<f32>().read_unaligned()) }
}

/// `acc + d_w · d_a · Σ` per lane, in the row kernels' order:
/// `fma(d_w·d_a, Σ, acc)`.
#[inline(always)]
pub(super) unsafe fn float_step(acc: __m256, dw: __m256, da: *const u8, sum: __m256i) -> __m256 {
    // SAFETY: `da` has four readable bytes; AVX2/FMA are enabled in the callers.
    unsafe {
        _mm256_fmadd_ps(
            _mm256_mul_ps(dw, bcast_ps(da)),
            _mm256_cvtepi32_ps(sum),
            acc,
        )
    }
}

/// One legacy panel block (both halves) against four tokens' blocks (`ys`):
/// each token's exact sum `Σ(w + o)·a − o·Σa` (with `OFFSET`; without it,
/// Q4_1's and Q5_1's `Σ w·a`), then the row kernel's
/// `acc = fma(d_w·d_a, Σ, acc)` on the block's chain (`acc`). Each broadcast
/// activation meets both halves' quants. `STEPS` quant dwords are summed in
/// i16 before widening.
#[inline(always)]
unsafe fn legacy_block<const STEPS: usize, const OFFSET: bool>(
    p: *const u8,
    ys: [*const u8; G],
    acc: &mut [[__m256; 2]; G],
) {
    // SAFETY: a whole panel block at `p` and a whole prepared block per
    // token (the wrapper's checks); AVX2/FMA are enabled in the callers.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        // The sum starts at `−Σa · 2^shift`, which takes the weights' offset back.
        let mut s32: [[__m256i; 2]; G] = [[_mm256_setzero_si256(); 2]; G];
        if OFFSET {
            for (s, y) in s32.iter_mut().zip(ys) {
                *s = [bcast(y.add(36)); 2];
            }
        }
        for g in (0..8).step_by(STEPS) {
            let mut s16 = [[_mm256_setzero_si256(); 2]; G];
            for k in g..g + STEPS {
                let w = [0, 1].map(|h| load256(p.add(64 * k + 32 * h)));
                for t in 0..G {
                    let a = bcast(ys[t].add(4 * k));
                    for h in 0..2 {
                        let m = _mm256_maddubs_epi16(w[h], a);
                        s16[t][h] = _mm256_add_epi16(s16[t][h], m);
                    }
                }
            }
            for t in 0..G {
                for h in 0..2 {
                    let m = _mm256_madd_epi16(s16[t][h], ones);
                    s32[t][h] = _mm256_add_epi32(s32[t][h], m);
                }
            }
        }
        for h in 0..2 {
            let dw = _mm256_loadu_ps(p.add(512 + 32 * h).cast());
            for t in 0..G {
                acc[t][h] = float_step(acc[t][h], dw, ys[t].add(32), s32[t][h]);
            }
        }
    }
}

/// The block sums of the four tokens from `t0` against a panel of `nb`
/// blocks of `BLOCK` bytes ([`legacy_block`]), in two chains of even and
/// odd blocks: `[chain][token][half]`.
#[inline(always)]
unsafe fn block_chains<const STEPS: usize, const OFFSET: bool, const BLOCK: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    t0: usize,
) -> [[[__m256; 2]; G]; 2] {
    // SAFETY: `nb` panel blocks and four prepared rows from `t0` (the
    // callers' contract); AVX2/FMA are enabled in the callers.
    unsafe {
        let mut acc = [[[_mm256_setzero_ps(); 2]; G]; 2];
        for i in 0..nb {
            let ys = std::array::from_fn(|t| acts.add((t0 + t) * arow + i * LEGACY_ACT));
            legacy_block::<STEPS, OFFSET>(panel.add(i * BLOCK), ys, &mut acc[i % 2]);
        }
        acc
    }
}

/// A legacy panel against `T` tokens, four at a time: even and odd blocks
/// in two chains, added at the end (the row kernels' order).
#[inline(always)]
unsafe fn legacy_panel<const T: usize, const STEPS: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: `nb` panel blocks, `T` prepared rows and `16·T` output floats
    // (the wrapper's checks); AVX2/FMA are enabled in the callers.
    unsafe {
        for t0 in (0..T).step_by(G) {
            let [even, odd] = block_chains::<STEPS, true, LEGACY_BLOCK>(nb, panel, acts, arow, t0);
            for (t, (even, odd)) in even.iter().zip(&odd).enumerate() {
                for (h, (&e, &o)) in even.iter().zip(odd).enumerate() {
                    _mm256_storeu_ps(out.add(16 * (t0 + t) + 8 * h), _mm256_add_ps(e, o));
                }
            }
        }
    }
}

/// A Q4_1 or Q5_1 panel ([`OFFSET_BLOCK`]) against `T` prepared Q8_1 rows,
/// four tokens at a time, with the row kernel's four chains: `d_w·d_a·Σ`
/// and `m_w·s_a`, each over even and odd blocks, then
/// `(even + odd) + (even mins + odd mins)`, the minimum terms in a pass of
/// their own.
#[inline(always)]
unsafe fn offset_panel<const T: usize, const STEPS: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: `nb` panel blocks, `T` prepared rows and `16·T` output floats
    // (the wrapper's checks); AVX2/FMA are enabled in the callers.
    unsafe {
        for t0 in (0..T).step_by(G) {
            let acc = block_chains::<STEPS, false, OFFSET_BLOCK>(nb, panel, acts, arow, t0);
            let mut mins = [[[_mm256_setzero_ps(); 2]; G]; 2];
            for i in 0..nb {
                for h in 0..2 {
                    let mw = _mm256_loadu_ps(panel.add(i * OFFSET_BLOCK + 576 + 32 * h).cast());
                    for (t, min) in mins[i % 2].iter_mut().enumerate() {
                        let y = acts.add((t0 + t) * arow + i * LEGACY_ACT);
                        min[h] = _mm256_fmadd_ps(mw, bcast_ps(y.add(36)), min[h]);
                    }
                }
            }
            for t in 0..G {
                for h in 0..2 {
                    let sum = _mm256_add_ps(acc[0][t][h], acc[1][t][h]);
                    let min = _mm256_add_ps(mins[0][t][h], mins[1][t][h]);
                    _mm256_storeu_ps(out.add(16 * (t0 + t) + 8 * h), _mm256_add_ps(sum, min));
                }
            }
        }
    }
}

/// A Q8_0 i16 panel against `T` tokens, four at a time: per block, each
/// pair of quants (both halves, in registers) meets each token's broadcast
/// pair of activations in `vpmaddwd`; the exact i32 sums then take the row
/// kernel's float step on the block's chain (even or odd), whose
/// accumulators live in memory.
#[inline(always)]
unsafe fn q8_0_panel<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: `nb` panel blocks, `T` prepared rows and `16·T` output floats
    // (the wrapper's checks); AVX2/FMA are enabled in the callers.
    unsafe {
        // [chain][token][half]
        let mut acc = [[[_mm256_setzero_ps(); 2]; T]; 2];
        for i in 0..nb {
            let p = panel.add(i * Q8_0_I16_BLOCK);
            let chain = &mut acc[i % 2];
            for t0 in (0..T).step_by(G) {
                let y: [*const u8; G] =
                    std::array::from_fn(|t| acts.add((t0 + t) * arow + i * Q8_0_I16_ACT));
                let mut s32 = [[_mm256_setzero_si256(); 2]; G];
                for k in 0..16 {
                    let w = [load256(p.add(64 * k)), load256(p.add(64 * k + 32))];
                    for t in 0..G {
                        let a = bcast(y[t].add(4 * k));
                        for h in 0..2 {
                            s32[t][h] = _mm256_add_epi32(s32[t][h], _mm256_madd_epi16(w[h], a));
                        }
                    }
                }
                for (t, s32) in s32.iter().enumerate() {
                    for (h, &s) in s32.iter().enumerate() {
                        let dw = _mm256_loadu_ps(p.add(1024 + 32 * h).cast());
                        let acc = &mut chain[t0 + t][h];
                        *acc = float_step(*acc, dw, y[t].add(64), s);
                    }
                }
            }
        }
        let [even, odd] = acc;
        for (t, (even, odd)) in even.iter().zip(&odd).enumerate() {
            for (h, (&e, &o)) in even.iter().zip(odd).enumerate() {
                _mm256_storeu_ps(out.add(16 * t + 8 * h), _mm256_add_ps(e, o));
            }
        }
    }
}

/// A Q4_K (`SUBS` = 8) or Q2_K (16) panel, both halves, against four
/// tokens: `acc − accm`, the sums of scaled quant products and of scaled
/// mins in two passes (each its own chain, as in the row kernel). Each
/// broadcast activation meets both halves' quants, so a `vpmaddubsw` costs
/// 0.75 loads rather than 1.25. The two panels share their layout: per
/// sub-block its quant dwords, then the scales (4096), the min pairs
/// (`4096 + 64·SUBS`), `d` and `dmin`.
#[inline(always)]
unsafe fn k_pass<const SUBS: usize>(
    nb: usize,
    panel: *const u8,
    ys: [*const u8; G],
) -> [[__m256; 2]; G] {
    // SAFETY: as for [`legacy_block`], with Q4_K or Q2_K panel and prepared blocks.
    unsafe {
        // Quant dwords per sub-block, and where the min pairs and `d` lie.
        let dwords = 256 / SUBS / 4;
        let (mins_at, d_at) = (4096 + 64 * SUBS, 4096 + 96 * SUBS);
        let block = d_at + 128;
        let mut acc = [[_mm256_setzero_ps(); 2]; G];
        for i in 0..nb {
            let p = panel.add(i * block);
            let y: [*const u8; G] = std::array::from_fn(|t| ys[t].add(i * Q4_K_ACT));
            let mut s32 = [[_mm256_setzero_si256(); 2]; G];
            for s in 0..SUBS {
                // At most eight dwords of quants 0..15 against i8 activations:
                // each i16 lane at most 8 · 2 · 15 · 128 < 2^15.
                let mut s16 = [[_mm256_setzero_si256(); 2]; G];
                for k in 0..dwords {
                    let w = [0, 1].map(|h| load256(p.add(64 * (dwords * s + k) + 32 * h)));
                    for t in 0..G {
                        let a = bcast(y[t].add(Q4_K_ACT_QUANTS + 4 * (dwords * s + k)));
                        for h in 0..2 {
                            let m = _mm256_maddubs_epi16(w[h], a);
                            s16[t][h] = _mm256_add_epi16(s16[t][h], m);
                        }
                    }
                }
                for h in 0..2 {
                    // The scale (< 64, an i32 lane) as the i16 pair (scale, scale).
                    let sc = load256(p.add(4096 + 64 * s + 32 * h));
                    let sc = _mm256_or_si256(sc, _mm256_slli_epi32::<16>(sc));
                    for t in 0..G {
                        let m = _mm256_madd_epi16(s16[t][h], sc);
                        s32[t][h] = _mm256_add_epi32(s32[t][h], m);
                    }
                }
            }
            for h in 0..2 {
                let dw = _mm256_loadu_ps(p.add(d_at + 32 * h).cast());
                for t in 0..G {
                    acc[t][h] = float_step(acc[t][h], dw, y[t], s32[t][h]);
                }
            }
        }
        let mut accm = [[_mm256_setzero_ps(); 2]; G];
        for i in 0..nb {
            let p = panel.add(i * block);
            let y: [*const u8; G] = std::array::from_fn(|t| ys[t].add(i * Q4_K_ACT));
            let mut m32 = [[_mm256_setzero_si256(); 2]; G];
            for pair in 0..SUBS / 2 {
                let mins = [0, 1].map(|h| load256(p.add(mins_at + 64 * pair + 32 * h)));
                for t in 0..G {
                    let a = bcast(y[t].add(Q4_K_ACT_SUMS + 4 * pair));
                    for h in 0..2 {
                        let m = _mm256_madd_epi16(mins[h], a);
                        m32[t][h] = _mm256_add_epi32(m32[t][h], m);
                    }
                }
            }
            for h in 0..2 {
                let dmin = _mm256_loadu_ps(p.add(d_at + 64 + 32 * h).cast());
                for t in 0..G {
                    accm[t][h] = float_step(accm[t][h], dmin, y[t], m32[t][h]);
                }
            }
        }
        std::array::from_fn(|t| [0, 1].map(|h| _mm256_sub_ps(acc[t][h], accm[t][h])))
    }
}

const _: () = assert!(4096 + 96 * 8 + 128 == Q4_K_BLOCK && 4096 + 96 * 16 + 128 == Q2_K_BLOCK);

/// A Q6_K panel (both halves) against four tokens; each broadcast pair of
/// activations meets both halves' quants.
#[inline(always)]
unsafe fn q6_k_pass(nb: usize, panel: *const u8, ys: [*const u8; G]) -> [[__m256; 2]; G] {
    // SAFETY: as for [`legacy_block`], with Q6_K panel and prepared blocks.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; G];
        for i in 0..nb {
            let y: [*const u8; G] = std::array::from_fn(|t| ys[t].add(i * Q6_K_ACT));
            q6_k_block(panel.add(i * Q6_K_BLOCK), y, &mut acc);
        }
        acc
    }
}

/// One Q6_K panel block at `p` against four tokens' prepared blocks `y`:
/// each token's exact sum, then `acc = fma(d_w·d_a, Σ, acc)` per half.
#[inline(always)]
pub(super) unsafe fn q6_k_block(p: *const u8, y: [*const u8; G], acc: &mut [[__m256; 2]; G]) {
    // SAFETY: a whole Q6_K panel block at `p` and a whole prepared block per
    // token (the callers' contract); AVX2/FMA are enabled in the callers.
    unsafe {
        // The row's stored term takes the activations' +128 back.
        let mut s32 = [[0, 1].map(|h| load256(p.add(5120 + 32 * h))); G];
        for s in 0..16 {
            // The scale (an i8, sign-extended in its i32 lane) as the i16
            // pair (scale, scale).
            let sc = [0, 1].map(|h| {
                let sc = load256(p.add(4096 + 64 * s + 32 * h));
                _mm256_blend_epi16::<0b1010_1010>(sc, _mm256_slli_epi32::<16>(sc))
            });
            // Two dwords of (a + 128) · (q − 32) per i16 sum: at most
            // 2 · 2 · 255 · 32 < 2^15.
            for j in 0..2 {
                let w0 = [0, 1].map(|h| load256(p.add(256 * s + 128 * j + 32 * h)));
                let w1 = [0, 1].map(|h| load256(p.add(256 * s + 128 * j + 64 + 32 * h)));
                for t in 0..G {
                    let a = y[t].add(Q6_K_ACT_QUANTS + 16 * s + 8 * j);
                    let (a0, a1) = (bcast(a), bcast(a.add(4)));
                    for h in 0..2 {
                        let m0 = _mm256_maddubs_epi16(a0, w0[h]);
                        let m1 = _mm256_maddubs_epi16(a1, w1[h]);
                        let s16 = _mm256_add_epi16(m0, m1);
                        let m = _mm256_madd_epi16(s16, sc[h]);
                        s32[t][h] = _mm256_add_epi32(s32[t][h], m);
                    }
                }
            }
        }
        for h in 0..2 {
            let dw = _mm256_loadu_ps(p.add(5184 + 32 * h).cast());
            for t in 0..G {
                acc[t][h] = float_step(acc[t][h], dw, y[t], s32[t][h]);
            }
        }
    }
}

/// A K-quant panel against `T` tokens, four tokens at a time.
#[inline(always)]
unsafe fn k_panel<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    pass: unsafe fn(usize, *const u8, [*const u8; G]) -> [[__m256; 2]; G],
) {
    // SAFETY: as for [`legacy_panel`].
    unsafe {
        for t0 in (0..T).step_by(G) {
            let ys = std::array::from_fn(|t| acts.add((t0 + t) * arow));
            let r = pass(nb, panel, ys);
            for (t, r) in r.iter().enumerate() {
                for (h, &r) in r.iter().enumerate() {
                    _mm256_storeu_ps(out.add(16 * (t0 + t) + 8 * h), r);
                }
            }
        }
    }
}

target_fns! { avx2:
    unsafe fn q4_k_pass_avx2(nb: usize, panel: *const u8, ys: [*const u8; G]) -> [[__m256; 2]; G] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { k_pass::<8>(nb, panel, ys) }
    }
}

target_fns! { avx2:
    unsafe fn q2_k_pass_avx2(nb: usize, panel: *const u8, ys: [*const u8; G]) -> [[__m256; 2]; G] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { k_pass::<16>(nb, panel, ys) }
    }
}

target_fns! { avx2:
    unsafe fn q6_k_pass_avx2(nb: usize, panel: *const u8, ys: [*const u8; G]) -> [[__m256; 2]; G] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { q6_k_pass(nb, panel, ys) }
    }
}

#[inline(always)]
pub(super) unsafe fn q6_k_panel<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: forwarded from the caller's contract.
    unsafe { k_panel::<T>(nb, panel, acts, arow, out, q6_k_pass_avx2) }
}

#[inline(always)]
pub(super) unsafe fn q4_k_panel<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: forwarded from the caller's contract.
    unsafe { k_panel::<T>(nb, panel, acts, arow, out, q4_k_pass_avx2) }
}

kernel_fns! { panels avx2;
    "Q8_0", 32, Q8_0_I16_BLOCK, Q8_0_I16_ACT => panel8_q8_0, panel4_q8_0
        = |nb, panel, acts, arow, out| q8_0_panel::<T>(nb, panel, acts, arow, out);
    // Q4_0 quants + 8 (0..15): eight dwords per i16 sum, 8 · 2 · 15 · 128 < 2^15.
    "Q4_0", 32, LEGACY_BLOCK, LEGACY_ACT => panel8_q4_0, panel4_q4_0
        = |nb, panel, acts, arow, out| legacy_panel::<T, 8>(nb, panel, acts, arow, out);
    // Q5_0 quants + 16 (0..31): four dwords per i16 sum, 4 · 2 · 31 · 128 < 2^15.
    "Q5_0", 32, LEGACY_BLOCK, LEGACY_ACT => panel8_q5_0, panel4_q5_0
        = |nb, panel, acts, arow, out| legacy_panel::<T, 4>(nb, panel, acts, arow, out);
    // Q4_1 quants (0..15): as Q4_0's.
    "Q4_1", 32, OFFSET_BLOCK, LEGACY_ACT => panel8_q4_1, panel4_q4_1
        = |nb, panel, acts, arow, out| offset_panel::<T, 8>(nb, panel, acts, arow, out);
    // Q5_1 quants (0..31): as Q5_0's.
    "Q5_1", 32, OFFSET_BLOCK, LEGACY_ACT => panel8_q5_1, panel4_q5_1
        = |nb, panel, acts, arow, out| offset_panel::<T, 4>(nb, panel, acts, arow, out);
    // Q2_K quants (0..3): four dwords per i16 sum.
    "Q2_K", 256, Q2_K_BLOCK, Q4_K_ACT => panel8_q2_k, panel4_q2_k
        = |nb, panel, acts, arow, out| k_panel::<T>(nb, panel, acts, arow, out, q2_k_pass_avx2);
    "Q4_K", 256, Q4_K_BLOCK, Q4_K_ACT => panel8_q4_k, panel4_q4_k
        = |nb, panel, acts, arow, out| q4_k_panel::<T>(nb, panel, acts, arow, out);
    "Q6_K", 256, Q6_K_BLOCK, Q6_K_ACT => panel8_q6_k, panel4_q6_k
        = |nb, panel, acts, arow, out| q6_k_panel::<T>(nb, panel, acts, arow, out);
}
