//! BF16 weights against BF16 activations with AVX-512 BF16's `vdpbf16ps`,
//! which multiplies a pair of bf16 values per f32 lane: twice the products
//! of an F32 multiply-add per instruction.
//!
//! Each output is one eight-lane chain: for every sixteen values, lane `l`
//! adds `w[2l+1]·a[2l+1]`, then `w[2l]·a[2l]` (the instruction's order;
//! the products are exact, denormals are flushed). The chain is reduced
//! with AVX2's tree ([`hsum_f32`], [`hsum4`]), then the last `n mod 16`
//! products are added one by one. The row kernel, the eight-row kernel and
//! the tiles all form exactly this, so a token gets the same bits alone or
//! in a batch. It is not the widened F32 chain of CPUs without BF16.

use super::super::avx2::hsum4;
use super::*;
use crate::dispatch::{F32Tile, TileHint};
use half::bf16;

/// Weight rows of the tiles: [`hsum4`] reduces four at a time.
const R: usize = 4;
const _: () = assert!(R == 4);
/// Token pairs of the wide tile: 24 sums, four weight vectors and a pair
/// of activations in flight fit the 32 registers.
const WIDE_PAIRS: usize = 6;
/// Token pairs of the narrow tile, for batches too small to fill the wide one.
const NARROW_PAIRS: usize = 2;

/// The tile of [`NARROW_PAIRS`] token pairs, as the table holds it.
pub(crate) const BF16_TILE_NARROW: F32Tile = F32Tile {
    tile: bf16_tile_narrow,
    rows: R,
    tokens: 2 * NARROW_PAIRS,
};

/// The tile of [`WIDE_PAIRS`] token pairs, as the table holds it.
pub(crate) const BF16_TILE_WIDE: F32Tile = F32Tile {
    tile: bf16_tile_wide,
    rows: R,
    tokens: 2 * WIDE_PAIRS,
};

/// Sixteen bf16 values at `p`.
#[inline(always)]
unsafe fn load16(p: *const u16) -> __m256bh {
    // SAFETY: the caller passes sixteen readable values; a bf16 vector is
    // the same 32 bytes as an integer one.
    unsafe { std::mem::transmute::<__m256i, __m256bh>(_mm256_loadu_si256(p.cast())) }
}

/// Sixteen values at `lo` in the low half and sixteen at `hi` in the high one.
#[inline(always)]
unsafe fn pair(lo: *const u16, hi: *const u16) -> __m512bh {
    // SAFETY: the caller passes sixteen readable values at each; AVX-512F is
    // enabled in every caller.
    unsafe {
        let lo = _mm512_castsi256_si512(_mm256_loadu_si256(lo.cast()));
        let v = _mm512_inserti64x4::<1>(lo, _mm256_loadu_si256(hi.cast()));
        std::mem::transmute::<__m512i, __m512bh>(v)
    }
}

/// Sixteen values at `p` in both halves.
#[inline(always)]
unsafe fn twice(p: *const u16) -> __m512bh {
    // SAFETY: the caller passes sixteen readable values; AVX-512F is enabled
    // in every caller.
    unsafe {
        let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()));
        std::mem::transmute::<__m512i, __m512bh>(v)
    }
}

/// The low and high halves of `v`.
#[inline(always)]
unsafe fn halves(v: __m512) -> (__m256, __m256) {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe {
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        (_mm512_castps512_ps256(v), hi)
    }
}

/// The products past the last whole sixteen, added one by one to `sum`.
#[inline(always)]
unsafe fn tail(n: usize, w: *const u16, a: *const u16, mut sum: f32) -> f32 {
    for i in n / 16 * 16..n {
        // SAFETY: both rows hold `n` values.
        sum += unsafe { bf16::from_bits(*w.add(i)).to_f32() * bf16::from_bits(*a.add(i)).to_f32() };
    }
    sum
}

