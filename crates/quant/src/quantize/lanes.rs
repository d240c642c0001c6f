//! ggml's scale searches (`make_qx_quants`, `make_qkx2_quants`) for eight
//! sub-blocks at once, one per lane.
//!
//! Each lane performs exactly the scalar search's operations in the scalar
//! order (Rust never fuses or reorders float arithmetic, nor do the AVX2
//! intrinsics), so the results are bit for bit those of the scalar searches
//! (kept in `quantize.rs` as the tests' reference); branches become per-lane
//! selects. The searches are most of a K-quant's quantization time. On x86-64
//! with AVX2 they run in intrinsics; elsewhere a portable body of lane arrays
//! runs, which the compiler vectorizes where it can.

use super::{GROUP_MAX_EPS, nearest_int};

/// Sub-blocks searched at once.
pub(super) const LANES: usize = 8;

/// The parameters of one `make_qkx2_quants` search: levels `0..=nmax`,
/// `nstep + 1` candidate scales `(nmax + rmin + rdelta·is) / (max − min)`,
/// error as absolute (`use_mad`) or squared differences.
#[derive(Clone, Copy, Debug)]
pub(super) struct Qkx2 {
    pub(super) nmax: i32,
    pub(super) rmin: f32,
    pub(super) rdelta: f32,
    pub(super) nstep: i32,
    pub(super) use_mad: bool,
}

type F = [f32; LANES];
type I = [i32; LANES];

#[inline(always)]
fn map(f: impl Fn(usize) -> f32) -> F {
    std::array::from_fn(f)
}

#[inline(always)]
fn select(mask: [bool; LANES], a: F, b: F) -> F {
    map(|j| if mask[j] { a[j] } else { b[j] })
}

/// `x[i][j]` is value `i` of sub-block `j` (`N` values each, back to back in `src`).
#[inline(always)]
fn transpose<const N: usize>(src: &[f32]) -> [F; N] {
    let src = &src[..N * LANES];
    std::array::from_fn(|i| map(|j| src[j * N + i]))
}

/// [`super::make_qx_quants`] with `rmse_type == 1` on eight sub-blocks of
/// `N` values (`x`, back to back): levels into `l_out`, scales into `scales`.
pub(super) fn make_qx_quants_x8<const N: usize>(
    nmax: i32,
    x: &[f32],
    l_out: &mut [i8],
    scales: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above), all the function enables.
        return unsafe { x86_64::make_qx_quants_x8::<N>(nmax, x, l_out, scales) };
    }
    qx_body::<N>(nmax, x, l_out, scales)
}

/// [`super::make_qkx2_quants`] on eight sub-blocks of `N` values (`x` and
/// their `weights`, back to back): levels into `l_out`; returns the
/// sub-blocks' scales and mins.
pub(super) fn make_qkx2_quants_x8<const N: usize>(
    p: Qkx2,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
) -> (F, F) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above), all the function enables.
        return unsafe { x86_64::make_qkx2_quants_x8::<N>(p, x, weights, l_out) };
    }
    qkx2_body::<N>(p, x, weights, l_out)
}

/// The searches in AVX2 intrinsics, one IEEE operation per scalar one.
/// (The portable bodies, compiled for AVX2, vectorize poorly.)
#[cfg(target_arch = "x86_64")]
mod x86_64 {
    use super::{F, GROUP_MAX_EPS, LANES, Qkx2, transpose};
    use std::arch::x86_64::*;

    #[inline(always)]
    fn load(a: &F) -> __m256 {
        // SAFETY: `a` holds eight f32; AVX is enabled in every caller.
        unsafe { _mm256_loadu_ps(a.as_ptr()) }
    }

    #[inline(always)]
    fn store(v: __m256) -> F {
        let mut a = [0.0f32; LANES];
        // SAFETY: `a` holds eight f32; AVX is enabled in every caller.
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
        a
    }

    #[inline(always)]
    fn store_i(v: __m256i) -> [i32; LANES] {
        let mut a = [0i32; LANES];
        // SAFETY: `a` holds eight i32; AVX is enabled in every caller.
        unsafe { _mm256_storeu_si256(a.as_mut_ptr().cast(), v) };
        a
    }

