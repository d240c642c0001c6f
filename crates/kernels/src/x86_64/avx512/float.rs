//! F32 weights against F32 activations in 512-bit vectors, with AVX2's
//! arithmetic: a tile of [`R`] rows against [`T`] tokens.
//!
//! Each 512-bit sum holds two tokens' eight-lane FMA chains side by side,
//! against the weight row's eight values repeated in both halves. Each half
//! is then reduced with AVX2's tree and tail, so every output keeps the AVX2
//! row kernel's bits (which the table keeps for single rows) at twice the
//! multiply-adds per instruction.

use super::super::avx2::{f32_rows, hsum4, tail};
use super::*;
use crate::dispatch::{F32Tile, TileHint};

/// Weight rows of the tile: [`hsum4`] reduces four at a time.
const R: usize = 4;
const _: () = assert!(R == 4);
/// Token pairs of the tile: 24 sums, four weight vectors and a pair of
/// activations in flight fit the 32 registers.
const P: usize = 6;
/// Tokens of the tile.
const T: usize = 2 * P;

/// The tile, as the table holds it.
pub(crate) const F32_TILE: F32Tile = F32Tile {
    tile: f32_tile,
    rows: R,
    tokens: T,
};

/// Eight floats at `lo` in the low half and eight at `hi` in the high one.
#[inline(always)]
unsafe fn pair(lo: *const f32, hi: *const f32) -> __m512 {
    // SAFETY: the caller passes eight readable floats at each; AVX-512F is
    // enabled in every caller.
    unsafe {
        let lo = _mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(lo)));
        let hi = _mm256_castps_pd(_mm256_loadu_ps(hi));
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(lo, hi))
    }
}

/// Eight floats at `p` in both halves.
#[inline(always)]
unsafe fn twice(p: *const f32) -> __m512 {
    // SAFETY: the caller passes eight readable floats; AVX-512F is enabled in
    // every caller.
    unsafe { _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p)))) }
}

/// The high half of `v`.
#[inline(always)]
unsafe fn high(v: __m512) -> __m256 {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))) }
}

/// The tile; with `HINT`, each row `hint` names has its line `hint.ahead`
/// bytes on hinted every sixteen values (a separate loop, so the plain one
/// keeps its registers).
#[inline(always)]
unsafe fn f32_tile_body<const HINT: bool>(
    n: usize,
    w: *const f32,
    a: *const f32,
    out: &mut [f32; R * T],
    hint: TileHint,
) {
    // SAFETY: `R` rows of `n` values back to back at `w`, `T` at `a`.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        for i in (0..n / 8 * 8).step_by(8) {
            if HINT && i % 16 == 0 {
                for r in 0..R {
                    if hint.rows >> r & 1 != 0 {
                        hint_l2(w.add(r * n + i).cast::<u8>().wrapping_add(hint.ahead));
                    }
                }
            }
            let x: [__m512; P] =
                std::array::from_fn(|p| pair(a.add(2 * p * n + i), a.add((2 * p + 1) * n + i)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = twice(w.add(r * n + i));
                for (acc, &x) in acc.iter_mut().zip(&x) {
                    *acc = _mm512_fmadd_ps(wv, x, *acc);
                }
            }
        }
        for (p, out) in out.chunks_exact_mut(2 * R).enumerate() {
            let [a0, a1, a2, a3] = [acc[0][p], acc[1][p], acc[2][p], acc[3][p]];
            let lo = hsum4(
                _mm512_castps512_ps256(a0),
                _mm512_castps512_ps256(a1),
                _mm512_castps512_ps256(a2),
                _mm512_castps512_ps256(a3),
            );
            let hi = hsum4(high(a0), high(a1), high(a2), high(a3));
            _mm_storeu_ps(out.as_mut_ptr(), lo);
            _mm_storeu_ps(out.as_mut_ptr().add(R), hi);
        }
        if !n.is_multiple_of(8) {
            for (o, v) in out.iter_mut().enumerate() {
                let (t, r) = (o / R, o % R);
                *v = tail(n, w.add(r * n), a.add(t * n), *v);
            }
        }
    }
}

target_fns! { avx512:
    unsafe fn k_f32_tile(
        n: usize,
        w: *const f32,
        a: *const f32,
        out: &mut [f32; R * T],
        hint: TileHint,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if hint.is_none() {
                f32_tile_body::<false>(n, w, a, out, hint)
            } else {
                f32_tile_body::<true>(n, w, a, out, hint)
            }
        }
    }
}

/// `out[t · R + r]` is weight row `r`'s dot product with token `t`.
fn f32_tile(n: usize, w: &[u8], a: &[u8], out: &mut [f32], hint: TileHint) {
    let (w, a) = (
        f32_rows(n, R, w, "weights"),
        f32_rows(n, T, a, "activations"),
    );
    let out: &mut [f32; R * T] = out.try_into().expect("R · T outputs");
    // SAFETY: `R` weight rows and `T` activation rows of `n` values (checked above);
    // reachable only after AVX-512 detection.
    unsafe { k_f32_tile(n, w, a, out, hint) }
}
