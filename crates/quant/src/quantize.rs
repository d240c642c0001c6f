//! Reference quantizers, ports of ggml's `quantize_row_*_ref`.
//!
//! The arithmetic is ggml's, in ggml's order, in `f32`, with no fused
//! multiply-adds (ggml-base, where these live, is built without `-march`
//! flags, so GCC cannot contract them either). Integer conversions reproduce
//! C's: `(int8_t)f` truncates, `nearest_int` rounds half to even through the
//! `1.5 * 2^23` trick. The results are byte-identical to llama.cpp's.
//!
//! Without an importance matrix, llama-quantize's `quantize_q*` entry points
//! call exactly these `_ref` functions for every type ported here (checked
//! against ggml-quants.c: `quantize_q4_0` .. `quantize_q6_K` branch to
//! `quantize_row_*_ref` when `quant_weights == NULL`; `quantize_q8_0` always
//! does), so one function per type serves both.

// Index loops mirror ggml's C line for line, which keeps the port auditable.
#![allow(clippy::needless_range_loop)]

use crate::blocks::*;
use crate::dequant::{get_scale_min_k4, q3k_scales};
use half::{bf16, f16};

// The only unsafe code in this crate: calls to the AVX2 build of the searches.
#[allow(unsafe_code)]
mod lanes;

/// ggml's `GROUP_MAX_EPS`.
const GROUP_MAX_EPS: f32 = 1e-15;

#[inline]
fn fp16(x: f32) -> f16 {
    // GGML_FP32_TO_FP16 rounds to nearest, ties to even, like `half`.
    f16::from_f32(x)
}

/// C's `(int)f` as x86 executes it (`cvttss2si`): truncation toward zero.
/// Out-of-range values only arise from NaN/inf inputs, where C is undefined.
#[inline]
fn trunc_i32(x: f32) -> i32 {
    x as i32
}

/// ggml's `nearest_int`: round half to even for `|x| <= 4194303`; the same
/// (meaningless) bits as C outside that range, which callers then clamp.
#[inline]
pub fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// ggml's `GGML_FP32_TO_BF16` (`ggml_compute_fp32_to_bf16`): round to nearest
/// even, NaN forced quiet.
pub fn fp32_to_bf16(x: f32) -> bf16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return bf16::from_bits(((u >> 16) | 64) as u16);
    }
    bf16::from_bits(((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16)
}

#[inline]
fn check(n_blocks: usize, block: usize, src: &[f32]) {
    assert_eq!(
        src.len(),
        n_blocks * block,
        "input holds {} values, {n_blocks} blocks take {}",
        src.len(),
        n_blocks * block
    );
}

pub fn quantize_f16(src: &[f32], out: &mut [f16]) {
    check(out.len(), 1, src);
    for (o, &x) in out.iter_mut().zip(src) {
        *o = fp16(x);
    }
}

pub fn quantize_bf16(src: &[f32], out: &mut [bf16]) {
    check(out.len(), 1, src);
    for (o, &x) in out.iter_mut().zip(src) {
        *o = fp32_to_bf16(x);
    }
}

/// Value of largest magnitude (the first one on ties), as the Q4_0/Q5_0 loops pick it.
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

pub fn quantize_q4_0(src: &[f32], out: &mut [BlockQ4_0]) {
    check(out.len(), QK, src);
    for (x, y) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        y.d = fp16(d);
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            let xi0 = (trunc_i32(x0 + 8.5) as i8).min(15) as u8;
            let xi1 = (trunc_i32(x1 + 8.5) as i8).min(15) as u8;
            y.qs[j] = xi0 | (xi1 << 4);
        }
    }
}

pub fn quantize_q4_1(src: &[f32], out: &mut [BlockQ4_1]) {
    check(out.len(), QK, src);
    for (x, y) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        y.d = fp16(d);
        y.m = fp16(min);
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let xi0 = (trunc_i32(x0 + 0.5) as i8).min(15) as u8;
            let xi1 = (trunc_i32(x1 + 0.5) as i8).min(15) as u8;
            y.qs[j] = xi0 | (xi1 << 4);
        }
    }
}

pub fn quantize_q5_0(src: &[f32], out: &mut [BlockQ5_0]) {
    check(out.len(), QK, src);
    for (x, y) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        y.d = fp16(d);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let x0 = x[j] * id;
            let x1 = x[QK / 2 + j] * id;
            let xi0 = (trunc_i32(x0 + 16.5) as i8).min(31) as u8;
            let xi1 = (trunc_i32(x1 + 16.5) as i8).min(31) as u8;
            y.qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        y.qh = qh.to_le_bytes();
    }
}

