//! Prompt attention on AVX2 as small matrix products: up to [`MAX_ROWS`]
//! query rows of one head at a time.
//!
//! The caller ([`crate::attention`]) transposes a task's key rows once into
//! blocks of [`BLOCK_KEYS`] keys, dimension-major (one vector holds a
//! dimension of eight keys). For a group of rows, three passes:
//! 1. the scores, a rows × 16 product per block (two FMA chains per row fed
//!    by broadcasts of the query's values, no horizontal sum per key), keys
//!    outside a row's range masked to −∞, and each row's maximum;
//! 2. per row, `p = exp(score − max)` and their sum, added eight at a time
//!    from the row's first key;
//! 3. the values, sixteen dimensions of every row's output in registers
//!    while the value rows stream past in key order, each loaded once for
//!    all the rows, then the division by the sum.
//!
//! With the whole row's maximum known before any value is added there is no
//! rescaling, so nothing depends on where blocks fall: a masked key adds an
//! exact zero, and a row's arithmetic depends only on its query and its key
//! range. It gets the same bits whichever rows share its group, and however
//! its keys are placed (a sequence alone or packed in a batch).

use std::arch::x86_64::*;
use std::ops::Range;

use crate::attention::KvRows;

use super::avx2::{exp_ps, hmax_ps, hsum_f32, load8_f16, load8_f32};

/// Keys per block (two 8-lane vectors of scores per row).
pub(crate) const BLOCK_KEYS: usize = 16;
/// Most query rows per call: two score chains each, twelve accumulators.
pub(crate) const MAX_ROWS: usize = 6;

/// A task's keys as blocks from `base`: block `b` at `(b − base)·hd·16`,
/// dimension `d` of its keys at `+16d`; zero where no key is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyBlocks<'a> {
    pub kt: &'a [f32],
    pub base: usize,
    pub hd: usize,
}

/// Rows `q` (`hd` values each) attending keys `ranges` (absolute key
/// indices, inside `kb`'s blocks) into `out`; value row `j` is `hd` values at
/// `off + j·row` of `v`. `scores` is scratch (grown, never shrunk). A row
/// with no keys gets zeros.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_rows(
    kb: KeyBlocks<'_>,
    v: KvRows<'_>,
    off: usize,
    row: usize,
    q: &[&[f32]],
    ranges: &[Range<usize>],
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [&mut [f32]],
) {
    let (rows, hd) = (q.len(), kb.hd);
    assert!(
        (1..=MAX_ROWS).contains(&rows) && ranges.len() == rows && out.len() == rows,
        "{rows} rows"
    );
    assert!(hd > 0 && hd.is_multiple_of(8), "heads of {hd} values");
    assert!(
        q.iter().all(|q| q.len() == hd) && out.iter().all(|o| o.len() == hd),
        "rows of {hd} values"
    );
    let Some(span) = ranges
        .iter()
        .filter(|r| !r.is_empty())
        .cloned()
        .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
    else {
        out.iter_mut().for_each(|o| o.fill(0.0));
        return;
    };
    let kt_blocks = kb.kt.len() / (hd * BLOCK_KEYS);
    let (b0, b1) = (span.start / BLOCK_KEYS, span.end.div_ceil(BLOCK_KEYS));
    assert!(
        b0 >= kb.base && b1 <= kb.base + kt_blocks,
        "keys {span:?} outside blocks {}..{}",
        kb.base,
        kb.base + kt_blocks
    );
    let (vp, vlen, esize) = match v {
        KvRows::F32(v) => (v.as_ptr().cast::<u8>(), v.len(), 4),
        KvRows::F16(v) => (v.as_ptr().cast::<u8>(), v.len(), 2),
    };
    assert!(
        (span.end - 1) * row + off + hd <= vlen,
        "value rows {span:?}"
    );
    let need = rows * (b1 - b0) * BLOCK_KEYS;
    if scores.len() < need {
        scores.resize(need, 0.0);
    }
    let ranges: [(usize, usize); MAX_ROWS] =
        std::array::from_fn(|r| ranges.get(r).map_or((0, 0), |x| (x.start, x.end)));
    let qp: [*const f32; MAX_ROWS] =
        std::array::from_fn(|r| q.get(r).map_or(std::ptr::null(), |q| q.as_ptr()));
    let op: [*mut f32; MAX_ROWS] = std::array::from_fn(|r| {
        out.get_mut(r)
            .map_or(std::ptr::null_mut(), |o| o.as_mut_ptr())
    });
    let args = Args {
        hd,
        kt: kb.kt.as_ptr(),
        base: kb.base,
        v: vp.wrapping_add(off * esize),
        row: row * esize,
        span: (span.start, span.end),
        scale,
        scores: scores.as_mut_ptr(),
    };
    macro_rules! call {
        ($r:literal) => {{
            let (q, ranges, out) = (
                qp[..$r].try_into().unwrap(),
                ranges[..$r].try_into().unwrap(),
                op[..$r].try_into().unwrap(),
            );
            // SAFETY: `$r` rows of `hd` values at `q`/`out` (distinct `&mut` slices
            // for the outputs), the blocks of `span` inside `kt`, its value rows
            // inside `v`, and `$r` rows of `(b1 − b0)·16` scores (checked above);
            // reachable only through ISAs whose detection includes AVX2, FMA and
            // F16C.
            unsafe {
                if esize == 4 {
                    k_rows::<$r, 4>(args, q, ranges, out, load8_f32)
                } else {
                    k_rows::<$r, 2>(args, q, ranges, out, load8_f16)
                }
            }
        }};
    }
    match rows {
        1 => call!(1),
        2 => call!(2),
        3 => call!(3),
        4 => call!(4),
        5 => call!(5),
        _ => call!(6),
    }
}