target_fns! { avx512bf16:
    unsafe fn k_row(n: usize, w: *const u16, a: *const u16) -> f32 {
        // SAFETY: one row of `n` values at each (the wrapper's checks).
        unsafe {
            let mut acc = _mm256_setzero_ps();
            for i in (0..n / 16 * 16).step_by(16) {
                acc = _mm256_dpbf16_ps(acc, load16(w.add(i)), load16(a.add(i)));
            }
            tail(n, w, a, hsum_f32(acc))
        }
    }
}

/// Eight rows against one token, each with [`k_row`]'s bits; with `HINT`,
/// each row's line `ahead` bytes on is hinted once per line read.
#[inline(always)]
unsafe fn rows8_body<const HINT: bool>(
    n: usize,
    w: *const u16,
    a: *const u16,
    ahead: usize,
) -> [f32; 8] {
    // SAFETY: eight rows of `n` values back to back at `w`, `n` at `a`.
    unsafe {
        let row = |r: usize| w.add(r * n);
        let mut acc = [_mm256_setzero_ps(); 8];
        for i in (0..n / 16 * 16).step_by(16) {
            if HINT && i % 32 == 0 {
                for r in 0..8 {
                    hint_l2(row(r).add(i).cast::<u8>().wrapping_add(ahead));
                }
            }
            let x = load16(a.add(i));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_dpbf16_ps(*acc, load16(row(r).add(i)), x);
            }
        }
        let mut out = [0.0f32; 8];
        _mm_storeu_ps(out.as_mut_ptr(), hsum4(acc[0], acc[1], acc[2], acc[3]));
        _mm_storeu_ps(
            out.as_mut_ptr().add(4),
            hsum4(acc[4], acc[5], acc[6], acc[7]),
        );
        if !n.is_multiple_of(16) {
            for (r, v) in out.iter_mut().enumerate() {
                *v = tail(n, row(r), a, *v);
            }
        }
        out
    }
}

target_fns! { avx512bf16:
    unsafe fn k_rows8(n: usize, w: *const u16, a: *const u16, ahead: usize) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if ahead > 0 {
                rows8_body::<true>(n, w, a, ahead)
            } else {
                rows8_body::<false>(n, w, a, 0)
            }
        }
    }
}

/// The tile of `P` token pairs: each 512-bit sum holds two tokens' chains
/// side by side, against the weight row's sixteen values in both halves.
/// With `HINT`, each row `hint` names has its line `hint.ahead` bytes on
/// hinted once per line read (a separate loop, so the plain one keeps its
/// registers).
#[inline(always)]
unsafe fn tile_body<const P: usize, const HINT: bool>(
    n: usize,
    w: *const u16,
    a: *const u16,
    out: &mut [f32],
    hint: TileHint,
) {
    // SAFETY: `R` rows of `n` values back to back at `w`, `2 P` at `a`, and
    // `out` holds `R · 2 P` values (the wrapper's checks).
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        for i in (0..n / 16 * 16).step_by(16) {
            if HINT && i % 32 == 0 {
                for r in 0..R {
                    if hint.rows >> r & 1 != 0 {
                        hint_l2(w.add(r * n + i).cast::<u8>().wrapping_add(hint.ahead));
                    }
                }
            }
            let x: [__m512bh; P] =
                std::array::from_fn(|p| pair(a.add(2 * p * n + i), a.add((2 * p + 1) * n + i)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = twice(w.add(r * n + i));
                for (acc, &x) in acc.iter_mut().zip(&x) {
                    *acc = _mm512_dpbf16_ps(*acc, wv, x);
                }
            }
        }
        for (p, out) in out.chunks_exact_mut(2 * R).enumerate() {
            let [h0, h1, h2, h3] = [0, 1, 2, 3].map(|r| halves(acc[r][p]));
            _mm_storeu_ps(out.as_mut_ptr(), hsum4(h0.0, h1.0, h2.0, h3.0));
            _mm_storeu_ps(out.as_mut_ptr().add(R), hsum4(h0.1, h1.1, h2.1, h3.1));
        }
        if !n.is_multiple_of(16) {
            for (o, v) in out.iter_mut().enumerate() {
                let (t, r) = (o / R, o % R);
                *v = tail(n, w.add(r * n), a.add(t * n), *v);
            }
        }
    }
}