pub fn quantize_q5_1(src: &[f32], out: &mut [BlockQ5_1]) {
    check(out.len(), QK, src);
    for (x, y) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        y.d = fp16(d);
        y.m = fp16(min);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let x0 = (x[j] - min) * id;
            let x1 = (x[QK / 2 + j] - min) * id;
            let xi0 = trunc_i32(x0 + 0.5) as u8;
            let xi1 = trunc_i32(x1 + 0.5) as u8;
            y.qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        y.qh = qh.to_le_bytes();
    }
}

/// Absolute max as `MAX(amax, fabsf(v))` computes it, and the q8 scale and inverse.
#[inline]
fn q8_scale(x: &[f32]) -> (f32, f32) {
    let amax = x
        .iter()
        .fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    (d, inverse(d))
}

pub fn quantize_q8_0(src: &[f32], out: &mut [BlockQ8_0]) {
    check(out.len(), QK, src);
    for (x, y) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, id) = q8_scale(x);
        y.d = fp16(d);
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = trunc_i32((v * id).round()) as i8;
        }
    }
}

pub fn quantize_q8_1(src: &[f32], out: &mut [BlockQ8_1]) {
    check(out.len(), QK, src);
    for (x, y) in src.chunks_exact(QK).zip(out.iter_mut()) {
        let (d, id) = q8_scale(x);
        y.d = fp16(d);
        let mut sum = 0i32;
        for j in 0..QK / 2 {
            y.qs[j] = trunc_i32((x[j] * id).round()) as i8;
            y.qs[QK / 2 + j] = trunc_i32((x[QK / 2 + j] * id).round()) as i8;
            sum += y.qs[j] as i32 + y.qs[QK / 2 + j] as i32;
        }
        y.s = fp16(sum as f32 * d);
    }
}

