//! Float ops of the forward passes, written so the compiler vectorizes them
//! (the kernels crate is built at opt-level 3 even in dev). Results follow
//! ggml's definitions; reductions accumulate in f32 lanes (f64 for RMSNorm,
//! as ggml's `ggml_float`).

use half::{bf16, f16};

/// `1 / sqrt(mean(x²) + eps)`: the squares summed in f64 (ggml's
/// `ggml_float`), in eight lanes so the loop vectorizes instead of waiting
/// on one add after another.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let mut acc = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| v as f64 * v as f64)
        .sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v as f64 * v as f64;
        }
    }
    let ss = acc.iter().sum::<f64>() + tail;
    1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt()
}

/// `out = x / sqrt(mean(x²) + eps)`.
pub fn rms_norm(x: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(x.len(), out.len());
    let scale = rms_scale(x, eps);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * scale;
    }
}

/// RMSNorm then multiply by `w` (llama; Gemma GGUFs store `1 + w` already).
pub fn rms_norm_weighted(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert!(w.len() == x.len() && out.len() == x.len());
    let scale = rms_scale(x, eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// [`rms_norm_weighted`] in place (per-head Q/K norms, post-norms).
pub fn rms_norm_weighted_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    assert_eq!(w.len(), x.len());
    let scale = rms_scale(x, eps);
    for (o, &g) in x.iter_mut().zip(w) {
        *o = *o * scale * g;
    }
}

/// Gemma's RMSNorm with an unshifted weight: `x̂ · (1 + w)`.
pub fn rms_norm_gemma(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(w.len(), x.len());
    rms_norm(x, eps, out);
    for (o, &g) in out.iter_mut().zip(w) {
        *o *= 1.0 + g;
    }
}

/// LayerNorm with weight and bias, as ggml's `norm` then `mul` and `add`:
/// the mean and the variance summed in f64 (ggml's `ggml_float`),
/// `out = (x - mean) / sqrt(var + eps) · w + b`.
pub fn layer_norm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    assert!(w.len() == x.len() && b.len() == x.len() && out.len() == x.len());
    let (mean, inv) = layer_norm_stats(x, eps);
    for (((o, &v), &g), &c) in out.iter_mut().zip(x).zip(w).zip(b) {
        *o = (v - mean) * inv * g + c;
    }
}

/// [`layer_norm`] in place (BERT's post-norms).
pub fn layer_norm_in_place(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    assert!(w.len() == x.len() && b.len() == x.len());
    let (mean, inv) = layer_norm_stats(x, eps);
    for ((o, &g), &c) in x.iter_mut().zip(w).zip(b) {
        *o = (*o - mean) * inv * g + c;
    }
}

/// `(mean, 1 / sqrt(var + eps))` with f64 sums in eight lanes.
fn layer_norm_stats(x: &[f32], eps: f32) -> (f32, f32) {
    let n = x.len().max(1) as f64;
    let mut acc = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&v| v as f64).sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v as f64;
        }
    }
    let mean = ((acc.iter().sum::<f64>() + tail) / n) as f32;
    let mut acc = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| {
            let d = (v - mean) as f64;
            d * d
        })
        .sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            let d = (v - mean) as f64;
            *a += d * d;
        }
    }
    let var = ((acc.iter().sum::<f64>() + tail) / n) as f32;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `erf(x)` within 5e-7 of the exact value (a few ulp of ±1 near the ends), branch-free so loops over
/// it vectorize: the rational minimax approximation of Eigen and XLA
/// (odd degree-13 numerator over even degree-8 denominator) on `[-4, 4]`,
/// where f32's `erf` already rounds to ±1 outside.
#[inline(always)]
pub fn erf_fast(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = ERF_NUM[0];
    for c in &ERF_NUM[1..] {
        p = p * x2 + c;
    }
    let mut q = ERF_DEN[0];
    for c in &ERF_DEN[1..] {
        q = q * x2 + c;
    }
    x * p / q
}

/// [`erf_fast`]'s numerator (times `x`) in `x²`, highest power first; its
/// SIMD twins read the same table.
pub(crate) const ERF_NUM: [f32; 7] = [
    -2.726_142_3e-10,
    2.770_681_4e-8,
    -2.101_024e-6,
    -5.692_506_4e-5,
    -7.349_906_3e-4,
    -2.954_6e-3,
    -1.609_603_3e-2,
];
/// [`erf_fast`]'s denominator in `x²`, highest power first.
pub(crate) const ERF_DEN: [f32; 5] = [
    -1.456_607_2e-5,
    -2.133_740_5e-4,
    -1.682_827e-3,
    -7.373_329e-3,
    -1.426_473_9e-2,
];

