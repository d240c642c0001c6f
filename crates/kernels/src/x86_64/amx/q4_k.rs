//! The AMX stored Q4_K panel kernel. Each sub-block's 6-bit scale `s`
//! splits as `8·s_h + s_l` with both below 8, so `q·s_l` and `q·s_h` fit a
//! signed byte. Two expanded weight tiles per 64 values then carry the
//! scales, and the tile unit sums a whole super-block with no stop per
//! sub-block: `Σ_l + 8·Σ_h` is the exact integer the AVX-512 kernel builds
//! with `vpmulld`. The float steps after it and the mins' chain are that
//! kernel's, so every output keeps its bits.

use super::configure;
use super::tiles::{Expanded, Sums, WINDOW, signed_unsigned, signed_unsigned2};
use crate::panel::{MANY_TOKENS, Q4_K_ACT, Q4_K_ACT_QUANTS, STORED_Q4_K_BLOCK};
use crate::x86_64::avx512::{load16_f16, load512, q4_k_min_sums, q4_k_scale, stored_q4_k_meta};
use crate::x86_64::common::f32_at;
use core::arch::x86_64::*;

/// Stored super-block `p`'s quants times its scales' low and high three
/// bits, as tiles: chunk `c` holds sub-blocks `2c` (low nibbles, tile rows
/// 0-7) and `2c + 1` (high nibbles, rows 8-15).
#[inline(always)]
unsafe fn expand(p: *const u8, e: &mut Expanded) {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512
    // F/BW enabled in every caller.
    unsafe {
        let meta = stored_q4_k_meta(p);
        let low = _mm512_set1_epi8(0x0F);
        let seven = _mm512_set1_epi32(7);
        // A lane's scale in both of its i16 halves, so that `vpmullw`
        // multiplies each of the lane's four bytes (products below 2^7, so
        // no byte carries into the next).
        let words = |x: __m512i| _mm512_or_si512(x, _mm512_slli_epi32::<16>(x));
        for c in 0..4 {
            let (s0, s1) = (q4_k_scale(&meta, 2 * c), q4_k_scale(&meta, 2 * c + 1));
            let l = [
                words(_mm512_and_si512(s0, seven)),
                words(_mm512_and_si512(s1, seven)),
            ];
            let h = [
                words(_mm512_srli_epi32::<3>(s0)),
                words(_mm512_srli_epi32::<3>(s1)),
            ];
            for k in 0..8 {
                let v = load512(p.add(512 * c + 64 * k));
                let q = [
                    _mm512_and_si512(v, low),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(v), low),
                ];
                for half in 0..2 {
                    let row = 8 * half + k;
                    let lo = _mm512_mullo_epi16(q[half], l[half]);
                    let hi = _mm512_mullo_epi16(q[half], h[half]);
                    _mm512_store_si512(e.0[2 * c][row].as_mut_ptr().cast(), lo);
                    _mm512_store_si512(e.0[2 * c + 1][row].as_mut_ptr().cast(), hi);
                }
            }
        }
    }
}