/// ggml's `make_qx_quants`, without importance weights (`qw == NULL`).
/// Writes biased levels `0..2*nmax` to `l` and returns the scale.
#[cfg(test)]
fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    if rmse_type == 0 {
        for (o, &v) in l_out.iter_mut().zip(x) {
            *o = (nmax + clamp(nearest_int(iscale * v))) as i8;
        }
        return 1.0 / iscale;
    }
    let (rmse_type, return_early) = if rmse_type < 0 {
        (-rmse_type, true)
    } else {
        (rmse_type, false)
    };
    let weight = |v: f32| match rmse_type {
        1 => v * v,
        2 => 1.0,
        3 => v.abs(),
        _ => v.abs().sqrt(),
    };
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (o, &v) in l_out.iter_mut().zip(x) {
        let l = clamp(nearest_int(iscale * v));
        *o = (l + nmax) as i8;
        let w = weight(v);
        let lf = l as f32;
        sumlx += w * v * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let lf = clamp(nearest_int(iscale * v)) as f32;
            let w = weight(v);
            sumlx += w * v * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l_out.iter_mut().zip(x) {
                *o = (nmax + clamp(nearest_int(iscale * v))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants`: levels in `l_out` biased by `nmax`.
fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8], do_rmse: bool) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    if do_rmse {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for (o, &v) in l_out.iter_mut().zip(x) {
            let l = clamp(nearest_int(iscale * v));
            *o = l as i8;
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        for _ in 0..5 {
            let mut n_changed = 0;
            for (o, &v) in l_out.iter_mut().zip(x) {
                let w = v * v;
                let li = *o as f32;
                let mut slx = sumlx - w * v * li;
                if slx > 0.0 {
                    let mut sl2 = suml2 - w * li * li;
                    let new_l = clamp(nearest_int(v * sl2 / slx));
                    if new_l != *o as i32 {
                        let nl = new_l as f32;
                        slx += w * v * nl;
                        sl2 += w * nl * nl;
                        if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                            *o = new_l as i8;
                            sumlx = slx;
                            suml2 = sl2;
                            n_changed += 1;
                        }
                    }
                }
            }
            if n_changed == 0 {
                break;
            }
        }
        for o in l_out.iter_mut() {
            *o += nmax as i8;
        }
        return if suml2 > 0.0 { sumlx / suml2 } else { 0.0 };
    }
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (clamp(nearest_int(iscale * v)) + nmax) as i8;
    }
    1.0 / iscale
}

/// ggml's `make_qkx2_quants`: an asymmetric fit `x ~ scale * l - the_min`,
/// searching `nstep + 1` candidate scales. Returns `(scale, the_min)`.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmaxf) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs 2-bit levels as Q2_K and Q3_K store them: four 32-element groups per byte lane.
#[inline]
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for j in (0..QK_K).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
}

pub fn quantize_q2_k(src: &[f32], out: &mut [BlockQ2K]) {
    check(out.len(), QK_K, src);
    const Q4SCALE: f32 = 15.0;
    let mut l = [0u8; QK_K];
    let mut weights = [0f32; QK_K];
    let mut mins = [0f32; QK_K / 16];
    let mut scales = [0f32; QK_K / 16];
    for (x, y) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        for (w, &v) in weights.iter_mut().zip(x) {
            *w = v.abs();
        }
        for g in (0..QK_K).step_by(16 * lanes::LANES) {
            let (j, g) = (g / 16, g..g + 16 * lanes::LANES);
            let search = lanes::Qkx2 {
                nmax: 3,
                rmin: -0.5,
                rdelta: 0.1,
                nstep: 15,
                use_mad: true,
            };
            let (s, m) = lanes::make_qkx2_quants_x8::<16>(
                search,
                &x[g.clone()],
                &weights[g.clone()],
                &mut l[g],
            );
            scales[j..j + lanes::LANES].copy_from_slice(&s);
            mins[j..j + lanes::LANES].copy_from_slice(&m);
        }
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for (&s, &m) in scales.iter().zip(&mins) {
            if s > max_scale {
                max_scale = s;
            }
            if m > max_min {
                max_min = m;
            }
        }
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..QK_K / 16 {
                y.scales[j] = nearest_int(iscale * scales[j]) as u8;
            }
            y.d = fp16(max_scale / Q4SCALE);
        } else {
            y.scales = [0; QK_K / 16];
            y.d = fp16(0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..QK_K / 16 {
                let lm = nearest_int(iscale * mins[j]);
                y.scales[j] |= (lm << 4) as u8;
            }
            y.dmin = fp16(max_min / Q4SCALE);
        } else {
            y.dmin = fp16(0.0);
        }
        for j in 0..QK_K / 16 {
            let d = y.d.to_f32() * (y.scales[j] & 0xF) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = y.dmin.to_f32() * (y.scales[j] >> 4) as f32;
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&l, &mut y.qs);
    }
}

pub fn quantize_q3_k(src: &[f32], out: &mut [BlockQ3K]) {
    check(out.len(), QK_K, src);
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    for (x, y) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..QK_K / 16 {
            scales[j] = make_q3_quants(
                4,
                &x[16 * j..16 * j + 16],
                &mut l[16 * j..16 * j + 16],
                true,
            );
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }
        y.scales = [0; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..QK_K / 16 {
                // `int8_t l = nearest_int(..)` truncates to 8 bits before clamping.
                let lq = nearest_int(iscale * scales[j]) as i8 as i32;
                let lq = (lq.clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    y.scales[j] = lq & 0xF;
                } else {
                    y.scales[j - 8] |= (lq & 0xF) << 4;
                }
                y.scales[j % 4 + 8] |= (lq >> 4) << (2 * (j / 4));
            }
            y.d = fp16(1.0 / iscale);
        } else {
            y.d = fp16(0.0);
        }
        let sc = q3k_scales(&y.scales);
        for j in 0..QK_K / 16 {
            let d = y.d.to_f32() * (sc[j] as i32 - 32) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
                l[16 * j + ii] = (q + 4) as i8;
            }
        }
        y.hmask = [0; QK_K / 8];
        let mut lu = [0u8; QK_K];
        for (j, (u, &v)) in lu.iter_mut().zip(&l).enumerate() {
            let mut v = v as u8;
            if v > 3 {
                y.hmask[j % 32] |= 1 << (j / 32);
                v -= 4;
            }
            *u = v;
        }
        pack_2bit(&lu, &mut y.qs);
    }
}

/// Packs eight 6-bit scales and mins into Q4_K/Q5_K's 12 bytes.
#[inline]
fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; K_SCALE_SIZE] {
    let mut s = [0u8; K_SCALE_SIZE];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

/// The shared body of the Q4_K and Q5_K reference quantizers: fits each
/// 32-element sub-block, quantizes the scales to 6 bits, and requantizes the
/// values against the rounded scales. Returns levels `0..=nmax`.
#[allow(clippy::type_complexity)]
fn quantize_kx_block(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l: &mut [u8; QK_K],
) -> (f16, f16, [u8; K_SCALE_SIZE]) {
    let mut weights = [0f32; QK_K];
    for (xs, ws) in x.chunks_exact(32).zip(weights.chunks_exact_mut(32)) {
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in ws.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
    }
    const { assert!(QK_K / 32 == lanes::LANES) };
    let search = lanes::Qkx2 {
        nmax,
        rmin,
        rdelta: 0.1,
        nstep,
        use_mad: false,
    };
    let (scales, mins) = lanes::make_qkx2_quants_x8::<32>(search, &x[..QK_K], &weights, l);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for (&s, &m) in scales.iter().zip(&mins) {
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..QK_K / 32 {
        // `uint8_t ls = nearest_int(..)` keeps the low 8 bits, then MIN(63, ..).
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    let packed = pack_scale_min_k4(&ls, &lm);
    let d = fp16(max_scale / 63.0);
    let dmin = fp16(max_min / 63.0);
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &packed);
        let dd = d.to_f32() * sc as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dd).clamp(0, nmax) as u8;
        }
    }
    (d, dmin, packed)
}

pub fn quantize_q4_k(src: &[f32], out: &mut [BlockQ4K]) {
    check(out.len(), QK_K, src);
    let mut l = [0u8; QK_K];
    for (x, y) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (d, dmin, scales) = quantize_kx_block(x, 15, -1.0, 20, &mut l);
        y.d = d;
        y.dmin = dmin;
        y.scales = scales;
        for (j, q) in (0..QK_K).step_by(64).zip(y.qs.chunks_exact_mut(32)) {
            for k in 0..32 {
                q[k] = l[j + k] | (l[j + k + 32] << 4);
            }
        }
    }
}

pub fn quantize_q5_k(src: &[f32], out: &mut [BlockQ5K]) {
    check(out.len(), QK_K, src);
    let mut l = [0u8; QK_K];
    for (x, y) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (d, dmin, scales) = quantize_kx_block(x, 31, -0.5, 15, &mut l);
        y.d = d;
        y.dmin = dmin;
        y.scales = scales;
        y.qh = [0; QK_K / 8];
        let (mut m1, mut m2) = (1u8, 2u8);
        for (n, ql) in (0..QK_K).step_by(64).zip(y.qs.chunks_exact_mut(32)) {
            for j in 0..32 {
                let mut l1 = l[n + j];
                if l1 > 15 {
                    l1 -= 16;
                    y.qh[j] |= m1;
                }
                let mut l2 = l[n + j + 32];
                if l2 > 15 {
                    l2 -= 16;
                    y.qh[j] |= m2;
                }
                ql[j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
        }
    }
}

pub fn quantize_q6_k(src: &[f32], out: &mut [BlockQ6K]) {
    check(out.len(), QK_K, src);
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; QK_K / 16];
    for (x, y) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        for g in (0..QK_K).step_by(16 * lanes::LANES) {
            let s = &mut scales[g / 16..g / 16 + lanes::LANES];
            let g = g..g + 16 * lanes::LANES;
            lanes::make_qx_quants_x8::<16>(32, &x[g.clone()], &mut l[g], s);
        }
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for &scale in &scales {
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *y = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        y.d = fp16(1.0 / iscale);
        for ib in 0..QK_K / 16 {
            // MIN(127, nearest_int(..)) stored into an int8_t.
            y.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
        }
        for j in 0..QK_K / 16 {
            let d = y.d.to_f32() * y.scales[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let q = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
                l[16 * j + ii] = (q + 32) as i8;
            }
        }
        for (n, (ql, qh)) in
            y.ql.chunks_exact_mut(64)
                .zip(y.qh.chunks_exact_mut(32))
                .enumerate()
        {
            let l = &l[128 * n..128 * n + 128];
            for k in 0..32 {
                let (a, b, c, e) = (
                    l[k] as u8,
                    l[k + 32] as u8,
                    l[k + 64] as u8,
                    l[k + 96] as u8,
                );
                ql[k] = (a & 0xF) | ((c & 0xF) << 4);
                ql[k + 32] = (b & 0xF) | ((e & 0xF) << 4);
                qh[k] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
            }
        }
    }
}

pub fn quantize_q8_k(src: &[f32], out: &mut [BlockQ8K]) {
    check(out.len(), QK_K, src);
    for (x, y) in src.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            // ggml leaves bsums unwritten here; zero is what a fresh buffer holds.
            *y = bytemuck::Zeroable::zeroed();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (s, q) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = q.iter().map(|&v| v as i32).sum::<i32>() as i16;
        }
        y.d = 1.0 / iscale;
    }
}