    /// `clamp(nearest_int(iscale · x), lo, hi)` per lane (ggml's magic-number rounding).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn levels(iscale: __m256, x: __m256, lo: __m256i, hi: __m256i) -> __m256i {
        let v = _mm256_add_ps(_mm256_mul_ps(iscale, x), _mm256_set1_ps(12_582_912.0));
        let bits = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x007f_ffff));
        let l = _mm256_sub_epi32(bits, _mm256_set1_epi32(0x0040_0000));
        _mm256_min_epi32(_mm256_max_epi32(l, lo), hi)
    }

    /// `if mask { b } else { a }` per lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn pick(a: __m256, b: __m256, mask: __m256) -> __m256 {
        _mm256_blendv_ps(a, b, mask)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn make_qx_quants_x8<const N: usize>(
        nmax: i32,
        src: &[f32],
        l_out: &mut [i8],
        scales: &mut [f32],
    ) {
        let xt = transpose::<N>(src);
        let x: [__m256; N] = std::array::from_fn(|i| load(&xt[i]));
        let zero = _mm256_setzero_ps();
        let sign = _mm256_set1_ps(-0.0);
        let (mut amax, mut max) = (zero, zero);
        for &xi in &x {
            let a = _mm256_andnot_ps(sign, xi);
            let gt = _mm256_cmp_ps::<_CMP_GT_OQ>(a, amax);
            amax = pick(amax, a, gt);
            max = pick(max, xi, gt);
        }
        let nmaxf = nmax as f32;
        let (lo, hi) = (_mm256_set1_epi32(-nmax), _mm256_set1_epi32(nmax - 1));
        let sums = |iscale: __m256, l: &mut [__m256i; N]| {
            let (mut sumlx, mut suml2) = (zero, zero);
            for (li, &xi) in l.iter_mut().zip(&x) {
                *li = levels(iscale, xi, lo, hi);
                let lf = _mm256_cvtepi32_ps(*li);
                let w = _mm256_mul_ps(xi, xi);
                sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, xi), lf));
                suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
            }
            (sumlx, suml2)
        };
        let mut l = [_mm256_setzero_si256(); N];
        let (sumlx, suml2) = sums(_mm256_div_ps(_mm256_set1_ps(-nmaxf), max), &mut l);
        let nonzero = _mm256_cmp_ps::<_CMP_NEQ_UQ>(suml2, zero);
        let mut scale = pick(zero, _mm256_div_ps(sumlx, suml2), nonzero);
        let mut best = _mm256_mul_ps(scale, sumlx);
        let mut laux = [_mm256_setzero_si256(); N];
        for is in (-9..=9).filter(|&is| is != 0) {
            let iscale = _mm256_div_ps(_mm256_set1_ps(-(nmaxf + 0.1 * is as f32)), max);
            let (sumlx, suml2) = sums(iscale, &mut laux);
            let better = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GT_OQ>(suml2, zero),
                _mm256_cmp_ps::<_CMP_GT_OQ>(
                    _mm256_mul_ps(sumlx, sumlx),
                    _mm256_mul_ps(best, suml2),
                ),
            );
            let keep = _mm256_castps_si256(better);
            for (li, &ai) in l.iter_mut().zip(&laux) {
                *li = _mm256_blendv_epi8(*li, ai, keep);
            }
            let s = _mm256_div_ps(sumlx, suml2);
            scale = pick(scale, s, better);
            best = pick(best, _mm256_mul_ps(s, sumlx), better);
        }
        let small = store(_mm256_cmp_ps::<_CMP_LT_OQ>(
            amax,
            _mm256_set1_ps(GROUP_MAX_EPS),
        ));
        let scale = store(scale);
        for j in 0..LANES {
            let zero = small[j].to_bits() != 0;
            scales[j] = if zero { 0.0 } else { scale[j] };
        }
        for (i, &li) in l.iter().enumerate() {
            let li = store_i(li);
            for j in 0..LANES {
                let zero = small[j].to_bits() != 0;
                l_out[j * N + i] = if zero { 0 } else { (li[j] + nmax) as i8 };
            }
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn make_qkx2_quants_x8<const N: usize>(
        p: Qkx2,
        src: &[f32],
        weights: &[f32],
        l_out: &mut [u8],
    ) -> (F, F) {
        let Qkx2 {
            nmax,
            rmin,
            rdelta,
            nstep,
            use_mad,
        } = p;
        let (xt, wt) = (transpose::<N>(src), transpose::<N>(weights));
        let x: [__m256; N] = std::array::from_fn(|i| load(&xt[i]));
        let w: [__m256; N] = std::array::from_fn(|i| load(&wt[i]));
        let zero = _mm256_setzero_ps();
        let (mut min, mut max) = (x[0], x[0]);
        let sum_w_x = {
            let (mut sum_w, mut sum_x) = (w[0], _mm256_mul_ps(w[0], x[0]));
            for i in 1..N {
                min = pick(min, x[i], _mm256_cmp_ps::<_CMP_LT_OQ>(x[i], min));
                max = pick(max, x[i], _mm256_cmp_ps::<_CMP_GT_OQ>(x[i], max));
                sum_w = _mm256_add_ps(sum_w, w[i]);
                sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(w[i], x[i]));
            }
            (sum_w, sum_x)
        };
        let (sum_w, sum_x) = sum_w_x;
        min = pick(min, zero, _mm256_cmp_ps::<_CMP_GT_OQ>(min, zero));
        let flat = store(_mm256_cmp_ps::<_CMP_EQ_OQ>(max, min));
        let sign = _mm256_set1_ps(-0.0);
        let err = |diff: __m256| {
            if use_mad {
                _mm256_andnot_ps(sign, diff)
            } else {
                _mm256_mul_ps(diff, diff)
            }
        };
        let nmaxf = nmax as f32;
        let (lo, hi) = (_mm256_setzero_si256(), _mm256_set1_epi32(nmax));
        let iscale = _mm256_div_ps(_mm256_set1_ps(nmaxf), _mm256_sub_ps(max, min));
        let mut scale = _mm256_div_ps(_mm256_set1_ps(1.0), iscale);
        let mut l = [_mm256_setzero_si256(); N];
        let mut best_error = zero;
        for i in 0..N {
            l[i] = levels(iscale, _mm256_sub_ps(x[i], min), lo, hi);
            let lf = _mm256_cvtepi32_ps(l[i]);
            let diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, lf), min), x[i]);
            best_error = _mm256_add_ps(best_error, _mm256_mul_ps(w[i], err(diff)));
        }
        let mut laux = [_mm256_setzero_si256(); N];
        // As in ggml, a better fit's min moves the next steps' grid.
        for is in (0..=nstep).filter(|_| nstep >= 1) {
            let step = _mm256_set1_ps(rmin + rdelta * is as f32 + nmaxf);
            let iscale = _mm256_div_ps(step, _mm256_sub_ps(max, min));
            let (mut sum_l, mut sum_l2, mut sum_xl) = (zero, zero, zero);
            for i in 0..N {
                laux[i] = levels(iscale, _mm256_sub_ps(x[i], min), lo, hi);
                let lf = _mm256_cvtepi32_ps(laux[i]);
                let wl = _mm256_mul_ps(w[i], lf);
                sum_l = _mm256_add_ps(sum_l, wl);
                sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, lf));
                sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, x[i]));
            }
            let d = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
            let mut this_scale = _mm256_div_ps(
                _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)),
                d,
            );
            let mut this_min = _mm256_div_ps(
                _mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)),
                d,
            );
            let positive = _mm256_cmp_ps::<_CMP_GT_OQ>(this_min, zero);
            this_min = pick(this_min, zero, positive);
            this_scale = pick(this_scale, _mm256_div_ps(sum_xl, sum_l2), positive);
            let mut cur_error = zero;
            for i in 0..N {
                let lf = _mm256_cvtepi32_ps(laux[i]);
                let fit = _mm256_add_ps(_mm256_mul_ps(this_scale, lf), this_min);
                let diff = _mm256_sub_ps(fit, x[i]);
                cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(w[i], err(diff)));
            }
            let better = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GT_OQ>(d, zero),
                _mm256_cmp_ps::<_CMP_LT_OQ>(cur_error, best_error),
            );
            let keep = _mm256_castps_si256(better);
            for (li, &ai) in l.iter_mut().zip(&laux) {
                *li = _mm256_blendv_epi8(*li, ai, keep);
            }
            best_error = pick(best_error, cur_error, better);
            scale = pick(scale, this_scale, better);
            min = pick(min, this_min, better);
        }
        for (i, &li) in l.iter().enumerate() {
            let li = store_i(li);
            for j in 0..LANES {
                l_out[j * N + i] = if flat[j].to_bits() != 0 {
                    0
                } else {
                    li[j] as u8
                };
            }
        }
        let (scale, min) = (store(scale), store(min));
        let scales = std::array::from_fn(|j| {
            if flat[j].to_bits() != 0 {
                0.0
            } else {
                scale[j]
            }
        });
        (scales, std::array::from_fn(|j| -min[j]))
    }
}

