//! AVX2 attention over f32 or f16 key/value rows (also built for AVX-512 VL).

use super::*;

/// Eight f32 × 8 vectors → one vector of their eight horizontal sums, in order.
#[inline(always)]
unsafe fn hsum8_ps(p: &[__m256; 8]) -> __m256 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        let s01 = _mm256_hadd_ps(p[0], p[1]);
        let s23 = _mm256_hadd_ps(p[2], p[3]);
        let s45 = _mm256_hadd_ps(p[4], p[5]);
        let s67 = _mm256_hadd_ps(p[6], p[7]);
        let s0123 = _mm256_hadd_ps(s01, s23);
        let s4567 = _mm256_hadd_ps(s45, s67);
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(s0123, s4567),
            _mm256_permute2f128_ps::<0x31>(s0123, s4567),
        )
    }
}

/// [`crate::ops::exp_fast`] in 8 lanes: the same range reduction and polynomial.
#[inline(always)]
pub(super) unsafe fn exp_ps(x: __m256) -> __m256 {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.0));
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(-87.0)),
            _mm256_set1_ps(88.0),
        );
        let magic = _mm256_set1_ps(12_582_912.0);
        let n = _mm256_sub_ps(
            _mm256_add_ps(
                _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
                magic,
            ),
            magic,
        );
        let r = _mm256_sub_ps(
            _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693_359_4))),
            _mm256_mul_ps(n, _mm256_set1_ps(-2.121_944_4e-4)),
        );
        let mut p = _mm256_set1_ps(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
        }
        let e = _mm256_add_ps(
            _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r),
            _mm256_set1_ps(1.0),
        );
        let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_andnot_ps(below, _mm256_mul_ps(e, _mm256_castsi256_ps(pow2)))
    }
}

/// Keys per online-softmax update (the scalar path's block, for the same rescaling points).
const KEY_BLOCK: usize = crate::attention::KEY_BLOCK;

/// Four f32 × 8 vectors → their four horizontal sums, each by the same
/// addition tree as [`hsum8_ps`] gives it.
#[inline(always)]
pub(in crate::x86_64) unsafe fn hsum4_ps(p: [__m256; 4]) -> __m128 {
    // SAFETY: AVX is enabled in every kernel calling this.
    unsafe {
        let s0123 = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
        _mm_add_ps(
            _mm256_castps256_ps128(s0123),
            _mm256_extractf128_ps::<1>(s0123),
        )
    }
}

/// One key's score for `R` heads into `s[r][j]`: one FMA chain over the
/// head's 8-value chunks, then `hsum_f32`'s tree (the keys past a block's
/// last whole group of eight, in the AVX2 and AVX-512 kernels alike).
#[inline(always)]
pub(in crate::x86_64) unsafe fn score_one<const R: usize, const ESIZE: usize>(
    q: [*const f32; R],
    hd: usize,
    key: *const u8,
    scale: f32,
    load8: unsafe fn(*const u8) -> __m256,
    s: &mut [[f32; KEY_BLOCK]; R],
    j: usize,
) {
    // SAFETY: the caller passes `hd` values (a multiple of 8) at each `q[r]` and
    // at `key`; AVX2 and FMA are enabled in every kernel calling this.
    unsafe {
        for r in 0..R {
            let mut a = _mm256_setzero_ps();
            for c in 0..hd / 8 {
                let qv = _mm256_loadu_ps(q[r].add(8 * c));
                a = _mm256_fmadd_ps(qv, load8(key.add(8 * c * ESIZE)), a);
            }
            s[r][j] = hsum_f32(a) * scale;
        }
    }
}