target_fns! { avx512bf16:
    unsafe fn k_tile_narrow(n: usize, w: *const u16, a: *const u16, out: &mut [f32], hint: TileHint) {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if hint.is_none() {
                tile_body::<NARROW_PAIRS, false>(n, w, a, out, hint)
            } else {
                tile_body::<NARROW_PAIRS, true>(n, w, a, out, hint)
            }
        }
    }
}

target_fns! { avx512bf16:
    unsafe fn k_tile_wide(n: usize, w: *const u16, a: *const u16, out: &mut [f32], hint: TileHint) {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if hint.is_none() {
                tile_body::<WIDE_PAIRS, false>(n, w, a, out, hint)
            } else {
                tile_body::<WIDE_PAIRS, true>(n, w, a, out, hint)
            }
        }
    }
}

/// `rows` rows of `n` bf16 values in `bytes`, as a pointer.
fn bf16_rows(n: usize, rows: usize, bytes: &[u8], what: &str) -> *const u16 {
    assert_eq!(bytes.len(), rows * n * 2, "{what}: {rows} rows of {n} bf16");
    bytes.as_ptr().cast()
}

pub(crate) fn vec_dot_bf16_pairs(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (w, a) = (
        bf16_rows(n, 1, w, "weights"),
        bf16_rows(n, 1, a, "activations"),
    );
    // SAFETY: one row of `n` values each (checked above); reachable only
    // through a table handed out after AVX-512 BF16 detection.
    unsafe { k_row(n, w, a) }
}

pub(crate) fn vec_dot_rows8_bf16_pairs(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    let (w, a) = (
        bf16_rows(n, 8, w, "weights"),
        bf16_rows(n, 1, a, "activations"),
    );
    // Decoding streams every row from memory once, eight at a time in
    // order: the hints run whole calls ahead.
    let ahead = crate::prefetch::whole_groups(crate::prefetch::f32_ahead(), 8 * n * 2);
    // SAFETY: eight weight rows and one activation row of `n` values (checked
    // above); reachable only after AVX-512 BF16 detection.
    unsafe { k_rows8(n, w, a, ahead) }
}

/// The checked pointers of a tile call of `P` token pairs.
fn tile_args<const P: usize>(
    n: usize,
    w: &[u8],
    a: &[u8],
    out: &[f32],
) -> (*const u16, *const u16) {
    assert_eq!(out.len(), R * 2 * P, "R · T outputs");
    (
        bf16_rows(n, R, w, "weights"),
        bf16_rows(n, 2 * P, a, "activations"),
    )
}

/// `out[t · R + r]` is weight row `r`'s dot product with token `t`.
fn bf16_tile_narrow(n: usize, w: &[u8], a: &[u8], out: &mut [f32], hint: TileHint) {
    let (w, a) = tile_args::<NARROW_PAIRS>(n, w, a, out);
    // SAFETY: `R` weight rows, `2 P` activation rows of `n` values and `R · 2 P`
    // outputs (checked above); reachable only after AVX-512 BF16 detection.
    unsafe { k_tile_narrow(n, w, a, out, hint) }
}

/// `out[t · R + r]` is weight row `r`'s dot product with token `t`.
fn bf16_tile_wide(n: usize, w: &[u8], a: &[u8], out: &mut [f32], hint: TileHint) {
    let (w, a) = tile_args::<WIDE_PAIRS>(n, w, a, out);
    // SAFETY: as in `bf16_tile_narrow`.
    unsafe { k_tile_wide(n, w, a, out, hint) }
}