/// Levels `clamp(nearest_int(iscale · x), lo, hi)` of one value per lane.
#[inline(always)]
fn levels(iscale: F, x: F, lo: i32, hi: i32) -> I {
    std::array::from_fn(|j| nearest_int(iscale[j] * x[j]).clamp(lo, hi))
}

#[inline(always)]
fn qx_body<const N: usize>(nmax: i32, src: &[f32], l_out: &mut [i8], scales: &mut [f32]) {
    let x = transpose::<N>(src);
    let (mut amax, mut max) = ([0.0f32; LANES], [0.0f32; LANES]);
    for xi in &x {
        for j in 0..LANES {
            if xi[j].abs() > amax[j] {
                amax[j] = xi[j].abs();
                max[j] = xi[j];
            }
        }
    }
    let nmaxf = nmax as f32;
    let (lo, hi) = (-nmax, nmax - 1);
    // The first guess, then 18 more; a lane keeps the best.
    // One candidate's levels into `l`, and its sums `Σ w·x·l`, `Σ w·l²`.
    let sums = |iscale: F, l: &mut [I; N]| {
        let (mut sumlx, mut suml2) = ([0.0f32; LANES], [0.0f32; LANES]);
        for (li, xi) in l.iter_mut().zip(&x) {
            *li = levels(iscale, *xi, lo, hi);
            for j in 0..LANES {
                let (v, lf) = (xi[j], li[j] as f32);
                let w = v * v;
                sumlx[j] += w * v * lf;
                suml2[j] += w * lf * lf;
            }
        }
        (sumlx, suml2)
    };
    let mut l = [[0i32; LANES]; N];
    let (sumlx, suml2) = sums(map(|j| -nmaxf / max[j]), &mut l);
    let mut scale = map(|j| {
        if suml2[j] != 0.0 {
            sumlx[j] / suml2[j]
        } else {
            0.0
        }
    });
    let mut best = map(|j| scale[j] * sumlx[j]);
    let mut laux = [[0i32; LANES]; N];
    for is in (-9..=9).filter(|&is| is != 0) {
        let (sumlx, suml2) = sums(map(|j| -(nmaxf + 0.1 * is as f32) / max[j]), &mut laux);
        let better: [bool; LANES] =
            std::array::from_fn(|j| suml2[j] > 0.0 && sumlx[j] * sumlx[j] > best[j] * suml2[j]);
        for (li, ai) in l.iter_mut().zip(&laux) {
            for j in 0..LANES {
                if better[j] {
                    li[j] = ai[j];
                }
            }
        }
        let s = map(|j| sumlx[j] / suml2[j]);
        scale = select(better, s, scale);
        best = select(better, map(|j| s[j] * sumlx[j]), best);
    }
    for j in 0..LANES {
        let zero = amax[j] < GROUP_MAX_EPS;
        scales[j] = if zero { 0.0 } else { scale[j] };
        for (i, li) in l.iter().enumerate() {
            l_out[j * N + i] = if zero { 0 } else { (li[j] + nmax) as i8 };
        }
    }
}