/// GELU with the exact erf: `0.5·x·(1 + erf(x/√2))` (BERT; ggml's `GELU_ERF`).
pub fn gelu_erf(x: &mut [f32]) {
    let done = simd().map_or(0, |s| (s.gelu_erf)(x));
    gelu_erf_scalar(&mut x[done..]);
}

/// [`gelu_erf`] without SIMD: the reference and the tail.
fn gelu_erf_scalar(x: &mut [f32]) {
    const SQRT_1_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
    for v in x.iter_mut() {
        let u = *v;
        *v = 0.5 * u * (1.0 + erf_fast(u * SQRT_1_2));
    }
}

/// Numerically stable softmax in place (max subtracted; all `-inf` gives zeros).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return;
    }
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = exp_fast(*v - max);
        sum += *v;
    }
    scale(x, 1.0 / sum);
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

/// `e^x` within 2 ulp over the whole f32 range, branch-free so loops over it
/// vectorize (libm's `expf` is a call per element). Cephes' range reduction
/// `x = n·ln2 + r` and degree-6 polynomial; inputs are clamped so `2^n` is a
/// normal float; below `-87` (where `expf` turns subnormal) the result is 0.
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let below = x < -87.0;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    // Round to nearest through the 1.5·2^23 trick (vectorizes, unlike `round`).
    let n = (x * LOG2E + 12_582_912.0) - 12_582_912.0;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let v = e * f32::from_bits(((n as i32 + 127) as u32) << 23);
    if below { 0.0 } else { v }
}

/// GELU, tanh approximation: `0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))`,
/// computed as `x · σ(2z)` (the same function) with [`exp_fast`].
pub fn gelu(x: &mut [f32]) {
    for v in x.iter_mut() {
        let u = *v;
        let z = SQRT_2_OVER_PI * u * (1.0 + GELU_COEF_A * u * u);
        *v = u / (1.0 + exp_fast(-2.0 * z));
    }
}

/// SwiGLU's gate: `gate[i] = silu(gate[i]) · up[i]`, `silu(x) = x / (1 + e^-x)`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    let done = simd().map_or(0, |s| (s.silu_mul)(gate, up));
    for (g, &u) in gate[done..].iter_mut().zip(&up[done..]) {
        *g = *g / (1.0 + exp_fast(-*g)) * u;
    }
}

/// GELU-gated: `gate[i] = gelu(gate[i]) · up[i]` (Gemma's GeGLU).
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    let done = simd().map_or(0, |s| (s.gelu_mul)(gate, up));
    gelu(&mut gate[done..]);
    mul_in_place(&mut gate[done..], &up[done..]);
}

/// A SIMD gated activation: does a prefix of the slices, returns its length.
type GatedFn = fn(&mut [f32], &[f32]) -> usize;
/// A SIMD activation in place: does a prefix of the slice, returns its length.
type ActFn = fn(&mut [f32]) -> usize;

/// An ISA's activations: the same operations in the same order as the
/// scalar code, so the same bits.
#[derive(Clone, Copy)]
struct Simd {
    gelu_mul: GatedFn,
    silu_mul: GatedFn,
    gelu_erf: ActFn,
}

/// The selected ISA's activations, where it has them. AVX-512 takes AVX2's
/// GELU-erf: Miri, which runs the AVX-512 tests, lacks the 16-lane min/max.
fn simd() -> Option<Simd> {
    static CHOSEN: std::sync::OnceLock<Option<Simd>> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        match crate::Isa::selected() {
            Ok(crate::Isa::Avx512Vnni | crate::Isa::Amx) => {
                return Some(Simd {
                    gelu_mul: crate::x86_64::avx512::gelu_mul,
                    silu_mul: crate::x86_64::avx512::silu_mul,
                    gelu_erf: crate::x86_64::avx2::gelu_erf,
                });
            }
            Ok(crate::Isa::Avx2) => {
                return Some(Simd {
                    gelu_mul: crate::x86_64::avx2::gelu_mul,
                    silu_mul: crate::x86_64::avx2::silu_mul,
                    gelu_erf: crate::x86_64::avx2::gelu_erf,
                });
            }
            _ => {}
        }
        None
    })
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// Adjacent pairs `(2i, 2i+1)` (llama.cpp `LLAMA_ROPE_TYPE_NORM`).
    Normal,
    /// Halves `(i, i + d/2)` (`LLAMA_ROPE_TYPE_NEOX`: Gemma, Qwen, GPT-NeoX).
    Neox,
}

