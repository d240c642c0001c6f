//! AVX2 kernels over stored Q4_K and Q6_K panels
//! ([`crate::panel::StoredPanelFns`]): one token, a few tokens, and
//! unpacking to AVX2's panels for large batches.
//!
//! A stored layout's 64-byte runs hold one dword per row of sixteen, so a
//! 256-bit load takes the dwords of eight rows (half `h`: rows `8h..8h + 8`),
//! as AVX2's panels do. Every kernel forms each row's exact integer sums and
//! then the row kernel's float steps, so a token gets the row kernel's bits.

use super::panel::{G, bcast, float_step, q6_k_block};
use super::unpack::store;
use super::*;
use crate::panel::{
    PANEL_TOKENS, Q4_K_ACT, Q4_K_ACT_QUANTS, Q4_K_ACT_SUMS, Q6_K_ACT, Q6_K_BLOCK, Q8_K_BYTES,
    STORED_Q4_K_BLOCK, STORED_Q6_K_BLOCK,
};
use crate::prefetch::stream_ahead;
use crate::x86_64::stored_call::*;

/// A byte shuffle that gives each i32 lane the bytes `pick` names of its
/// own dword (0..4; [`Z`]: a zero).
#[inline(always)]
unsafe fn lane_pick(pick: [u8; 4]) -> __m256i {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        let base = _mm256_setr_epi32(
            0,
            0x0404_0404,
            0x0808_0808,
            0x0C0C_0C0C,
            0,
            0x0404_0404,
            0x0808_0808,
            0x0C0C_0C0C,
        );
        _mm256_or_si256(base, _mm256_set1_epi32(i32::from_le_bytes(pick)))
    }
}

/// A zero byte in a [`lane_pick`].
const Z: u8 = 0x80;

// ------------------------------------------------------------------- Q4_K

/// Half `h` of a stored Q4_K super-block's 6-bit scales and mins as bytes,
/// one row per i32 lane: scales 0..4, scales 4..8, mins 0..4, mins 4..8
/// (ggml's `get_scale_min_k4` on the row's three dwords).
#[inline(always)]
unsafe fn q4_k_meta(p: *const u8, h: usize) -> [__m256i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX2.
    unsafe {
        let d0 = load256(p.add(2048 + 32 * h));
        let d1 = load256(p.add(2112 + 32 * h));
        let d2 = load256(p.add(2176 + 32 * h));
        let six = _mm256_set1_epi8(0x3F);
        let low = _mm256_set1_epi8(0x0F);
        let top = _mm256_set1_epi8(0x30);
        [
            _mm256_and_si256(d0, six),
            _mm256_or_si256(
                _mm256_and_si256(d2, low),
                _mm256_and_si256(_mm256_srli_epi32::<2>(d0), top),
            ),
            _mm256_and_si256(d1, six),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32::<4>(d2), low),
                _mm256_and_si256(_mm256_srli_epi32::<2>(d1), top),
            ),
        ]
    }
}

/// Sub-block `s`'s scale of a [`q4_k_meta`] as the i16 pair (scale, scale).
#[inline(always)]
unsafe fn q4_k_scale_pair(meta: &[__m256i; 4], s: usize) -> __m256i {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        let b = (s % 4) as u8;
        _mm256_shuffle_epi8(meta[s / 4], lane_pick([b, Z, b, Z]))
    }
}

/// Sub-blocks `2q` and `2q + 1`'s mins of a [`q4_k_meta`] as an i16 pair.
#[inline(always)]
unsafe fn q4_k_min_pair(meta: &[__m256i; 4], q: usize) -> __m256i {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        let b = (2 * q % 4) as u8;
        _mm256_shuffle_epi8(meta[2 + q / 2], lane_pick([b, Z, b + 1, Z]))
    }
}