#[derive(Clone, Copy)]
struct Args {
    hd: usize,
    kt: *const f32,
    base: usize,
    /// The first value row's head, and the bytes between rows.
    v: *const u8,
    row: usize,
    /// The union of the rows' key ranges.
    span: (usize, usize),
    scale: f32,
    scores: *mut f32,
}

#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)]
unsafe fn k_rows<const R: usize, const ESIZE: usize>(
    a: Args,
    q: [*const f32; R],
    ranges: [(usize, usize); R],
    out: [*mut f32; R],
    load8: unsafe fn(*const u8) -> __m256,
) {
    // SAFETY: see `attend_rows`: every pointer covers what is read or written.
    unsafe {
        let Args {
            hd,
            kt,
            base,
            v,
            row,
            span,
            scale,
            scores,
        } = a;
        let lanes = [
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15),
        ];
        let (sc, ninf) = (_mm256_set1_ps(scale), _mm256_set1_ps(f32::NEG_INFINITY));
        let (b0, b1) = (span.0 / BLOCK_KEYS, span.1.div_ceil(BLOCK_KEYS));
        let width = (b1 - b0) * BLOCK_KEYS;
        let s_row = |r: usize| scores.add(r * width);
        // 1. Scores, masked, and each row's maximum.
        let mut mx = [ninf; R];
        for b in b0..b1 {
            let j0 = BLOCK_KEYS * b;
            let kb = kt.add((b - base) * hd * BLOCK_KEYS);
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            for d in 0..hd {
                let k0 = _mm256_loadu_ps(kb.add(BLOCK_KEYS * d));
                let k1 = _mm256_loadu_ps(kb.add(BLOCK_KEYS * d + 8));
                for r in 0..R {
                    let qd = _mm256_broadcast_ss(&*q[r].add(d));
                    acc[r][0] = _mm256_fmadd_ps(qd, k0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(qd, k1, acc[r][1]);
                }
            }
            for r in 0..R {
                let (s, e) = ranges[r];
                // The row's keys in this block, relative to it (as i32 bounds).
                let lo = _mm256_set1_epi32(s.clamp(j0, j0 + BLOCK_KEYS) as i32 - j0 as i32 - 1);
                let hi = _mm256_set1_epi32(e.clamp(j0, j0 + BLOCK_KEYS) as i32 - j0 as i32);
                for h in 0..2 {
                    let inside = _mm256_and_si256(
                        _mm256_cmpgt_epi32(lanes[h], lo),
                        _mm256_cmpgt_epi32(hi, lanes[h]),
                    );
                    let sv = _mm256_blendv_ps(
                        ninf,
                        _mm256_mul_ps(acc[r][h], sc),
                        _mm256_castsi256_ps(inside),
                    );
                    _mm256_storeu_ps(s_row(r).add(j0 - BLOCK_KEYS * b0 + 8 * h), sv);
                    mx[r] = _mm256_max_ps(mx[r], sv);
                }
            }
        }
        // 2. Probabilities and their sums, from each row's first key.
        let mut inv = [0.0f32; R];
        for r in 0..R {
            let m = hmax_ps(mx[r]);
            let sr = s_row(r);
            if m == f32::NEG_INFINITY {
                // No keys (or only −∞ scores): zeros, and a zero output.
                for c in (0..width).step_by(8) {
                    _mm256_storeu_ps(sr.add(c), _mm256_setzero_ps());
                }
                continue;
            }
            let mv = _mm256_set1_ps(m);
            for c in (0..width).step_by(8) {
                let p = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sr.add(c)), mv));
                _mm256_storeu_ps(sr.add(c), p);
            }
            let (s, e) = (ranges[r].0 - BLOCK_KEYS * b0, ranges[r].1 - BLOCK_KEYS * b0);
            let mut psum = _mm256_setzero_ps();
            let mut i = s;
            while i < e {
                let n = (e - i).min(8) as i32;
                let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes[0]);
                psum = _mm256_add_ps(psum, _mm256_maskload_ps(sr.add(i), mask));
                i += 8;
            }
            let sum = hsum_f32(psum);
            if sum > 0.0 {
                inv[r] = 1.0 / sum;
            }
        }
        // 3. Values in key order, then the division by the sum.
        let mut c = 0;
        while c < hd {
            let two = c + 16 <= hd;
            let mut o = [[_mm256_setzero_ps(); 2]; R];
            for j in span.0..span.1 {
                let vr = v.add(j * row + c * ESIZE);
                let v0 = load8(vr);
                let v1 = if two { load8(vr.add(8 * ESIZE)) } else { v0 };
                let at = j - BLOCK_KEYS * b0;
                for r in 0..R {
                    let pj = _mm256_broadcast_ss(&*s_row(r).add(at));
                    o[r][0] = _mm256_fmadd_ps(pj, v0, o[r][0]);
                    if two {
                        o[r][1] = _mm256_fmadd_ps(pj, v1, o[r][1]);
                    }
                }
            }
            for r in 0..R {
                let f = _mm256_set1_ps(inv[r]);
                _mm256_storeu_ps(out[r].add(c), _mm256_mul_ps(o[r][0], f));
                if two {
                    _mm256_storeu_ps(out[r].add(c + 8), _mm256_mul_ps(o[r][1], f));
                }
            }
            c += if two { 16 } else { 8 };
        }
    }
}