/// One key block's softmax step for `R` heads: the scores `s[r][..n]`
/// (soft-capped here when `softcap` is set) raise each head's running max,
/// rescaling its output row (`hd` values at `out[r]`, a multiple of 8) and
/// its sum; then `p[r] = exp(s − max)` in 8 lanes (lanes past `n` give 0)
/// and the sum grows by their total. Shared by the AVX2 and AVX-512 kernels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(in crate::x86_64) unsafe fn softmax_block<const R: usize>(
    s: &mut [[f32; KEY_BLOCK]; R],
    n: usize,
    softcap: Option<f32>,
    max: &mut [f32; R],
    sum: &mut [f32; R],
    p: &mut [[f32; KEY_BLOCK]; R],
    out: [*mut f32; R],
    hd: usize,
) {
    // SAFETY: the caller passes `hd` values at each `out[r]` and `n ≤ KEY_BLOCK`;
    // AVX2 is enabled in every kernel calling this.
    unsafe {
        for r in 0..R {
            let s = &mut s[r];
            if let Some(c) = softcap {
                s[..n].iter_mut().for_each(|x| *x = c * (*x / c).tanh());
            }
            // Lanes past `n` hold -inf: they leave the max alone and give 0.
            s[n..n.next_multiple_of(8).min(KEY_BLOCK)].fill(f32::NEG_INFINITY);
            // The max in 8 lanes (a scalar fold was a fifth of the kernel's time).
            let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
            for c in 0..n.div_ceil(8) {
                mv = _mm256_max_ps(mv, _mm256_loadu_ps(s.as_ptr().add(8 * c)));
            }
            let block_max = hmax_ps(mv);
            if block_max > max[r] {
                let rescale = crate::ops::exp_fast(max[r] - block_max);
                if sum[r] > 0.0 {
                    let f = _mm256_set1_ps(rescale);
                    for c in 0..hd / 8 {
                        let o = out[r].add(8 * c);
                        _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), f));
                    }
                }
                sum[r] *= rescale;
                max[r] = block_max;
            }
            let m = _mm256_set1_ps(max[r]);
            let mut psum = _mm256_setzero_ps();
            for c in 0..n.div_ceil(8) {
                let e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s.as_ptr().add(8 * c)), m));
                _mm256_storeu_ps(p[r].as_mut_ptr().add(8 * c), e);
                psum = _mm256_add_ps(psum, e);
            }
            sum[r] += hsum_f32(psum);
        }
    }
}

/// `R` query heads (`hd` f32 each at `q[r]`, `hd` a multiple of 8) that
/// share one kv head, against key rows `start..end` (row `j`'s head at
/// `k + j·row`, elements read by `load8`), into `out[r]`: [`attend_blocks`]
/// over the range, then each row normalized.
#[inline(always)]
unsafe fn attend_with<const R: usize, const ESIZE: usize, const WIDE: bool>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    load8: unsafe fn(*const u8) -> __m256,
) {
    // SAFETY: as for `attend_blocks`, which this forwards.
    unsafe {
        zero_rows(out, rows.hd);
        let (mut max, mut sum) = ([f32::NEG_INFINITY; R], [0.0f32; R]);
        attend_blocks::<R, ESIZE, WIDE>(rows, q, out, load8, &mut max, &mut sum);
        normalize(&sum, out, rows.hd);
    }
}

/// Zeroes `hd` values (a multiple of 8) at each `out[r]`.
#[inline(always)]
pub(super) unsafe fn zero_rows<const R: usize>(out: [*mut f32; R], hd: usize) {
    // SAFETY: the caller passes `hd` writable values at each `out[r]`; AVX
    // is enabled in every caller.
    unsafe {
        for o in out {
            for c in 0..hd / 8 {
                _mm256_storeu_ps(o.add(8 * c), _mm256_setzero_ps());
            }
        }
    }
}

/// How many key blocks ahead the kernels ask for strided rows.
pub(in crate::x86_64) const PREFETCH_BLOCKS: usize = 2;