/// The exact sums of sub-blocks `2j` (low nibbles) and `2j + 1` (high
/// nibbles) of the stored Q4_K super-block at `p`, halves `hs`, against the
/// `N` prepared blocks `ys`, each scaled and added into `s32[t][h]`. Each
/// i16 sum holds eight dwords of quants 0..15 against i8 activations:
/// at most 8 · 2 · 15 · 128 < 2^15.
#[inline(always)]
unsafe fn q4_k_sub_pair<const N: usize, const H: usize>(
    p: *const u8,
    ys: [*const u8; N],
    j: usize,
    hs: [usize; H],
    meta: &[[__m256i; 4]; 2],
    s32: &mut [[__m256i; 2]; N],
) {
    // SAFETY: a whole stored super-block and prepared blocks (the caller's
    // contract); AVX2 is enabled in every caller.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        let mut lo = [[_mm256_setzero_si256(); H]; N];
        let mut hi = [[_mm256_setzero_si256(); H]; N];
        for k in 0..8 {
            let a: [[__m256i; 2]; N] = std::array::from_fn(|t| {
                let y = ys[t].add(Q4_K_ACT_QUANTS + 64 * j + 4 * k);
                [bcast(y), bcast(y.add(32))]
            });
            for (x, &h) in hs.iter().enumerate() {
                let q = load256(p.add(512 * j + 64 * k + 32 * h));
                let wl = _mm256_and_si256(q, m4);
                let wh = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                for t in 0..N {
                    lo[t][x] = _mm256_add_epi16(lo[t][x], _mm256_maddubs_epi16(wl, a[t][0]));
                    hi[t][x] = _mm256_add_epi16(hi[t][x], _mm256_maddubs_epi16(wh, a[t][1]));
                }
            }
        }
        for (x, &h) in hs.iter().enumerate() {
            let sl = q4_k_scale_pair(&meta[h], 2 * j);
            let sh = q4_k_scale_pair(&meta[h], 2 * j + 1);
            for t in 0..N {
                let m = _mm256_add_epi32(
                    _mm256_madd_epi16(lo[t][x], sl),
                    _mm256_madd_epi16(hi[t][x], sh),
                );
                s32[t][h] = _mm256_add_epi32(s32[t][h], m);
            }
        }
    }
}

/// One stored Q4_K super-block at `p` against `N` prepared blocks `ys`:
/// the row kernel's two chains per row, `acc = fma(d_w·d_a, Σ, acc)` over
/// the scaled sums and `accm = fma(dmin_w·d_a, Σm, accm)` over the mins.
/// One token reads both halves per quant step (each broadcast meets both);
/// more read one half at a time, which keeps their sums in registers.
#[inline(always)]
unsafe fn q4_k_block<const N: usize>(
    p: *const u8,
    ys: [*const u8; N],
    acc: &mut [[__m256; 2]; N],
    accm: &mut [[__m256; 2]; N],
) {
    // SAFETY: a whole stored super-block and prepared blocks (the caller's
    // contract); AVX2/FMA/F16C are enabled in every caller.
    unsafe {
        let meta = [q4_k_meta(p, 0), q4_k_meta(p, 1)];
        let mut s32 = [[_mm256_setzero_si256(); 2]; N];
        for j in 0..4 {
            if N == 1 {
                q4_k_sub_pair::<N, 2>(p, ys, j, [0, 1], &meta, &mut s32);
            } else {
                for h in 0..2 {
                    q4_k_sub_pair::<N, 1>(p, ys, j, [h], &meta, &mut s32);
                }
            }
        }
        for h in 0..2 {
            let mut m32 = [_mm256_setzero_si256(); N];
            for q in 0..4 {
                let mins = q4_k_min_pair(&meta[h], q);
                for t in 0..N {
                    let a = bcast(ys[t].add(Q4_K_ACT_SUMS + 4 * q));
                    m32[t] = _mm256_add_epi32(m32[t], _mm256_madd_epi16(mins, a));
                }
            }
            let d = load8_f16(p.add(2240 + 16 * h));
            let dmin = load8_f16(p.add(2272 + 16 * h));
            for t in 0..N {
                acc[t][h] = float_step(acc[t][h], d, ys[t], s32[t][h]);
                accm[t][h] = float_step(accm[t][h], dmin, ys[t], m32[t]);
            }
        }
    }
}