/// The cosines and sines of every pair's angle at `pos`: pair `i` turns by
/// `freq_scale · pos · base^(-2i/rot_dims) / freq_factors[i]` (ggml's linear
/// `freq_scale`; `freq_factors` are Llama 3's `rope_freqs.weight`), the
/// `rot_dims / 2` cosines then the sines in `cs` (`rot_dims` values, apart
/// so [`rope_apply`]'s loops vectorize): computed once per position and
/// shared by every head and layer with that base (ggml's rope cache).
pub fn rope_table(
    pos: usize,
    rot_dims: usize,
    base: f32,
    freq_scale: f32,
    freq_factors: Option<&[f32]>,
    cs: &mut [f32],
) {
    assert!(rot_dims.is_multiple_of(2) && cs.len() == rot_dims);
    let half = rot_dims / 2;
    if let Some(f) = freq_factors {
        assert!(f.len() >= half);
    }
    let step = base.powf(-2.0 / rot_dims as f32);
    let mut theta = pos as f32;
    let (cos, sin) = cs.split_at_mut(half);
    for (i, (c, s)) in cos.iter_mut().zip(sin).enumerate() {
        let ff = freq_factors.map_or(1.0, |f| f[i]);
        (*s, *c) = (freq_scale * (theta / ff)).sin_cos();
        theta *= step;
    }
}

/// Rotates every head of `x` (`n_heads × head_dim`) by a [`rope_table`]
/// (`cs.len()` = the rotated dims; the rest of each head is untouched).
/// Pairs are adjacent dims (`Normal`) or dims `half` apart (`Neox`).
pub fn rope_apply(x: &mut [f32], head_dim: usize, cs: &[f32], layout: RopeLayout) {
    let half = cs.len() / 2;
    assert!(cs.len() <= head_dim && cs.len().is_multiple_of(2) && x.len().is_multiple_of(head_dim));
    let (cos, sin) = cs.split_at(half);
    for head in x.chunks_exact_mut(head_dim) {
        let rotated = &mut head[..2 * half];
        match layout {
            RopeLayout::Normal => {
                // Four pairs a step (written out so the compiler vectorizes
                // the even/odd shuffles), then the rest a pair at a time.
                let mut pairs = rotated.chunks_exact_mut(8);
                let (mut cs4, mut sn4) = (cos.chunks_exact(4), sin.chunks_exact(4));
                for ((p, c), s) in pairs.by_ref().zip(cs4.by_ref()).zip(sn4.by_ref()) {
                    let x: [f32; 8] = std::array::from_fn(|j| p[j]);
                    for i in 0..4 {
                        p[2 * i] = x[2 * i] * c[i] - x[2 * i + 1] * s[i];
                        p[2 * i + 1] = x[2 * i] * s[i] + x[2 * i + 1] * c[i];
                    }
                }
                let rest = pairs.into_remainder();
                for ((p, &c), &s) in rest
                    .chunks_exact_mut(2)
                    .zip(cs4.remainder())
                    .zip(sn4.remainder())
                {
                    let (x0, x1) = (p[0], p[1]);
                    p[0] = x0 * c - x1 * s;
                    p[1] = x0 * s + x1 * c;
                }
            }
            RopeLayout::Neox => {
                let (lo, hi) = rotated.split_at_mut(half);
                for (((a, b), &c), &s) in lo.iter_mut().zip(hi).zip(cos).zip(sin) {
                    let (x0, x1) = (*a, *b);
                    *a = x0 * c - x1 * s;
                    *b = x0 * s + x1 * c;
                }
            }
        }
    }
}

pub fn add_in_place(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len());
    x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
}
pub fn mul_in_place(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len());
    x.iter_mut().zip(y).for_each(|(a, &b)| *a *= b);
}
pub fn scale(x: &mut [f32], s: f32) {
    x.iter_mut().for_each(|a| *a *= s);
}