/// The key blocks of [`attend_with`]: key rows `start..end` in blocks of
/// `KEY_BLOCK` from `start`, for `R` heads whose running maxima and sums
/// are `max` and `sum` and whose unnormalized outputs are at `out[r]`.
/// Scores 8 keys at a time (8 FMA chains per head, the same addition tree
/// for every key of a full step), the block's `exp` in 8 lanes, and the
/// value rows accumulated into the outputs 8 dimensions at a time. Each key
/// and value row is read once for all `R` heads. A head's bits depend only
/// on its query, its keys and where its blocks start, never on the heads
/// beside it: a range may be split at a block boundary and continued with
/// the same `max`, `sum` and `out`.
#[inline(always)]
pub(super) unsafe fn attend_blocks<const R: usize, const ESIZE: usize, const WIDE: bool>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    load8: unsafe fn(*const u8) -> __m256,
    max: &mut [f32; R],
    sum: &mut [f32; R],
) {
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
    // SAFETY: the wrapper checked `hd` values at each `q[r]` and `out[r]` and that
    // every key row of the range holds `hd` elements (so the prefetched rows, all
    // in the range, are in bounds); AVX2/FMA/F16C are enabled.
    unsafe {
        let chunks = hd / 8;
        // A kv head's rows in a cache lie a whole cache row apart, a stride
        // the hardware prefetchers follow too slowly to keep decoding's one
        // pass over them streaming. Contiguous (widened) rows need no hint,
        // nor rows of two or three heads, whose stride they keep up with.
        let strided = row >= 4 * hd * ESIZE;
        let mut s = [[f32::NEG_INFINITY; KEY_BLOCK]; R];
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
                if R == 1 {
                    let mut acc = [_mm256_setzero_ps(); 8];
                    for c in 0..chunks {
                        let qv = _mm256_loadu_ps(q[0].add(8 * c));
                        for (i, a) in acc.iter_mut().enumerate() {
                            *a = _mm256_fmadd_ps(qv, load8(key(j + i).add(8 * c * ESIZE)), *a);
                        }
                    }
                    let sv = _mm256_mul_ps(hsum8_ps(&acc), _mm256_set1_ps(scale));
                    _mm256_storeu_ps(s[0].as_mut_ptr().add(j), sv);
                } else if WIDE || R <= 2 {
                    score8::<R, 4, ESIZE>(q, chunks, key(j), row, scale, load8, &mut s, j);
                } else {
                    score8::<R, 2, ESIZE>(q, chunks, key(j), row, scale, load8, &mut s, j);
                }
                j += 8;
            }
            while j < n {
                score_one::<R, ESIZE>(q, hd, key(j), scale, load8, &mut s, j);
                j += 1;
            }
            let mut p = [[0.0f32; KEY_BLOCK]; R];
            softmax_block(&mut s, n, softcap, max, sum, &mut p, out, hd);
            // Values: `value_chunks::<R>()` chunks of 8 dimensions of all R
            // outputs in registers while the block's value rows stream past
            // (fewer at the end).
            let v0 = v.add(j0 * row);
            let mut c = 0;
            while c < chunks {
                // The widest step that fits, up to `value_chunks::<R>()`.
                let w = match (chunks - c).min(value_chunks::<R>()) {
                    8.. => 8,
                    4..=7 => 4,
                    2 | 3 => 2,
                    _ => 1,
                };
                match w {
                    8 => add_values::<R, 8, ESIZE>(v0, row, n, &p, out, c, load8),
                    4 => add_values::<R, 4, ESIZE>(v0, row, n, &p, out, c, load8),
                    2 => add_values::<R, 2, ESIZE>(v0, row, n, &p, out, c, load8),
                    _ => add_values::<R, 1, ESIZE>(v0, row, n, &p, out, c, load8),
                }
                c += w;
            }
            j0 += n;
        }
    }
}

/// [`attend_with`] for AVX2's sixteen registers: three or four heads score
/// two keys a pass.
#[inline(always)]
unsafe fn attend<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    load8: unsafe fn(*const u8) -> __m256,
) {
    // SAFETY: forwarded from the caller.
    unsafe { attend_with::<R, ESIZE, false>(rows, q, out, load8) }
}

/// [`attend_with`] for AVX-512 VL's thirty-two registers: four keys a pass
/// for any number of heads.
#[inline(always)]
unsafe fn attend_vl<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    load8: unsafe fn(*const u8) -> __m256,
) {
    // SAFETY: forwarded from the caller.
    unsafe { attend_with::<R, ESIZE, true>(rows, q, out, load8) }
}

