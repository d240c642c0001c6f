//! AVX-512 attention: AVX2's arithmetic in 512-bit vectors, with AVX2's bits.

use super::*;

use crate::attention::{KEY_BLOCK, MAX_HEAD_DIM};
use std::mem::MaybeUninit;

use crate::x86_64::avx2::PREFETCH_BLOCKS;

/// 16 f32 at `p`.
#[inline(always)]
unsafe fn load16_f32(p: *const u8) -> __m512 {
    // SAFETY: the caller passes 64 readable bytes; AVX-512F is enabled.
    unsafe { _mm512_loadu_ps(p.cast()) }
}

/// 16 f16 at `p`, widened (exactly) to f32.
#[inline(always)]
pub(crate) unsafe fn load16_f16(p: *const u8) -> __m512 {
    // SAFETY: the caller passes 32 readable bytes; AVX-512F is enabled.
    unsafe {
        if cfg!(miri) {
            let f: [f32; 16] = std::array::from_fn(|i| fp16_soft(p.add(2 * i)));
            return _mm512_loadu_ps(f.as_ptr());
        }
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
}

/// How [`attend16`] reads key rows (8 values, as AVX2's kernel does) and
/// value rows (16 values), for f32 or f16 rows.
#[derive(Clone, Copy)]
pub(super) struct RowLoads {
    key8: unsafe fn(*const u8) -> __m256,
    value16: unsafe fn(*const u8) -> __m512,
}

pub(super) const LOADS_F32: RowLoads = RowLoads {
    key8: crate::x86_64::avx2::load8_f32,
    value16: load16_f32,
};
pub(super) const LOADS_F16: RowLoads = RowLoads {
    key8: crate::x86_64::avx2::load8_f16,
    value16: load16_f16,
};

/// `a` in the low half of a vector, `b` in the high half.
#[inline(always)]
unsafe fn halves(a: __m256, b: __m256) -> __m512 {
    // SAFETY: AVX-512F is enabled in every kernel calling this.
    unsafe {
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castps_pd(_mm512_castps256_ps512(a)),
            _mm256_castps_pd(b),
        ))
    }
}

/// Scores of keys `j..j + 2P` (`2P` a multiple of 4) for `R` heads into
/// `s[r][j..]`: two keys per vector (one per 256-bit half), so each key's FMA
/// chain over 8-value chunks, and its `hadd` tree, are AVX2's.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn score_pairs<const R: usize, const P: usize, const ESIZE: usize>(
    qd: &[[MaybeUninit<__m512>; MAX_HEAD_DIM / 8]; R],
    hd: usize,
    key: impl Fn(usize) -> *const u8,
    j: usize,
    scale: f32,
    key8: unsafe fn(*const u8) -> __m256,
    s: &mut [[f32; KEY_BLOCK]; R],
) {
    // SAFETY: the caller passes keys `j..j + 2P` of the block, each with `hd` values,
    // `j + 2P ≤ KEY_BLOCK`, and `qd[r][..hd / 8]` written; AVX-512 F/VL, AVX2 and FMA
    // are enabled.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        for c in 0..hd / 8 {
            for pr in 0..P {
                let kv = halves(
                    key8(key(j + 2 * pr).add(8 * c * ESIZE)),
                    key8(key(j + 2 * pr + 1).add(8 * c * ESIZE)),
                );
                for r in 0..R {
                    acc[r][pr] = _mm512_fmadd_ps(qd[r][c].assume_init(), kv, acc[r][pr]);
                }
            }
        }
        for r in 0..R {
            for g in 0..P / 2 {
                let (a, b) = (acc[r][2 * g], acc[r][2 * g + 1]);
                let hi =
                    |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                let four = [
                    _mm512_castps512_ps256(a),
                    hi(a),
                    _mm512_castps512_ps256(b),
                    hi(b),
                ];
                let sv = _mm_mul_ps(crate::x86_64::avx2::hsum4_ps(four), _mm_set1_ps(scale));
                _mm_storeu_ps(s[r].as_mut_ptr().add(j + 4 * g), sv);
            }
        }
    }
}

