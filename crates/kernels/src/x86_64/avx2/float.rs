//! F32 weights against F32 activations: the row kernel, eight rows against
//! one token, and a tile of [`R`] rows against [`T`] tokens, all giving
//! each (row, token) the same bits.
//!
//! Each output is one eight-lane FMA chain (lane `l` adds `w[k]·a[k]` for
//! `k ≡ l (mod 8)`, in order), reduced with [`hsum_f32`]'s tree, then the
//! last `n mod 8` products added one by one. One chain per output is what
//! lets a tile keep twelve outputs in sixteen registers, so that each load
//! feeds three or four multiply-adds; the row kernel alone waits on the
//! chain's latency, so the matmul only uses it for rows left over.

use super::*;
use crate::dispatch::{F32Tile, TileHint};

/// Weight rows of the tile: it reduces them four at a time with [`hsum4`].
const R: usize = 4;
const _: () = assert!(R == 4);
/// Tokens of the tile: its twelve sums, three activation vectors and one
/// weight vector fill the sixteen registers.
const T: usize = 3;

/// The tile, as the tables hold it.
pub(crate) const F32_TILE: F32Tile = F32Tile {
    tile: f32_tile,
    rows: R,
    tokens: T,
};

/// The products past the last whole eight, added one by one to `sum`.
#[inline(always)]
pub(in crate::x86_64) unsafe fn tail(n: usize, w: *const f32, a: *const f32, sum: f32) -> f32 {
    // SAFETY: forwarded from the caller (both rows hold `n` f32).
    unsafe { tail_of::<F32>(n, w.cast(), a.cast(), sum) }
}

/// How a float row's elements load: eight at a time as f32 lanes, or one.
/// F16 and BF16 widen exactly, so a product of two widened values is the
/// product the F32 kernels form, and the bodies here serve all three.
pub(in crate::x86_64) trait FloatElem {
    /// Bytes per element.
    const SIZE: usize;
    /// Eight elements at `p` as f32 lanes.
    unsafe fn load8(p: *const u8) -> __m256;
    /// The element at `p` as f32.
    unsafe fn one(p: *const u8) -> f32;
}

/// [`FloatElem`] of F32 rows.
pub(in crate::x86_64) struct F32;

impl FloatElem for F32 {
    const SIZE: usize = 4;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: the caller passes 32 readable bytes; AVX is enabled in every caller.
        unsafe { _mm256_loadu_ps(p.cast()) }
    }
    #[inline(always)]
    unsafe fn one(p: *const u8) -> f32 {
        // SAFETY: the caller passes four readable bytes (read unaligned: rows lie in
        // byte buffers).
        unsafe { p.cast::<f32>().read_unaligned() }
    }
}

/// [`tail`] for rows of any [`FloatElem`].
#[inline(always)]
pub(in crate::x86_64) unsafe fn tail_of<E: FloatElem>(
    n: usize,
    w: *const u8,
    a: *const u8,
    mut sum: f32,
) -> f32 {
    for i in n / 8 * 8..n {
        // SAFETY: both rows hold `n` elements.
        sum += unsafe { E::one(w.add(i * E::SIZE)) * E::one(a.add(i * E::SIZE)) };
    }
    sum
}

/// One row against one token: one eight-lane chain, [`hsum_f32`], [`tail_of`].
#[inline(always)]
pub(in crate::x86_64) unsafe fn row_body<E: FloatElem>(
    n: usize,
    w: *const u8,
    a: *const u8,
) -> f32 {
    // SAFETY: both rows hold `n` elements (the wrapper's checks).
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for i in (0..n / 8 * 8).step_by(8) {
            let o = i * E::SIZE;
            acc = _mm256_fmadd_ps(E::load8(w.add(o)), E::load8(a.add(o)), acc);
        }
        tail_of::<E>(n, w, a, hsum_f32(acc))
    }
}

/// Eight rows against one token, each with [`row_body`]'s bits; with `HINT`,
/// each row's line `ahead` bytes on is hinted every sixteen values.
#[inline(always)]
pub(in crate::x86_64) unsafe fn rows8_body<E: FloatElem, const HINT: bool>(
    n: usize,
    w: *const u8,
    a: *const u8,
    ahead: usize,
) -> [f32; 8] {
    // SAFETY: eight rows of `n` elements back to back at `w`, `n` at `a`.
    unsafe {
        let row = |r: usize| w.add(r * n * E::SIZE);
        let mut acc = [_mm256_setzero_ps(); 8];
        for i in (0..n / 8 * 8).step_by(8) {
            let o = i * E::SIZE;
            if HINT && i % 16 == 0 {
                for r in 0..8 {
                    hint_l2(row(r).add(o).wrapping_add(ahead));
                }
            }
            let x = E::load8(a.add(o));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(E::load8(row(r).add(o)), x, *acc);
            }
        }
        let mut out = [0.0f32; 8];
        _mm_storeu_ps(out.as_mut_ptr(), hsum4(acc[0], acc[1], acc[2], acc[3]));
        _mm_storeu_ps(
            out.as_mut_ptr().add(4),
            hsum4(acc[4], acc[5], acc[6], acc[7]),
        );
        if !n.is_multiple_of(8) {
            for (r, v) in out.iter_mut().enumerate() {
                *v = tail_of::<E>(n, row(r), a, *v);
            }
        }
        out
    }
}