/// A stored Q4_K panel of `nb` super-blocks against `N` prepared rows from
/// `acts` (`arow` bytes apart) into `out[16·t + r]`, each super-block's
/// bytes prefetched `ahead` further on.
#[inline(always)]
unsafe fn q4_k_stored_panel<const N: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: `nb` stored super-blocks, `N` prepared rows and `16·N` outputs
    // (the wrappers' checks); AVX2/FMA/F16C are enabled in every caller.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        let mut accm = [[_mm256_setzero_ps(); 2]; N];
        for i in 0..nb {
            let p = panel.add(i * STORED_Q4_K_BLOCK);
            stream_ahead(p, ahead, STORED_Q4_K_BLOCK);
            let ys = std::array::from_fn(|t| acts.add(t * arow + i * Q4_K_ACT));
            q4_k_block::<N>(p, ys, &mut acc, &mut accm);
        }
        for t in 0..N {
            for h in 0..2 {
                let r = _mm256_sub_ps(acc[t][h], accm[t][h]);
                _mm256_storeu_ps(out.add(16 * t + 8 * h), r);
            }
        }
    }
}

/// A stored Q4_K panel against `T` prepared rows, [`G`] at a time.
#[inline(always)]
unsafe fn q4_k_stored_tokens<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe {
        let ahead = crate::prefetch::batch_ahead();
        for t0 in (0..T).step_by(G) {
            let (a, o) = (acts.add(t0 * arow), out.add(16 * t0));
            q4_k_stored_panel::<G>(nb, panel, a, arow, o, ahead);
        }
    }
}

target_fns! { avx2:
    unsafe fn k_stored_single_q4_k(
        nb: usize,
        panels: *const u8,
        n: usize,
        act: *const u8,
        out: *mut f32,
        ahead: usize,
    ) {
        // SAFETY: `n` panels of `nb` stored super-blocks, a prepared row and
        // `16·n` outputs (the wrapper's checks).
        unsafe {
            for p in 0..n {
                let panel = panels.add(p * nb * STORED_Q4_K_BLOCK);
                q4_k_stored_panel::<1>(nb, panel, act, 0, out.add(16 * p), ahead);
            }
        }
    }

    unsafe fn k_unpack_stored_q4_k(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: `nb` stored super-blocks in and `nb` panel blocks out (the
        // wrapper's checks).
        unsafe { unpack_stored_q4_k_body(nb, panel, out) }
    }
}

/// `nb` stored Q4_K super-blocks → `nb` Q4_K panel blocks
/// ([`crate::panel::Q4_K_BLOCK`]: quants per sub-block, scales as i32, mins
/// as i16 pairs, `d` and `dmin` as f32).
#[inline(always)]
unsafe fn unpack_stored_q4_k_body(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::Q4_K_BLOCK;
    // SAFETY: `nb` blocks each way (the wrapper's checks); AVX2/F16C enabled.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0F);
        for i in 0..nb {
            let p = panel.add(i * STORED_Q4_K_BLOCK);
            let dst = out.add(i * Q4_K_BLOCK);
            for j in 0..4 {
                for k in 0..8 {
                    for h in 0..2 {
                        let q = load256(p.add(512 * j + 64 * k + 32 * h));
                        let lo = _mm256_and_si256(q, m4);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                        store(dst.add(1024 * j + 64 * k + 32 * h), lo);
                        store(dst.add(1024 * j + 512 + 64 * k + 32 * h), hi);
                    }
                }
            }
            for h in 0..2 {
                let meta = q4_k_meta(p, h);
                for s in 0..8 {
                    let b = (s % 4) as u8;
                    let sc = _mm256_shuffle_epi8(meta[s / 4], lane_pick([b, Z, Z, Z]));
                    store(dst.add(4096 + 64 * s + 32 * h), sc);
                }
                for q in 0..4 {
                    store(dst.add(4608 + 64 * q + 32 * h), q4_k_min_pair(&meta, q));
                }
                let d = load8_f16(p.add(2240 + 16 * h));
                let dmin = load8_f16(p.add(2272 + 16 * h));
                _mm256_storeu_ps(dst.add(4864 + 32 * h).cast(), d);
                _mm256_storeu_ps(dst.add(4928 + 32 * h).cast(), dmin);
            }
        }
    }
}