/// Σ x·y in 8 independent f32 lanes (vectorizable; attention scores).
pub fn dot(x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len());
    let mut acc = [0.0f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in xc.zip(yc) {
        for l in 0..8 {
            acc[l] += a[l] * b[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a · x` (attention's weighted sum of values).
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len());
    y.iter_mut().zip(x).for_each(|(o, &v)| *o += a * v);
}

pub fn f16_to_f32(src: &[f16], out: &mut [f32]) {
    assert_eq!(src.len(), out.len());
    if cfg!(miri) {
        // Miri lacks the F16C instructions `half` picks: its software path.
        out.iter_mut()
            .zip(src)
            .for_each(|(o, v)| *o = v.to_f32_const());
        return;
    }
    half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, out);
}
pub fn f32_to_f16(src: &[f32], out: &mut [f16]) {
    assert_eq!(src.len(), out.len());
    half::slice::HalfFloatSliceExt::convert_from_f32_slice(out, src);
}
pub fn bf16_to_f32(src: &[bf16], out: &mut [f32]) {
    assert_eq!(src.len(), out.len());
    out.iter_mut().zip(src).for_each(|(o, v)| *o = v.to_f32());
}
/// f32 → bf16 rounding as ggml does (nearest even, NaN quieted).
pub fn f32_to_bf16(src: &[f32], out: &mut [bf16]) {
    assert_eq!(src.len(), out.len());
    out.iter_mut()
        .zip(src)
        .for_each(|(o, &v)| *o = lamina_quant::quantize::fp32_to_bf16(v));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gate values over the whole range, with the edge cases, and up values.
    fn gated_inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
        let mut x = vec![
            0.0,
            -0.0,
            90.0,
            -90.0,
            1e-30,
            -1e-30,
            44.0,
            -87.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        x.extend((x.len()..n).map(|i| (i as f32 * 0.731).sin() * 12.0));
        let up = (0..x.len()).map(|i| (i as f32 * 0.17).cos()).collect();
        (x, up)
    }

    /// `gelu_mul` and `silu_mul` (after their SIMD part, the scalar code
    /// finishes the tail as the public functions do) against the scalar
    /// code, bit for bit.
    fn check_gated(x: &[f32], up: &[f32], gelu_simd: GatedFn, silu_simd: GatedFn) {
        let mut want_gelu = x.to_vec();
        gelu(&mut want_gelu);
        mul_in_place(&mut want_gelu, up);
        let want_silu: Vec<f32> = x
            .iter()
            .zip(up)
            .map(|(&g, &u)| g / (1.0 + exp_fast(-g)) * u)
            .collect();
        let (mut got_gelu, mut got_silu) = (x.to_vec(), x.to_vec());
        let done = gelu_simd(&mut got_gelu, up);
        gelu(&mut got_gelu[done..]);
        mul_in_place(&mut got_gelu[done..], &up[done..]);
        let done = silu_simd(&mut got_silu, up);
        for (g, &u) in got_silu[done..].iter_mut().zip(&up[done..]) {
            *g = *g / (1.0 + exp_fast(-*g)) * u;
        }
        for i in 0..x.len() {
            assert_eq!(
                got_gelu[i].to_bits(),
                want_gelu[i].to_bits(),
                "gelu {}",
                x[i]
            );
            assert_eq!(
                got_silu[i].to_bits(),
                want_silu[i].to_bits(),
                "silu {}",
                x[i]
            );
        }
    }

    /// AVX-512's gated activations give AVX2's bits for NaN gates too (sign
    /// and payload of the NaN out; natively only: Miri picks NaN bits at
    /// random).
    #[cfg(target_arch = "x86_64")]
    fn check_avx512_nan_like_avx2() {
        let mut x = vec![f32::NAN, -f32::NAN, f32::from_bits(0x7FA0_0001), 1.0];
        x.resize(16 + 8 + 3, f32::NAN);
        let up = vec![0.5; x.len()];
        for (wide, narrow) in [
            (
                crate::x86_64::avx512::gelu_mul as GatedFn,
                crate::x86_64::avx2::gelu_mul as GatedFn,
            ),
            (
                crate::x86_64::avx512::silu_mul,
                crate::x86_64::avx2::silu_mul,
            ),
        ] {
            let (mut a, mut b) = (x.clone(), x.clone());
            let n = narrow(&mut b, &up);
            assert_eq!(wide(&mut a, &up), n);
            let bits = |v: &[f32]| v[..n].iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b));
        }
    }

    /// The selected ISA's gated activations (the public functions) give the
    /// scalar code's bits, tails included.
    #[test]
    fn gated_activations_match_the_scalar_code_bit_for_bit() {
        let (x, up) = gated_inputs(1007);
        let public: [GatedFn; 2] = [
            |g, u| {
                gelu_mul(g, u);
                g.len()
            },
            |g, u| {
                silu_mul(g, u);
                g.len()
            },
        ];
        check_gated(&x, &up, public[0], public[1]);
        #[cfg(target_arch = "x86_64")]
        for isa in [crate::Isa::Avx2, crate::Isa::Avx512Vnni] {
            if crate::testutil::runs_here(isa) {
                let (gelu_simd, silu_simd): (GatedFn, GatedFn) = match isa {
                    crate::Isa::Avx2 => {
                        (crate::x86_64::avx2::gelu_mul, crate::x86_64::avx2::silu_mul)
                    }
                    _ => (
                        crate::x86_64::avx512::gelu_mul,
                        crate::x86_64::avx512::silu_mul,
                    ),
                };
                check_gated(&x, &up, gelu_simd, silu_simd);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if crate::testutil::runs_here(crate::Isa::Avx512Vnni) {
            check_avx512_nan_like_avx2();
        }
    }

    /// GELU-erf, the public function and AVX2's 8 lanes (with the scalar
    /// tail), against the scalar code bit for bit, NaN and infinities
    /// included.
    #[test]
    fn gelu_erf_matches_the_scalar_code_bit_for_bit() {
        let (mut x, _) = gated_inputs(1007);
        x.extend([f32::NAN, -f32::NAN, 3.99, -4.01, 5.7, -5.7, 1e38, -1e38]);
        let mut want = x.clone();
        gelu_erf_scalar(&mut want);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let mut got = x.clone();
        gelu_erf(&mut got);
        assert_eq!(bits(&got), bits(&want));
        #[cfg(target_arch = "x86_64")]
        if crate::testutil::runs_here(crate::Isa::Avx2) {
            let mut got = x.clone();
            let done = crate::x86_64::avx2::gelu_erf(&mut got);
            assert_eq!(done, x.len() / 8 * 8);
            gelu_erf_scalar(&mut got[done..]);
            assert_eq!(bits(&got), bits(&want));
        }
    }

    /// The AVX-512 gated activations under Miri (`.ci/isa-tests.sh`): two
    /// 16-lane vectors, AVX2's half vector and a scalar tail.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn miri_avx512_gated_activations_match_the_scalar_code() {
        if !crate::testutil::runs_here(crate::Isa::Avx512Vnni) {
            return;
        }
        let (x, up) = gated_inputs(16 * 2 + 8 + 5);
        check_gated(
            &x,
            &up,
            crate::x86_64::avx512::gelu_mul,
            crate::x86_64::avx512::silu_mul,
        );
    }

    fn close(a: f32, b: f64, tol: f64) -> bool {
        (a as f64 - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn rms_norm_matches_definition() {
        let x: Vec<f32> = (0..67).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let mut out = vec![0f32; x.len()];
        rms_norm(&x, 1e-6, &mut out);
        let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
        for (o, &v) in out.iter().zip(&x) {
            assert!(close(*o, v as f64 / (ms + 1e-6).sqrt(), 1e-6));
        }
        let w: Vec<f32> = (0..67).map(|i| i as f32 * 0.01).collect();
        let mut g = vec![0f32; x.len()];
        rms_norm_gemma(&x, &w, 1e-6, &mut g);
        let mut l = vec![0f32; x.len()];
        rms_norm_weighted(&x, &w, 1e-6, &mut l);
        for i in 0..x.len() {
            assert!(close(g[i], out[i] as f64 * (1.0 + w[i] as f64), 1e-6));
            assert!(close(l[i], out[i] as f64 * w[i] as f64, 1e-6));
        }
    }

    #[test]
    fn softmax_is_stable_and_normalized() {
        let mut x = vec![1000.0f32, 1001.0, 999.0, f32::NEG_INFINITY];
        softmax(&mut x);
        let e: Vec<f64> = [-1.0f64, 0.0, -2.0].iter().map(|v| v.exp()).collect();
        let s: f64 = e.iter().sum();
        for i in 0..3 {
            assert!(close(x[i], e[i] / s, 1e-6));
        }
        assert_eq!(x[3], 0.0);
        let mut z = vec![f32::NEG_INFINITY; 3];
        softmax(&mut z);
        assert_eq!(z, [0.0; 3]);
    }

    #[test]
    fn activations_match_definitions() {
        let xs: Vec<f32> = (-40..40).map(|i| i as f32 * 0.25).collect();
        let mut g = xs.clone();
        gelu(&mut g);
        let mut s = xs.clone();
        silu_mul(&mut s, &vec![2.0; xs.len()]);
        for (i, &x) in xs.iter().enumerate() {
            let x64 = x as f64;
            let want = 0.5
                * x64
                * (1.0
                    + ((2.0 / std::f64::consts::PI).sqrt() * (x64 + 0.044715 * x64.powi(3)))
                        .tanh());
            assert!(close(g[i], want, 1e-5), "gelu({x}) = {} vs {want}", g[i]);
            assert!(close(s[i], 2.0 * x64 / (1.0 + (-x64).exp()), 1e-5));
        }
    }

    /// RoPE of `x` at `pos` through a table, as the forward passes run it.
    fn rope(
        x: &mut [f32],
        head_dim: usize,
        rot: usize,
        pos: usize,
        ff: Option<&[f32]>,
        layout: RopeLayout,
    ) {
        let mut cs = vec![0.0; rot];
        rope_table(pos, rot, 10000.0, 1.0, ff, &mut cs);
        rope_apply(x, head_dim, &cs, layout);
    }

    #[test]
    fn rope_rotates_pairs_by_position() {
        let head_dim = 8;
        let base = 10000.0f64;
        for layout in [RopeLayout::Normal, RopeLayout::Neox] {
            for (rot, ff) in [(8, None), (4, Some([1.0f32, 2.0]))] {
                let x: Vec<f32> = (0..2 * head_dim).map(|i| i as f32 + 1.0).collect();
                let mut y = x.clone();
                rope(
                    &mut y,
                    head_dim,
                    rot,
                    5,
                    ff.as_ref().map(|f| &f[..]),
                    layout,
                );
                for h in 0..2 {
                    for i in 0..rot / 2 {
                        let (a, b) = match layout {
                            RopeLayout::Normal => (2 * i, 2 * i + 1),
                            RopeLayout::Neox => (i, i + rot / 2),
                        };
                        let f = ff.map_or(1.0, |f| f[i] as f64);
                        let th = 5.0 * base.powf(-2.0 * i as f64 / rot as f64) / f;
                        let (x0, x1) = (x[h * head_dim + a] as f64, x[h * head_dim + b] as f64);
                        assert!(
                            close(y[h * head_dim + a], x0 * th.cos() - x1 * th.sin(), 1e-5),
                            "{layout:?} rot {rot}"
                        );
                        assert!(
                            close(y[h * head_dim + b], x0 * th.sin() + x1 * th.cos(), 1e-5),
                            "{layout:?} rot {rot}"
                        );
                    }
                    // Dims past the rotated ones are untouched.
                    assert_eq!(
                        y[h * head_dim + rot..(h + 1) * head_dim],
                        x[h * head_dim + rot..(h + 1) * head_dim]
                    );
                }
                let mut z = x.clone();
                rope(&mut z, head_dim, rot, 0, None, layout);
                assert_eq!(z, x, "position 0 is the identity");
            }
        }
    }

    #[test]
    fn vector_helpers() {
        let x: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let y: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.25).collect();
        let want: f64 = x.iter().zip(&y).map(|(&a, &b)| a as f64 * b as f64).sum();
        assert!(close(dot(&x, &y), want, 1e-6));
        let mut z = y.clone();
        axpy(2.0, &x, &mut z);
        add_in_place(&mut z, &x);
        scale(&mut z, 0.5);
        for i in 0..37 {
            assert!(close(z[i], (y[i] as f64 + 3.0 * x[i] as f64) * 0.5, 1e-6));
        }
        let mut h = vec![f16::ZERO; 37];
        f32_to_f16(&x, &mut h);
        let mut back = vec![0f32; 37];
        f16_to_f32(&h, &mut back);
        assert_eq!(back, x);
        let mut b = vec![bf16::ZERO; 37];
        f32_to_bf16(&x, &mut b);
        bf16_to_f32(&b, &mut back);
        assert_eq!(back, x);
    }
}

#[cfg(test)]
mod fast_math_tests {
    use super::*;

    #[test]
    fn exp_fast_is_within_a_few_ulp_of_libm() {
        let mut x = -86.9f32;
        while x < 88.0 {
            let (want, got) = (x.exp(), exp_fast(x));
            assert!(
                ((got - want) / want).abs() <= 3.0 * f32::EPSILON,
                "exp({x}) = {got}, libm {want}"
            );
            x += 0.001_37;
        }
        assert_eq!(exp_fast(0.0), 1.0);
        assert_eq!(exp_fast(-1000.0), 0.0);
        assert_eq!(exp_fast(f32::NEG_INFINITY), 0.0);
        assert!(exp_fast(1000.0).is_finite());
    }

    #[test]
    fn gelu_matches_the_tanh_formula() {
        let mut x = -12.0f32;
        while x < 12.0 {
            let want = 0.5
                * x as f64
                * (1.0
                    + (0.797_884_560_802_865_4
                        * x as f64
                        * (1.0 + 0.044_715 * x as f64 * x as f64))
                        .tanh());
            let mut g = [x];
            gelu(&mut g);
            assert!(
                (g[0] as f64 - want).abs() <= 2e-6 * want.abs() + 1e-9,
                "gelu({x}) = {}, want {want}",
                g[0]
            );
            x += 0.003_1;
        }
    }

    /// `erf` in f64 by its Maclaurin series (ample terms; the alternating
    /// sum loses at most five of f64's sixteen digits for |x| ≤ 4).
    fn erf_ref(x: f64) -> f64 {
        if x.abs() > 4.5 {
            return x.signum();
        }
        let (mut term, mut sum) = (x, x);
        for n in 1..120 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_reference_matches_known_values() {
        assert!((erf_ref(0.5) - 0.520_499_877_813_046_5).abs() < 1e-14);
        assert!((erf_ref(1.0) - 0.842_700_792_949_714_9).abs() < 1e-14);
        assert!((erf_ref(2.0) - 0.995_322_265_018_952_7).abs() < 1e-13);
        assert!((erf_ref(-3.0) + 0.999_977_909_503_001_4).abs() < 1e-12);
    }

    #[test]
    fn erf_fast_is_within_5e7_of_erf() {
        let mut x = -6.0f32;
        while x < 6.0 {
            let (want, got) = (erf_ref(x as f64), erf_fast(x) as f64);
            assert!((got - want).abs() <= 5e-7, "erf({x}) = {got}, want {want}");
            x += 0.000_71;
        }
        assert_eq!(erf_fast(0.0), 0.0);
        assert_eq!(erf_fast(100.0), erf_fast(4.0));
        assert!((erf_fast(f32::INFINITY) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn gelu_erf_matches_the_f64_definition() {
        let mut x = -10.0f32;
        while x < 10.0 {
            let xd = x as f64;
            let want = 0.5 * xd * (1.0 + erf_ref(xd / 2f64.sqrt()));
            let mut g = [x];
            gelu_erf(&mut g);
            assert!(
                (g[0] as f64 - want).abs() <= 3e-7 * xd.abs().max(1.0),
                "gelu_erf({x}) = {}, want {want}",
                g[0]
            );
            x += 0.002_3;
        }
    }

    #[test]
    fn layer_norm_matches_the_f64_definition() {
        let n = 384;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37 + 3.0)
            .collect();
        let w: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32 * 0.01 - 0.02).collect();
        let eps = 1e-12f32;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        let mut out = vec![0.0; n];
        layer_norm(&x, &w, &b, eps, &mut out);
        let mut inplace = x.clone();
        layer_norm_in_place(&mut inplace, &w, &b, eps);
        assert_eq!(out, inplace);
        for i in 0..n {
            let want = (x[i] as f64 - mean) * inv * w[i] as f64 + b[i] as f64;
            assert!(
                (out[i] as f64 - want).abs() < 2e-6,
                "{i}: {} vs {want}",
                out[i]
            );
        }
        // A constant row normalises to the bias, not NaN.
        let mut c = vec![2.5f32; 8];
        layer_norm_in_place(&mut c, &[1.0; 8], &[0.25; 8], 1e-5);
        assert!(c.iter().all(|&v| v == 0.25));
    }
}
