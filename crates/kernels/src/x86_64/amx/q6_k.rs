//! The AMX stored Q6_K panel kernel. A weight `q − 32` times its sub-block's
//! 8-bit scale is an i16 `W` (|W| ≤ 4096); its low byte (unsigned) and high
//! byte (signed) go to two expanded tiles, so `W = lo + 256·hi` and the tile
//! unit sums a whole super-block with no stop per sub-block. Against the
//! prepared activations `a + 128`, `offset + Σ_lo + 256·Σ_hi` is the exact
//! integer the AVX-512 kernel builds with `vpmulld` (the offset takes the
//! 128 back); the float step after it is that kernel's, so every output
//! keeps its bits.

use super::configure;
use super::tiles::{Expanded, Sums, WINDOW, unsigned_mixed, unsigned_mixed2};
use crate::panel::{MANY_TOKENS, Q6_K_ACT, Q6_K_ACT_QUANTS, STORED_Q6_K_BLOCK};
use crate::x86_64::avx512::{load16_f16, stored_q6_k_expand};
use crate::x86_64::common::f32_at;
use core::arch::x86_64::*;

/// Stored super-block `p`'s products `W = (q − 32)·scale` as tiles: chunk
/// `c` (values `64c..64c + 64`, sub-blocks `4c..4c + 4`, four tile rows
/// each) holds their low bytes in tile `2c` and their high bytes in tile
/// `2c + 1`. Returns the rows' `Σ_s scale_s · (−128·Σ(q − 32))`.
#[inline(always)]
unsafe fn expand(p: *const u8, e: &mut Expanded) -> __m512i {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512
    // F/BW and VNNI enabled in every caller.
    unsafe {
        let mut w = [[_mm512_setzero_si512(); 4]; 16];
        let mut sc = [_mm512_setzero_si512(); 16];
        let offset = stored_q6_k_expand(p, &mut w, &mut sc);
        // Odd bytes (and odd i16 halves) of each vector.
        const ODD_BYTES: u64 = 0xAAAA_AAAA_AAAA_AAAA;
        const ODD_WORDS: u32 = 0xAAAA_AAAA;
        for s in 0..16 {
            // The row's scale (a sign-extended i32 lane) in both i16 halves.
            let sc16 = _mm512_mask_blend_epi16(ODD_WORDS, sc[s], _mm512_slli_epi32::<16>(sc[s]));
            for (k, &v) in w[s].iter().enumerate() {
                // Even and odd bytes sign-extended to i16, times the scale.
                let even = _mm512_srai_epi16::<8>(_mm512_slli_epi16::<8>(v));
                let even = _mm512_mullo_epi16(even, sc16);
                let odd = _mm512_mullo_epi16(_mm512_srai_epi16::<8>(v), sc16);
                let lo = _mm512_mask_blend_epi8(ODD_BYTES, even, _mm512_slli_epi16::<8>(odd));
                let hi = _mm512_mask_blend_epi8(ODD_BYTES, _mm512_srli_epi16::<8>(even), odd);
                let (c, row) = (s / 4, 4 * (s % 4) + k);
                _mm512_store_si512(e.0[2 * c][row].as_mut_ptr().cast(), lo);
                _mm512_store_si512(e.0[2 * c + 1][row].as_mut_ptr().cast(), hi);
            }
        }
        offset
    }
}

/// A stored Q6_K panel of `nb` super-blocks against `groups` groups of
/// [`MANY_TOKENS`] prepared rows `arow` bytes apart: per super-block the
/// weights expanded once, then for each group the tile sums and
/// `acc = fma(d_w·d_a, offset + Σ_lo + 256·Σ_hi, acc)` as the AVX-512
/// kernel steps (`out` holds the accumulators meanwhile).
#[inline(always)]
unsafe fn q6_k_many(
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
        let y = |g: usize, i: usize| acts.add(g * T * arow + i * Q6_K_ACT);
        // Token group `g`'s float step of super-block `i` from its sums.
        let step = |g: usize, i: usize, dw: __m512, offset: __m512i, sums: &Sums<T>| {
            for t in 0..T {
                let lo = _mm512_load_si512(sums.0[0][t].as_ptr().cast());
                let hi = _mm512_load_si512(sums.0[1][t].as_ptr().cast());
                let s = _mm512_add_epi32(_mm512_add_epi32(offset, lo), _mm512_slli_epi32::<8>(hi));
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(y(g, i).add(t * arow))));
                let o = out.add(16 * (g * T + t));
                _mm512_storeu_ps(
                    o,
                    _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), _mm512_loadu_ps(o)),
                );
            }
        };
        let mut e: [Expanded; WINDOW] = std::array::from_fn(|_| Expanded::new());
        let mut dws = [_mm512_setzero_ps(); WINDOW];
        let mut offsets = [_mm512_setzero_si512(); WINDOW];
        for i0 in (0..nb).step_by(WINDOW) {
            let i1 = (i0 + WINDOW).min(nb);
            for (((i, e), dw), offset) in (i0..i1).zip(&mut e).zip(&mut dws).zip(&mut offsets) {
                let p = panel.add(i * STORED_Q6_K_BLOCK);
                *offset = expand(p, e);
                *dw = load16_f16(p.add(3328));
            }
            let mut g = 0;
            while g < groups {
                let two = g + 1 < groups;
                for (((i, e), &dw), &offset) in (i0..i1).zip(&e).zip(&dws).zip(&offsets) {
                    if two {
                        let q = |g| y(g, i).add(Q6_K_ACT_QUANTS);
                        unsigned_mixed2::<T>([q(g), q(g + 1)], arow, e, &mut sums);
                    } else {
                        unsigned_mixed::<T>(y(g, i).add(Q6_K_ACT_QUANTS), arow, e, &mut sums[0]);
                    }
                    for (h, sums) in sums.iter().enumerate().take(1 + two as usize) {
                        step(g + h, i, dw, offset, sums);
                    }
                }
                g += 1 + two as usize;
            }
        }
    }
}

/// [`PanelFns::many`](crate::panel::PanelFns::many) on stored Q6_K panels:
/// `out` holds sixteen outputs for each of a whole number of groups of
/// [`MANY_TOKENS`] tokens.
pub(crate) fn panel_many_stored_q6_k(cols: usize, panel: &[u8], acts: &[u8], out: &mut [f32]) {
    const NAME: &str = "AMX stored Q6_K";
    target_fns! { avx512:
        unsafe fn entry(nb: usize, panel: *const u8, acts: *const u8, arow: usize, groups: usize, out: *mut f32) {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { q6_k_many(nb, panel, acts, arow, groups, out) }
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
        STORED_Q6_K_BLOCK,
        acts,
        Q6_K_ACT,
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