// ------------------------------------------------------------------- Q6_K

/// The four unsigned 6-bit quant dwords (0..63) of stored Q6_K run `8hh + k`,
/// half `h`: values `128hh + 32g + 4k..+4` for g in 0..4.
#[inline(always)]
unsafe fn q6_k_run(p: *const u8, hh: usize, k: usize, h: usize) -> [__m256i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX2.
    unsafe {
        let run = p.add(192 * (8 * hh + k) + 32 * h);
        let (qh, ql0, ql1) = (load256(run), load256(run.add(64)), load256(run.add(128)));
        let m4 = _mm256_set1_epi8(0x0F);
        let top = _mm256_set1_epi8(0x30);
        let nib = |x: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(x), m4);
        [
            _mm256_or_si256(
                _mm256_and_si256(ql0, m4),
                _mm256_and_si256(_mm256_slli_epi16::<4>(qh), top),
            ),
            _mm256_or_si256(
                _mm256_and_si256(ql1, m4),
                _mm256_and_si256(_mm256_slli_epi16::<2>(qh), top),
            ),
            _mm256_or_si256(nib(ql0), _mm256_and_si256(qh, top)),
            _mm256_or_si256(nib(ql1), _mm256_and_si256(_mm256_srli_epi16::<2>(qh), top)),
        ]
    }
}

/// Sub-block `s`'s scale (an i8) of half `h` of a stored Q6_K super-block,
/// sign-extended as the i16 pair (scale, scale).
#[inline(always)]
unsafe fn q6_k_scale_pair(p: *const u8, h: usize, s: usize) -> __m256i {
    // SAFETY: a whole stored super-block (the caller's contract); AVX2.
    unsafe {
        let sc = load256(p.add(3072 + 64 * (s / 4) + 32 * h));
        let b = (s % 4) as u8;
        _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(sc, lane_pick([Z, b, Z, b])))
    }
}

/// One token's exact `Σ_s scale_s · Σ (q − 32)·a` for half `h` of the
/// stored Q6_K super-block at `p` against the Q8_K block `y`, with `q` used
/// unsigned and `−32·Σ_s scale_s·Σa` taken from the block's sixteen sums
/// (as the row kernel does). Two dwords per i16 sum: at most
/// 2 · 2 · 63 · 128 < 2^15.
#[inline(always)]
unsafe fn q6_k_single_sum(p: *const u8, y: *const u8, ahead: usize) -> [__m256i; 2] {
    // SAFETY: a whole stored super-block and Q8_K block (the caller's
    // contract); AVX2 is enabled in every caller.
    unsafe {
        let mut s32 = [0, 1].map(|h| {
            let mut off = _mm256_setzero_si256();
            for m in 0..4 {
                let sc = load256(p.add(3072 + 64 * m + 32 * h));
                for pair in 0..2 {
                    let b = 2 * pair as u8;
                    let scs = _mm256_shuffle_epi8(sc, lane_pick([Z, b, Z, b + 1]));
                    let sums = bcast(y.add(260 + 8 * m + 4 * pair));
                    let prod = _mm256_madd_epi16(_mm256_srai_epi16::<8>(scs), sums);
                    off = _mm256_add_epi32(off, prod);
                }
            }
            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(off))
        });
        let part = STORED_Q6_K_BLOCK / 16;
        for hh in 0..2 {
            for half in 0..2 {
                // Per half, the scales of sub-blocks 8hh + 2g + half.
                let sc: [[__m256i; 4]; 2] = [0, 1]
                    .map(|h| std::array::from_fn(|g| q6_k_scale_pair(p, h, 8 * hh + 2 * g + half)));
                for k2 in 0..2 {
                    let mut s16 = [[_mm256_setzero_si256(); 4]; 2];
                    for k in 4 * half + 2 * k2..4 * half + 2 * k2 + 2 {
                        stream_ahead(p.add(part * (8 * hh + k)), ahead, part);
                        let a: [__m256i; 4] =
                            std::array::from_fn(|g| bcast(y.add(4 + 128 * hh + 32 * g + 4 * k)));
                        for (h, s16) in s16.iter_mut().enumerate() {
                            let w = q6_k_run(p, hh, k, h);
                            for ((s, w), a) in s16.iter_mut().zip(w).zip(a) {
                                *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(w, a));
                            }
                        }
                    }
                    for ((s32, s16), sc) in s32.iter_mut().zip(&s16).zip(&sc) {
                        for (&s, &c) in s16.iter().zip(sc) {
                            *s32 = _mm256_add_epi32(*s32, _mm256_madd_epi16(s, c));
                        }
                    }
                }
            }
        }
        s32
    }
}