/// Eight keys' scores (rows `key + i·row`) for `R` heads into
/// `s[r][j..j + 8]`, `KEYS` keys × `R` heads per pass, so that the `R·KEYS`
/// accumulators stay in registers. Each key's FMA chain runs over the
/// head's chunks in order and its sum takes [`hsum4_ps`]'s tree, the single
/// head's, whatever `KEYS` and `R` are.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn score8<const R: usize, const KEYS: usize, const ESIZE: usize>(
    q: [*const f32; R],
    chunks: usize,
    key: *const u8,
    row: usize,
    scale: f32,
    load8: unsafe fn(*const u8) -> __m256,
    s: &mut [[f32; KEY_BLOCK]; R],
    j: usize,
) {
    // SAFETY: the caller passes `8·chunks` values at each `q[r]` and eight key
    // rows holding as many; AVX2 and FMA are enabled in every kernel calling
    // this.
    unsafe {
        let mut pass = 0;
        while pass < 8 {
            let mut acc = [[_mm256_setzero_ps(); KEYS]; R];
            for c in 0..chunks {
                let mut kv = [_mm256_setzero_ps(); KEYS];
                for i in 0..KEYS {
                    kv[i] = load8(key.add((pass + i) * row + 8 * c * ESIZE));
                }
                for r in 0..R {
                    let qv = _mm256_loadu_ps(q[r].add(8 * c));
                    for i in 0..KEYS {
                        acc[r][i] = _mm256_fmadd_ps(qv, kv[i], acc[r][i]);
                    }
                }
            }
            // The R·KEYS sums, head after head, four at a time.
            let mut g = 0;
            while g < R * KEYS {
                let mut v = [_mm256_setzero_ps(); 4];
                for i in 0..4 {
                    if g + i < R * KEYS {
                        v[i] = acc[(g + i) / KEYS][(g + i) % KEYS];
                    }
                }
                let mut t = [0.0f32; 4];
                _mm_storeu_ps(t.as_mut_ptr(), _mm_mul_ps(hsum4_ps(v), _mm_set1_ps(scale)));
                for i in 0..4 {
                    if g + i < R * KEYS {
                        s[(g + i) / KEYS][j + pass + (g + i) % KEYS] = t[i];
                    }
                }
                g += 4;
            }
            pass += KEYS;
        }
    }
}

/// Chunks of 8 dimensions per head the value loop keeps in registers: eight
/// accumulators or more in all, so that their FMA chains cover the FMA
/// latency on both pipes, and few enough for AVX2's sixteen registers.
const fn value_chunks<const R: usize>() -> usize {
    match R {
        1 => 8,
        2 => 4,
        _ => 2,
    }
}

/// `out[r] += Σ_jj p[r][jj] · v_jj` over dimensions `8c..8(c + C)` of the
/// `n` value rows at `v + jj·row`, the `C·R` accumulators in registers.
/// Each dimension's sum runs over the rows in order, one FMA each, whatever
/// `C` is.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn add_values<const R: usize, const C: usize, const ESIZE: usize>(
    v: *const u8,
    row: usize,
    n: usize,
    p: &[[f32; KEY_BLOCK]; R],
    out: [*mut f32; R],
    c: usize,
    load8: unsafe fn(*const u8) -> __m256,
) {
    // SAFETY: the caller passes `n` value rows holding dimensions up to
    // `8(c + C)` and as many at each `out[r]`; AVX2 and FMA are enabled in
    // every kernel calling this.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for r in 0..R {
            for x in 0..C {
                acc[r][x] = _mm256_loadu_ps(out[r].add(8 * (c + x)));
            }
        }
        for jj in 0..n {
            let vrow = v.add(jj * row + 8 * c * ESIZE);
            let mut pj = [_mm256_setzero_ps(); R];
            for r in 0..R {
                pj[r] = _mm256_set1_ps(p[r][jj]);
            }
            for x in 0..C {
                let vx = load8(vrow.add(8 * x * ESIZE));
                for r in 0..R {
                    acc[r][x] = _mm256_fmadd_ps(pj[r], vx, acc[r][x]);
                }
            }
        }
        for r in 0..R {
            for x in 0..C {
                _mm256_storeu_ps(out[r].add(8 * (c + x)), acc[r][x]);
            }
        }
    }
}

/// Divides each head's output row (`hd` values at `out[r]`, a multiple of 8)
/// by its softmax sum (rows that attended nothing stay zero).
#[inline(always)]
pub(in crate::x86_64) unsafe fn normalize<const R: usize>(
    sum: &[f32; R],
    out: [*mut f32; R],
    hd: usize,
) {
    // SAFETY: the caller passes `hd` values at each `out[r]`; AVX is enabled in
    // every kernel calling this.
    unsafe {
        for r in 0..R {
            if sum[r] > 0.0 {
                let f = _mm256_set1_ps(1.0 / sum[r]);
                for c in 0..hd / 8 {
                    let o = out[r].add(8 * c);
                    _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), f));
                }
            }
        }
    }
}

/// An attention kernel call's key and value rows and scaling: key rows
/// `start..end`, row `j`'s kv head at `k + j·row` (and `v + j·row`), `hd`
/// values each; scores times `scale`, soft-capped where `softcap` is set.
#[derive(Clone, Copy)]
pub(in crate::x86_64) struct KeyRows {
    pub hd: usize,
    pub k: *const u8,
    pub v: *const u8,
    pub row: usize,
    pub start: usize,
    pub end: usize,
    pub scale: f32,
    pub softcap: Option<f32>,
}