/// AVX2's attention kernel (`avx2::attend`) with 512-bit vectors and the
/// same bits, for heads of a multiple of 16 values: `R` query heads sharing
/// one kv head against key rows `start..end` (row `j`'s head at `k + j·row`),
/// into `out[r]`. Every head gets AVX2's bits, alone or with others, from
/// f32 or f16 rows (see [`attend16_blocks`]). Twice AVX2's lanes per FMA,
/// since attention takes a large share of prompt processing.
#[inline(always)]
unsafe fn attend16<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    loads: RowLoads,
) {
    use crate::x86_64::avx2::normalize;
    // SAFETY: as for `attend16_blocks`, which this forwards.
    unsafe {
        zero_rows(out, rows.hd);
        let (mut max, mut sum) = ([f32::NEG_INFINITY; R], [0.0f32; R]);
        attend16_blocks::<R, ESIZE>(rows, q, out, loads, &mut max, &mut sum);
        normalize(&sum, out, rows.hd);
    }
}

/// Zeroes `hd` values (a multiple of 16) at each `out[r]`.
#[inline(always)]
pub(super) unsafe fn zero_rows<const R: usize>(out: [*mut f32; R], hd: usize) {
    // SAFETY: the caller passes `hd` writable values at each `out[r]`;
    // AVX-512F is enabled in every caller.
    unsafe {
        for o in out {
            for c in 0..hd / 16 {
                _mm512_storeu_ps(o.add(16 * c), _mm512_setzero_ps());
            }
        }
    }
}

/// The key blocks of [`attend16`]: key rows `start..end` in blocks of
/// `KEY_BLOCK` from `start`, for `R` heads whose running maxima and sums
/// are `max` and `sum` and whose unnormalized outputs are at `out[r]`.
/// Scores take two keys per vector, eight keys per pass (sixteen for a
/// lone head, four for three or more heads, taken four heads at a time:
/// eight or more FMA chains in flight, none spilled), each key's FMA chain
/// and addition tree AVX2's, and the keys past the last whole eight AVX2's
/// single-key path; the block's softmax is AVX2's; the value rows are
/// accumulated into up to four 16-value chunks of every head at a time,
/// each value in key order as AVX2 does. So a
/// head's bits depend only on its query, its keys and where its blocks
/// start, never on the heads beside it: a range may be split at a block
/// boundary and continued with the same `max`, `sum` and `out`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(super) unsafe fn attend16_blocks<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    loads: RowLoads,
    max: &mut [f32; R],
    sum: &mut [f32; R],
) {
    use crate::x86_64::avx2::{score_one, softmax_block};
    let KeyRows {
        hd,
        k,
        v,
        row,
        start,
        end,
        scale,
        softcap,
    } = rows;
    // SAFETY: the wrapper checked `hd` values (a multiple of 16, at most
    // MAX_HEAD_DIM) at each `q[r]` and `out[r]` and that every key and value row of
    // the range holds `hd` elements (so the prefetched rows, all in the range, are
    // in bounds); AVX-512 F/VL, AVX2, FMA and F16C are enabled.
    unsafe {
        let chunks = hd / 16;
        // Each head's 8-value chunks, each in both halves of a vector; only
        // the first `hd / 8` are written and read (zeroing all of them cost
        // every call, decoding's single queries too, 4 KiB per head).
        let mut qd = [[MaybeUninit::<__m512>::uninit(); MAX_HEAD_DIM / 8]; R];
        for r in 0..R {
            for c in 0..hd / 8 {
                let x = _mm256_loadu_ps(q[r].add(8 * c));
                qd[r][c].write(halves(x, x));
            }
        }
        let mut s = [[f32::NEG_INFINITY; KEY_BLOCK]; R];
        let mut p = [[0.0f32; KEY_BLOCK]; R];
        // A kv head's rows in a cache lie a whole cache row apart, a stride
        // the hardware prefetchers follow too slowly to keep decoding's one
        // pass over them streaming; contiguous (widened) rows need no hint.
        let strided = row != hd * ESIZE;
        let mut j0 = start;
        while j0 < end {
            let n = (end - j0).min(KEY_BLOCK);
            if strided && !cfg!(miri) {
                let ahead = j0 + PREFETCH_BLOCKS * KEY_BLOCK;
                for j in ahead..(ahead + KEY_BLOCK).min(end) {
                    for l in (0..hd * ESIZE).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(k.add(j * row + l).cast());
                        _mm_prefetch::<_MM_HINT_T0>(v.add(j * row + l).cast());
                    }
                }
            }
            let key = |j: usize| k.add((j0 + j) * row);
            let mut j = 0;
            while j + 8 <= n {
                if R == 1 && j + 16 <= n {
                    score_pairs::<R, 8, ESIZE>(&qd, hd, key, j, scale, loads.key8, &mut s);
                    j += 16;
                } else if R > 4 && R.is_multiple_of(4) {
                    for r0 in (0..R).step_by(4) {
                        let qs: &[_; 4] = qd[r0..r0 + 4].try_into().unwrap();
                        let ss: &mut [_; 4] = (&mut s[r0..r0 + 4]).try_into().unwrap();
                        score_pairs::<4, 2, ESIZE>(qs, hd, &key, j, scale, loads.key8, ss);
                        score_pairs::<4, 2, ESIZE>(qs, hd, &key, j + 4, scale, loads.key8, ss);
                    }
                    j += 8;
                } else if R >= 3 {
                    score_pairs::<R, 2, ESIZE>(&qd, hd, key, j, scale, loads.key8, &mut s);
                    score_pairs::<R, 2, ESIZE>(&qd, hd, key, j + 4, scale, loads.key8, &mut s);
                    j += 8;
                } else {
                    score_pairs::<R, 4, ESIZE>(&qd, hd, key, j, scale, loads.key8, &mut s);
                    j += 8;
                }
            }
            while j < n {
                score_one::<R, ESIZE>(q, hd, key(j), scale, loads.key8, &mut s, j);
                j += 1;
            }
            softmax_block(&mut s, n, softcap, max, sum, &mut p, out, hd);
            // Values: a few 16-value chunks of all R outputs in registers
            // while the block's value rows stream past, in passes of equal
            // width (up to four chunks, 24 sums) so that each pass's loop
            // is unrolled and none of its sums spills.
            let passes = chunks.div_ceil((24 / R).clamp(1, 4));
            let width = chunks.div_ceil(passes.max(1));
            let mut c = 0;
            while c < chunks {
                let vrows = v.add(j0 * row + 16 * c * ESIZE);
                let outs = out.map(|o| o.add(16 * c));
                match (chunks - c).min(width) {
                    4 => value_chunks::<R, 4, ESIZE>(vrows, row, n, &p, outs, loads),
                    3 => value_chunks::<R, 3, ESIZE>(vrows, row, n, &p, outs, loads),
                    2 => value_chunks::<R, 2, ESIZE>(vrows, row, n, &p, outs, loads),
                    _ => value_chunks::<R, 1, ESIZE>(vrows, row, n, &p, outs, loads),
                }
                c += (chunks - c).min(width);
            }
            j0 += n;
        }
    }
}