target_fns! { avx2:
    unsafe fn k_f32_row(n: usize, w: *const f32, a: *const f32) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { row_body::<F32>(n, w.cast(), a.cast()) }
    }
}

target_fns! { avx2:
    unsafe fn k_f32_rows8(n: usize, w: *const f32, a: *const f32, ahead: usize) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if ahead > 0 {
                rows8_body::<F32, true>(n, w.cast(), a.cast(), ahead)
            } else {
                rows8_body::<F32, false>(n, w.cast(), a.cast(), 0)
            }
        }
    }
}

/// The tile; with `HINT`, each row `hint` names has its line `hint.ahead`
/// bytes on hinted every sixteen values (a separate loop, so the plain one
/// keeps its registers).
#[inline(always)]
unsafe fn f32_tile_body<const HINT: bool>(
    n: usize,
    w: *const f32,
    a: *const f32,
    hint: TileHint,
) -> [f32; R * T] {
    // SAFETY: `R` rows of `n` values back to back at `w`, `T` at `a`.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for i in (0..n / 8 * 8).step_by(8) {
            if HINT && i % 16 == 0 {
                for r in 0..R {
                    if hint.rows >> r & 1 != 0 {
                        hint_l2(w.add(r * n + i).cast::<u8>().wrapping_add(hint.ahead));
                    }
                }
            }
            let x: [__m256; T] = std::array::from_fn(|t| _mm256_loadu_ps(a.add(t * n + i)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = _mm256_loadu_ps(w.add(r * n + i));
                for (acc, &x) in acc.iter_mut().zip(&x) {
                    *acc = _mm256_fmadd_ps(wv, x, *acc);
                }
            }
        }
        let sums: [__m128; T] =
            std::array::from_fn(|t| hsum4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
        let mut out = [0.0f32; R * T];
        for (o, sums) in out.chunks_exact_mut(R).zip(sums) {
            _mm_storeu_ps(o.as_mut_ptr(), sums);
        }
        if !n.is_multiple_of(8) {
            for (o, v) in out.iter_mut().enumerate() {
                let (t, r) = (o / R, o % R);
                *v = tail(n, w.add(r * n), a.add(t * n), *v);
            }
        }
        out
    }
}

target_fns! { avx2:
    unsafe fn k_f32_tile(n: usize, w: *const f32, a: *const f32, hint: TileHint) -> [f32; R * T] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if hint.is_none() {
                f32_tile_body::<false>(n, w, a, hint)
            } else {
                f32_tile_body::<true>(n, w, a, hint)
            }
        }
    }
}

/// [`hsum_f32`] of four vectors at once, `[Σa, Σb, Σc, Σd]`, each with its
/// tree: `(v0+v4 + v2+v6) + (v1+v5 + v3+v7)`.
#[inline(always)]
pub(in crate::x86_64) unsafe fn hsum4(a: __m256, b: __m256, c: __m256, d: __m256) -> __m128 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        // Halves added: [a.lo + a.hi | b.lo + b.hi] and the same for c, d.
        let ab = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        );
        let cd = _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(c, d),
            _mm256_permute2f128_ps::<0x31>(c, d),
        );
        // Per 128-bit lane: [s0+s2 of ab, of cd, s1+s3 of ab, of cd].
        let u = _mm256_add_ps(_mm256_unpacklo_ps(ab, cd), _mm256_unpackhi_ps(ab, cd));
        // (s0+s2) + (s1+s3): lane 0 holds [Σa, Σc, ..], lane 1 [Σb, Σd, ..].
        let f = _mm256_add_ps(u, _mm256_permute_ps::<0b01_00_11_10>(u));
        _mm_unpacklo_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps::<1>(f))
    }
}

/// `rows` rows of `n` f32 in `bytes`, as a pointer.
pub(in crate::x86_64) fn f32_rows(n: usize, rows: usize, bytes: &[u8], what: &str) -> *const f32 {
    assert_eq!(bytes.len(), rows * n * 4, "{what}: {rows} rows of {n} f32");
    bytes.as_ptr().cast()
}

pub(crate) fn vec_dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (w, a) = (
        f32_rows(n, 1, w, "weights"),
        f32_rows(n, 1, a, "activations"),
    );
    // SAFETY: one row of `n` values each (checked above); reachable only after AVX2
    // detection.
    unsafe { k_f32_row(n, w, a) }
}

pub(crate) fn vec_dot_rows8_f32(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    let (w, a) = (
        f32_rows(n, 8, w, "weights"),
        f32_rows(n, 1, a, "activations"),
    );
    // Decoding streams every row from memory once, eight at a time in
    // order: the hints run whole calls ahead.
    let ahead = crate::prefetch::whole_groups(crate::prefetch::f32_ahead(), 8 * n * 4);
    // SAFETY: eight weight rows and one activation row of `n` values (checked above);
    // reachable only after AVX2 detection.
    unsafe { k_f32_rows8(n, w, a, ahead) }
}

/// `out[t · R + r]` is weight row `r`'s dot product with token `t`.
fn f32_tile(n: usize, w: &[u8], a: &[u8], out: &mut [f32], hint: TileHint) {
    let (w, a) = (
        f32_rows(n, R, w, "weights"),
        f32_rows(n, T, a, "activations"),
    );
    // SAFETY: `R` weight rows and `T` activation rows of `n` values (checked above);
    // reachable only after AVX2 detection.
    out.copy_from_slice(&unsafe { k_f32_tile(n, w, a, hint) });
}