#[inline(always)]
fn qkx2_body<const N: usize>(p: Qkx2, src: &[f32], weights: &[f32], l_out: &mut [u8]) -> (F, F) {
    let Qkx2 {
        nmax,
        rmin,
        rdelta,
        nstep,
        use_mad,
    } = p;
    let x = transpose::<N>(src);
    let w = transpose::<N>(weights);
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = map(|j| sum_w[j] * x[0][j]);
    for i in 1..N {
        for j in 0..LANES {
            if x[i][j] < min[j] {
                min[j] = x[i][j];
            }
            if x[i][j] > max[j] {
                max[j] = x[i][j];
            }
            sum_w[j] += w[i][j];
            sum_x[j] += w[i][j] * x[i][j];
        }
    }
    for m in &mut min {
        if *m > 0.0 {
            *m = 0.0;
        }
    }
    let flat: [bool; LANES] = std::array::from_fn(|j| max[j] == min[j]);
    let nmaxf = nmax as f32;
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = map(|j| nmaxf / (max[j] - min[j]));
    let mut scale = map(|j| 1.0 / iscale[j]);
    let mut l = [[0i32; LANES]; N];
    let mut best_error = [0.0f32; LANES];
    for i in 0..N {
        let shifted = map(|j| x[i][j] - min[j]);
        l[i] = levels(iscale, shifted, 0, nmax);
        for j in 0..LANES {
            let diff = scale[j] * l[i][j] as f32 + min[j] - x[i][j];
            best_error[j] += w[i][j] * err(diff);
        }
    }
    let mut laux = [[0i32; LANES]; N];
    // As in ggml, a better fit's min moves the next steps' grid.
    for is in (0..=nstep).filter(|_| nstep >= 1) {
        iscale = map(|j| (rmin + rdelta * is as f32 + nmaxf) / (max[j] - min[j]));
        let (mut sum_l, mut sum_l2, mut sum_xl) =
            ([0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES]);
        for i in 0..N {
            let shifted = map(|j| x[i][j] - min[j]);
            laux[i] = levels(iscale, shifted, 0, nmax);
            for j in 0..LANES {
                let lf = laux[i][j] as f32;
                sum_l[j] += w[i][j] * lf;
                sum_l2[j] += w[i][j] * lf * lf;
                sum_xl[j] += w[i][j] * lf * x[i][j];
            }
        }
        let d = map(|j| sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j]);
        let mut this_scale = map(|j| (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / d[j]);
        let mut this_min = map(|j| (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / d[j]);
        for j in 0..LANES {
            if this_min[j] > 0.0 {
                this_min[j] = 0.0;
                this_scale[j] = sum_xl[j] / sum_l2[j];
            }
        }
        let mut cur_error = [0.0f32; LANES];
        for i in 0..N {
            for j in 0..LANES {
                let diff = this_scale[j] * laux[i][j] as f32 + this_min[j] - x[i][j];
                cur_error[j] += w[i][j] * err(diff);
            }
        }
        let better: [bool; LANES] =
            std::array::from_fn(|j| d[j] > 0.0 && cur_error[j] < best_error[j]);
        for (li, ai) in l.iter_mut().zip(&laux) {
            for j in 0..LANES {
                if better[j] {
                    li[j] = ai[j];
                }
            }
        }
        best_error = select(better, cur_error, best_error);
        scale = select(better, this_scale, scale);
        min = select(better, this_min, min);
    }
    for j in 0..LANES {
        for (i, li) in l.iter().enumerate() {
            l_out[j * N + i] = if flat[j] { 0 } else { li[j] as u8 };
        }
    }
    let scales = map(|j| if flat[j] { 0.0 } else { scale[j] });
    let mins = map(|j| -min[j]);
    (scales, mins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantize::{make_qkx2_quants, make_qx_quants};

    /// Deterministic values in `[-1, 1)` (xorshift).
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    /// Eight sub-blocks of `n` values, each lane a different kind: spread
    /// scales, an all-zero block, values under ggml's epsilon, a constant
    /// block of either sign, one outlier, and exact halves of a grid.
    fn blocks(n: usize, seed: u64) -> Vec<f32> {
        let mut g = Gen(seed | 1);
        let mut x = Vec::with_capacity(8 * n);
        for lane in 0..LANES {
            let style = (lane as u64 + seed) % 8;
            let scale = 10f32.powi((seed % 7) as i32 - 3);
            for i in 0..n {
                let v = g.next();
                x.push(match style {
                    0 | 1 => v * scale,
                    2 => 0.0,
                    3 => v * 1e-17,
                    4 => 0.75 * scale,
                    5 => -0.5 * scale,
                    6 => {
                        if i == n / 3 {
                            40.0 * scale
                        } else {
                            v * scale
                        }
                    }
                    _ => (v * 8.0).round() * 0.5 * scale,
                });
            }
        }
        x
    }

    /// The scalar searches, lane by lane, against the portable body and (where
    /// the CPU has it) the AVX2 one: levels and scale bits equal.
    #[test]
    fn qx_lanes_match_the_scalar_search() {
        for seed in 0..200u64 {
            let x = blocks(16, seed);
            let (mut want_l, mut want_s) = (vec![0i8; 128], [0.0f32; LANES]);
            for j in 0..LANES {
                let r = 16 * j..16 * j + 16;
                want_s[j] = make_qx_quants(32, &x[r.clone()], &mut want_l[r], 1);
            }
            let mut runs: Vec<(&str, Vec<i8>, [f32; LANES])> = Vec::new();
            let (mut l, mut s) = (vec![0i8; 128], [0.0f32; LANES]);
            qx_body::<16>(32, &x, &mut l, &mut s);
            runs.push(("portable", l.clone(), s));
            make_qx_quants_x8::<16>(32, &x, &mut l, &mut s);
            runs.push(("dispatched", l, s));
            for (what, l, s) in runs {
                assert_eq!(l, want_l, "{what}, seed {seed}: levels");
                assert_eq!(
                    s.map(f32::to_bits),
                    want_s.map(f32::to_bits),
                    "{what}, seed {seed}"
                );
            }
        }
    }

    fn check_qkx2<const N: usize>(p: Qkx2) {
        let Qkx2 {
            nmax,
            rmin,
            rdelta,
            nstep,
            use_mad,
        } = p;
        for seed in 0..200u64 {
            let x = blocks(N, seed);
            // The callers' weights (|x|, or the block's RMS plus |x|) and random ones.
            let mut g = Gen(seed.wrapping_mul(0x9e37_79b9) | 1);
            let w: Vec<f32> = match seed % 3 {
                0 => x.iter().map(|v| v.abs()).collect(),
                1 => x.iter().map(|v| 0.25 + v.abs()).collect(),
                _ => x.iter().map(|_| g.next().abs() + 0.01).collect(),
            };
            let mut want_l = vec![0u8; LANES * N];
            let (mut want_s, mut want_m) = ([0.0f32; LANES], [0.0f32; LANES]);
            let mut laux = vec![0u8; N];
            for j in 0..LANES {
                let r = N * j..N * j + N;
                let (s, m) = make_qkx2_quants(
                    nmax,
                    &x[r.clone()],
                    &w[r.clone()],
                    &mut want_l[r],
                    &mut laux,
                    rmin,
                    rdelta,
                    nstep,
                    use_mad,
                );
                (want_s[j], want_m[j]) = (s, m);
            }
            let mut l = vec![0u8; LANES * N];
            let portable = qkx2_body::<N>(p, &x, &w, &mut l);
            let mut l2 = vec![0u8; LANES * N];
            let dispatched = make_qkx2_quants_x8::<N>(p, &x, &w, &mut l2);
            for (what, l, (s, m)) in [("portable", l, portable), ("dispatched", l2, dispatched)] {
                assert_eq!(l, want_l, "{what}, N {N}, seed {seed}: levels");
                assert_eq!(
                    s.map(f32::to_bits),
                    want_s.map(f32::to_bits),
                    "{what} {seed}"
                );
                assert_eq!(
                    m.map(f32::to_bits),
                    want_m.map(f32::to_bits),
                    "{what} {seed}"
                );
            }
        }
    }

    #[test]
    fn qkx2_lanes_match_the_scalar_search() {
        let p = |nmax, rmin, nstep, use_mad| Qkx2 {
            nmax,
            rmin,
            rdelta: 0.1,
            nstep,
            use_mad,
        };
        check_qkx2::<16>(p(3, -0.5, 15, true)); // Q2_K
        check_qkx2::<32>(p(15, -1.0, 20, false)); // Q4_K
        check_qkx2::<32>(p(31, -0.5, 15, false)); // Q5_K
        check_qkx2::<32>(p(15, -1.0, 0, false)); // no search steps
    }
}