target_fns! { avx2:
    unsafe fn k_stored_single_q6_k(
        nb: usize,
        panels: *const u8,
        n: usize,
        act: *const u8,
        out: *mut f32,
        ahead: usize,
    ) {
        // SAFETY: `n` panels of `nb` stored super-blocks, `nb` Q8_K blocks and
        // `16·n` outputs (the wrapper's checks).
        unsafe {
            for panel in 0..n {
                let mut acc = [_mm256_setzero_ps(); 2];
                for i in 0..nb {
                    let p = panels.add((panel * nb + i) * STORED_Q6_K_BLOCK);
                    let y = act.add(i * Q8_K_BYTES);
                    let s = q6_k_single_sum(p, y, ahead);
                    for h in 0..2 {
                        acc[h] = float_step(acc[h], load8_f16(p.add(3328 + 16 * h)), y, s[h]);
                    }
                }
                for (h, acc) in acc.into_iter().enumerate() {
                    _mm256_storeu_ps(out.add(16 * panel + 8 * h), acc);
                }
            }
        }
    }

    unsafe fn k_unpack_stored_q6_k(nb: usize, panel: *const u8, out: *mut u8) {
        // SAFETY: `nb` stored super-blocks in and `nb` panel blocks out (the
        // wrapper's checks).
        unsafe {
            for i in 0..nb {
                unpack_stored_q6_k_block(panel.add(i * STORED_Q6_K_BLOCK), out.add(i * Q6_K_BLOCK));
            }
        }
    }
}