/// A stored Q4_K panel of `nb` super-blocks against `groups` groups of
/// [`MANY_TOKENS`] prepared rows `arow` bytes apart: per super-block the
/// weights expanded once, then for each group the tile sums and
/// `acc = fma(d_w·d_a, Σ_l + 8·Σ_h, acc)` as the AVX-512 kernel steps (`out`
/// holds the accumulators meanwhile); the mins' chain is that kernel's
/// ([`q4_k_min_sums`]).
#[inline(always)]
unsafe fn q4_k_many(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    groups: usize,
    out: *mut f32,
) {
    const T: usize = MANY_TOKENS;
    // SAFETY: `nb` stored super-blocks, `T·groups` prepared rows of `nb`
    // blocks and `16·T·groups` floats of output (the wrapper's checks); the
    // table holding this kernel is handed out only where `super::usable()`
    // holds.
    unsafe {
        configure();
        let mut sums = [Sums::<T>::new(), Sums::<T>::new()];
        for o in 0..16 * T * groups {
            *out.add(o) = 0.0;
        }
        let y = |g: usize, i: usize| acts.add(g * T * arow + i * Q4_K_ACT);
        // Token group `g`'s float step of super-block `i` from its sums.
        let step = |g: usize, i: usize, dw: __m512, sums: &Sums<T>| {
            for t in 0..T {
                let l = _mm512_load_si512(sums.0[0][t].as_ptr().cast());
                let h = _mm512_load_si512(sums.0[1][t].as_ptr().cast());
                let s = _mm512_add_epi32(l, _mm512_slli_epi32::<3>(h));
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(y(g, i).add(t * arow))));
                let o = out.add(16 * (g * T + t));
                _mm512_storeu_ps(
                    o,
                    _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), _mm512_loadu_ps(o)),
                );
            }
        };
        // A window of super-blocks expanded at a time, small enough to stay
        // in L1 while every group of tokens multiplies it.
        let mut e: [Expanded; WINDOW] = std::array::from_fn(|_| Expanded::new());
        let mut dws = [_mm512_setzero_ps(); WINDOW];
        for i0 in (0..nb).step_by(WINDOW) {
            let i1 = (i0 + WINDOW).min(nb);
            for ((i, e), dw) in (i0..i1).zip(e.iter_mut()).zip(dws.iter_mut()) {
                let p = panel.add(i * STORED_Q4_K_BLOCK);
                expand(p, e);
                *dw = load16_f16(p.add(2240));
            }
            let mut g = 0;
            while g < groups {
                let two = g + 1 < groups;
                for ((i, e), &dw) in (i0..i1).zip(e.iter()).zip(dws.iter()) {
                    if two {
                        let q = |g| y(g, i).add(Q4_K_ACT_QUANTS);
                        signed_unsigned2::<T>([q(g), q(g + 1)], arow, e, &mut sums);
                    } else {
                        signed_unsigned::<T>(y(g, i).add(Q4_K_ACT_QUANTS), arow, e, &mut sums[0]);
                    }
                    for (h, sums) in sums.iter().enumerate().take(1 + two as usize) {
                        step(g + h, i, dw, sums);
                    }
                }
                g += 1 + two as usize;
            }
        }
        for g in 0..groups {
            let accm = q4_k_min_sums::<T, true>(nb, panel, acts.add(g * T * arow), arow);
            for (t, accm) in accm.into_iter().enumerate() {
                let o = out.add(16 * (g * T + t));
                _mm512_storeu_ps(o, _mm512_sub_ps(_mm512_loadu_ps(o), accm));
            }
        }
    }
}

/// [`PanelFns::many`](crate::panel::PanelFns::many) on stored Q4_K panels:
/// `out` holds sixteen outputs for each of a whole number of groups of
/// [`MANY_TOKENS`] tokens.
pub(crate) fn panel_many_stored_q4_k(cols: usize, panel: &[u8], acts: &[u8], out: &mut [f32]) {
    const NAME: &str = "AMX stored Q4_K";
    target_fns! { avx512:
        unsafe fn entry(nb: usize, panel: *const u8, acts: *const u8, arow: usize, groups: usize, out: *mut f32) {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { q4_k_many(nb, panel, acts, arow, groups, out) }
        }
    }
    let tokens = out.len() / 16;
    assert!(
        tokens.is_multiple_of(MANY_TOKENS),
        "{NAME}: {tokens} tokens is not whole groups"
    );
    let (nb, arow) = crate::x86_64::common::panel_call(
        NAME,
        256,
        cols,
        panel,
        STORED_Q4_K_BLOCK,
        acts,
        Q4_K_ACT,
        out,
        tokens,
    );
    // SAFETY: `nb` stored super-blocks, the tokens' prepared rows and their
    // outputs (checked above); reachable only through the AMX table, handed
    // out after the CPU's features and the OS's tile state were checked.
    unsafe {
        entry(
            nb,
            panel.as_ptr(),
            acts.as_ptr(),
            arow,
            tokens / MANY_TOKENS,
            out.as_mut_ptr(),
        )
    }
}