/// One attention kernel entry point (see [`attend`]): `R` heads' queries
/// at `q` and outputs at `out`, `R·hd` values each.
pub(in crate::x86_64) type AttendKernel = unsafe fn(KeyRows, *const f32, *mut f32);

kernel_fns! { attend avx2, attend;
    ATTEND_F32: 4, load8_f32 =>
        k_attend1_f32: 1, k_attend2_f32: 2,
        k_attend3_f32: 3, k_attend4_f32: 4;
    ATTEND_F16: 2, load8_f16 =>
        k_attend1_f16: 1, k_attend2_f16: 2,
        k_attend3_f16: 3, k_attend4_f16: 4;
}
// The same arithmetic with AVX-512 VL's 32 vector registers: four heads' score
// chains fit without spilling.
kernel_fns! { attend avx512vl, attend_vl;
    ATTEND_F32_VL: 4, load8_f32 =>
        v_attend1_f32: 1, v_attend2_f32: 2,
        v_attend3_f32: 3, v_attend4_f32: 4;
    ATTEND_F16_VL: 2, load8_f16 =>
        v_attend1_f16: 1, v_attend2_f16: 2,
        v_attend3_f16: 3, v_attend4_f16: 4;
}

/// [`crate::attention::AttendFn`] with AVX2 + FMA + F16C (head dimension a
/// multiple of 8, up to [`crate::attention::MAX_HEADS`] heads per call).
pub(crate) fn attend_row(args: crate::attention::RowArgs<'_>, out: &mut [f32]) {
    attend_row_with([ATTEND_F32, ATTEND_F16], args, out)
}

/// [`attend_row`] built for AVX-512 VL (the same bits); reachable only
/// after AVX-512 F/VL detection.
pub(crate) fn attend_row_vl(args: crate::attention::RowArgs<'_>, out: &mut [f32]) {
    attend_row_with([ATTEND_F32_VL, ATTEND_F16_VL], args, out)
}

/// Checks a row's arguments and runs it through the kernel table of its key
/// element type (shared with the AVX-512 attention, which passes its own tables).
pub(in crate::x86_64) fn attend_row_with(
    [f32_kernels, f16_kernels]: [[AttendKernel; crate::attention::MAX_HEADS]; 2],
    args: crate::attention::RowArgs<'_>,
    out: &mut [f32],
) {
    use crate::attention::{KvRows, MAX_HEADS};
    let crate::attention::RowArgs {
        q,
        head_dim: hd,
        k,
        v,
        off,
        kv_row,
        keys,
        scale,
        softcap,
    } = args;
    let heads = q.len() / hd.max(1);
    assert!(
        hd.is_multiple_of(8) && q.len() == heads * hd && out.len() == q.len(),
        "heads of {hd} values"
    );
    assert!(
        (1..=MAX_HEADS).contains(&heads),
        "{heads} heads in one call"
    );
    if keys.is_empty() {
        out.fill(0.0);
        return;
    }
    // Every key row of the range must hold the head: `(end-1)·kv_row + off + hd ≤ len`.
    let fits = |len: usize| (keys.end - 1) * kv_row + off + hd <= len;
    let (kernel, kp, vp, esize): (AttendKernel, *const u8, *const u8, usize) = match (k, v) {
        (KvRows::F32(k), KvRows::F32(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows {keys:?}");
            (
                f32_kernels[heads - 1],
                k[off..].as_ptr().cast(),
                v[off..].as_ptr().cast(),
                4,
            )
        }
        (KvRows::F16(k), KvRows::F16(v)) => {
            assert!(fits(k.len()) && fits(v.len()), "key rows {keys:?}");
            (
                f16_kernels[heads - 1],
                k[off..].as_ptr().cast(),
                v[off..].as_ptr().cast(),
                2,
            )
        }
        // `attention_on` refuses keys and values of different types.
        _ => unreachable!("keys and values of different types"),
    };
    // SAFETY: the rows read lie inside `k` and `v` (checked above), `q` and `out`
    // hold `heads · hd` values; reachable only after the detection of the
    // kernels' features (AVX2/FMA/F16C, and AVX-512 F/VL for the VL table).
    unsafe {
        let rows = KeyRows {
            hd,
            k: kp,
            v: vp,
            row: kv_row * esize,
            start: keys.start,
            end: keys.end,
            scale,
            softcap,
        };
        kernel(rows, q.as_ptr(), out.as_mut_ptr())
    }
}