/// A stored Q6_K super-block → a Q6_K panel block ([`Q6_K_BLOCK`]: quants
/// `q − 32` per sub-block, scales as i32, the rows' term
/// `Σ_s scale_s · (−128·Σ(q − 32))`, and `d` as f32).
#[inline(always)]
unsafe fn unpack_stored_q6_k_block(p: *const u8, dst: *mut u8) {
    // SAFETY: a whole stored super-block in and panel block out (the
    // callers' contract); AVX2/F16C are enabled in every caller.
    unsafe {
        let (b32, ones) = (_mm256_set1_epi8(32), _mm256_set1_epi8(1));
        for h in 0..2 {
            let mut term = _mm256_setzero_si256();
            for hh in 0..2 {
                for half in 0..2 {
                    // Σ(q − 32) of sub-blocks 8hh + 2g + half as i16 pairs:
                    // at most 8 · 32 per i16.
                    let mut sums = [_mm256_setzero_si256(); 4];
                    for k in 4 * half..4 * half + 4 {
                        for (g, q) in q6_k_run(p, hh, k, h).into_iter().enumerate() {
                            let w = _mm256_sub_epi8(q, b32);
                            let s = 8 * hh + 2 * g + half;
                            store(dst.add(256 * s + 64 * (k % 4) + 32 * h), w);
                            sums[g] = _mm256_add_epi16(sums[g], _mm256_maddubs_epi16(ones, w));
                        }
                    }
                    for (g, sum) in sums.into_iter().enumerate() {
                        let sc = q6_k_scale_pair(p, h, 8 * hh + 2 * g + half);
                        term = _mm256_add_epi32(term, _mm256_madd_epi16(sum, sc));
                    }
                }
            }
            for s in 0..16 {
                let sc = load256(p.add(3072 + 64 * (s / 4) + 32 * h));
                let b = (s % 4) as u8;
                let sc = _mm256_srai_epi32::<24>(_mm256_shuffle_epi8(sc, lane_pick([Z, Z, Z, b])));
                store(dst.add(4096 + 64 * s + 32 * h), sc);
            }
            let term = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<7>(term));
            store(dst.add(5120 + 32 * h), term);
            _mm256_storeu_ps(
                dst.add(5184 + 32 * h).cast(),
                load8_f16(p.add(3328 + 16 * h)),
            );
        }
    }
}

/// A stored Q6_K panel against `T` prepared rows: each super-block
/// unpacked once onto the stack, then multiplied as AVX2's Q6_K panel
/// block, [`G`] tokens at a time.
#[inline(always)]
unsafe fn q6_k_stored_tokens<const T: usize>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: `nb` stored super-blocks, `T` prepared rows and `16·T` outputs
    // (the wrappers' checks); the stack block holds one unpacked super-block.
    unsafe {
        let ahead = crate::prefetch::batch_ahead();
        let mut block = [0u8; Q6_K_BLOCK];
        // Accumulators for up to [`PANEL_TOKENS`] tokens, of which `T` are used.
        let mut acc = [[[_mm256_setzero_ps(); 2]; G]; PANEL_TOKENS / G];
        for i in 0..nb {
            let p = panel.add(i * STORED_Q6_K_BLOCK);
            stream_ahead(p, ahead, STORED_Q6_K_BLOCK);
            unpack_stored_q6_k_block(p, block.as_mut_ptr());
            for (c, acc) in acc.iter_mut().take(T / G).enumerate() {
                let ys = std::array::from_fn(|t| acts.add((G * c + t) * arow + i * Q6_K_ACT));
                q6_k_block(block.as_ptr(), ys, acc);
            }
        }
        for (c, acc) in acc.iter().take(T / G).enumerate() {
            for (t, acc) in acc.iter().enumerate() {
                for (h, &r) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(16 * (G * c + t) + 8 * h), r);
                }
            }
        }
    }
}

kernel_fns! { panels avx2;
    "stored Q4_K", 256, STORED_Q4_K_BLOCK, Q4_K_ACT => panel8_stored_q4_k, panel4_stored_q4_k
        = |nb, panel, acts, arow, out| q4_k_stored_tokens::<T>(nb, panel, acts, arow, out);
    "stored Q6_K", 256, STORED_Q6_K_BLOCK, Q6_K_ACT => panel8_stored_q6_k, panel4_stored_q6_k
        = |nb, panel, acts, arow, out| q6_k_stored_tokens::<T>(nb, panel, acts, arow, out);
}

// The safe wrappers the tables hold, each checking its call.
stored_entry_points! {
    single {
        stored_single_q4_k => SHAPE_Q4_K, k_stored_single_q4_k;
        stored_single_q6_k => SHAPE_Q6_K, k_stored_single_q6_k;
    }
    unpack {
        unpack_stored_q4_k => SHAPE_Q4_K, k_unpack_stored_q4_k;
        unpack_stored_q6_k => SHAPE_Q6_K, k_unpack_stored_q6_k;
    }
}