/// `W` 16-value chunks at each `out[r]` += `Σ_j p[r][j] · v_j` over the
/// block's `n` value rows (row `j`'s chunks at `v + j·row`), each value in
/// key order.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn value_chunks<const R: usize, const W: usize, const ESIZE: usize>(
    v: *const u8,
    row: usize,
    n: usize,
    p: &[[f32; KEY_BLOCK]; R],
    out: [*mut f32; R],
    loads: RowLoads,
) {
    // SAFETY: the caller passes `n` value rows holding `W` chunks at `v`
    // and `W` chunks at each `out[r]`; AVX-512F is enabled in every caller.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); W]; R];
        for r in 0..R {
            for i in 0..W {
                acc[r][i] = _mm512_loadu_ps(out[r].add(16 * i));
            }
        }
        for j in 0..n {
            let vrow = v.add(j * row);
            let mut vv = [_mm512_setzero_ps(); W];
            for i in 0..W {
                vv[i] = (loads.value16)(vrow.add(16 * i * ESIZE));
            }
            for r in 0..R {
                let pj = _mm512_set1_ps(p[r][j]);
                for i in 0..W {
                    acc[r][i] = _mm512_fmadd_ps(pj, vv[i], acc[r][i]);
                }
            }
        }
        for r in 0..R {
            for i in 0..W {
                _mm512_storeu_ps(out[r].add(16 * i), acc[r][i]);
            }
        }
    }
}

kernel_fns! { attend avx512vl, attend16;
    ATTEND16_F32: 4, LOADS_F32 =>
        z_attend1_f32: 1, z_attend2_f32: 2,
        z_attend3_f32: 3, z_attend4_f32: 4;
    ATTEND16_F16: 2, LOADS_F16 =>
        z_attend1_f16: 1, z_attend2_f16: 2,
        z_attend3_f16: 3, z_attend4_f16: 4;
}

/// [`crate::attention::AttendFn`] in 512-bit vectors (head dimension a
/// multiple of 16); reachable only after AVX-512 F/VL detection.
pub(crate) fn attend_row(args: crate::attention::RowArgs<'_>, out: &mut [f32]) {
    assert!(
        args.head_dim.is_multiple_of(16),
        "heads of {} values",
        args.head_dim
    );
    crate::x86_64::avx2::attend_row_with([ATTEND16_F32, ATTEND16_F16], args, out)
}
