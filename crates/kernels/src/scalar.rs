//! The portable reference: activation quantizers and dot products for every
//! supported weight type, written for clarity. Every SIMD kernel is tested
//! against the function of the same name here, and [`crate::Isa::Scalar`]
//! runs them in production on CPUs without SIMD paths.
//!
//! The integer arithmetic (sums of quant products, scales, mins, bsums) is
//! exactly ggml's; per block the float combination follows
//! `ggml_vec_dot_*_generic` (`sumi * d_w * d_a`, `d * isum - dmin * summs`).
//! K-quant blocks are first unpacked into one signed quant per value plus a
//! scale and min per 16 values ([`KUnpacked`]), a form every K type shares;
//! the 1×4 tiles unpack a weight block once and reuse it for four activation
//! columns, in the same float order as [`vec_dot`](crate::TypeKernels::vec_dot),
//! so a tile equals four row dots bit for bit.

use crate::GgmlType;
use bytemuck::Pod;
use half::{bf16, f16};
use lamina_quant::blocks::*;
use lamina_quant::quantize as qref;

/// f16 → f32 (exact). Under Miri, `half`'s F16C path (enabled statically by
/// `+avx512f`) is not interpretable, so the same conversion runs in software.
#[inline(always)]
pub(crate) fn f16f(x: f16) -> f32 {
    if cfg!(miri) {
        x.to_f32_const()
    } else {
        x.to_f32()
    }
}

/// Checks a row of `n` values of type `ty` and returns its block count.
///
/// # Panics
/// When `n` is not a whole number of blocks or `bytes` is not exactly the row.
#[inline]
#[track_caller]
pub(crate) fn row_blocks(ty: GgmlType, n: usize, bytes: &[u8]) -> usize {
    let bs = ty.block_size();
    assert!(
        n.is_multiple_of(bs),
        "{ty}: {n} values is not a whole number of {bs}-value blocks"
    );
    let nb = n / bs;
    assert_eq!(
        bytes.len(),
        nb * ty.type_size(),
        "{ty}: a row of {n} values is {} bytes",
        nb * ty.type_size()
    );
    nb
}

/// Checks eight weight rows of `n` values of type `ty`, laid end to end in
/// `w`, and an activation row of type `act`; returns the block count and the
/// rows' stride in bytes (the eight-row kernels' geometry).
///
/// # Panics
/// As [`row_blocks`], for the activation row or any weight row.
#[cfg(target_arch = "x86_64")]
#[inline]
#[track_caller]
pub(crate) fn rows8_blocks(
    ty: GgmlType,
    act: GgmlType,
    n: usize,
    w: &[u8],
    a: &[u8],
) -> (usize, usize) {
    let nb = row_blocks(act, n, a);
    assert!(w.len().is_multiple_of(8), "eight whole rows");
    let stride = w.len() / 8;
    assert_eq!(row_blocks(ty, n, &w[..stride]), nb);
    (nb, stride)
}

/// The blocks of a row, read without any alignment requirement.
#[inline]
fn blocks<B: Pod>(bytes: &[u8]) -> impl Iterator<Item = B> + '_ {
    bytes
        .chunks_exact(size_of::<B>())
        .map(bytemuck::pod_read_unaligned)
}

/// Writes `blocks` quantized by `f` into `dst`, one block at a time (no alignment needed).
#[inline]
fn quantize_blocks<B: Pod + bytemuck::Zeroable>(
    src: &[f32],
    dst: &mut [u8],
    bs: usize,
    f: fn(&[f32], &mut [B]),
) {
    let sz = size_of::<B>();
    assert!(
        src.len().is_multiple_of(bs),
        "{} values is not a whole number of {bs}-value blocks",
        src.len()
    );
    assert_eq!(dst.len(), src.len() / bs * sz, "activation buffer size");
    for (x, out) in src.chunks_exact(bs).zip(dst.chunks_exact_mut(sz)) {
        let mut b = [B::zeroed()];
        f(x, &mut b);
        out.copy_from_slice(bytemuck::bytes_of(&b[0]));
    }
}

// ---------------------------------------------------------------- quantizers

/// f32 → Q8_0: `quantize_row_q8_0_ref` (round half away from zero).
pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK, qref::quantize_q8_0);
}

/// f32 → Q8_1, with `s = d * Σq`: `quantize_row_q8_1_ref`.
pub fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK, qref::quantize_q8_1);
}

/// f32 → Q8_K with per-16 `bsums`: `quantize_row_q8_K_ref`.
pub fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, qref::quantize_q8_k);
}

/// f32 → f32 (a copy: the activation type of F32 weights).
pub fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    dst.copy_from_slice(bytemuck::cast_slice(src));
}

/// f32 → f16, round to nearest even (`GGML_FP32_TO_FP16`).
pub fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "activation buffer size");
    for (x, o) in src.iter().zip(dst.chunks_exact_mut(2)) {
        o.copy_from_slice(&f16::from_f32(*x).to_le_bytes());
    }
}

/// f32 → bf16 as ggml rounds it (nearest even, NaN quieted).
pub fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "activation buffer size");
    for (x, o) in src.iter().zip(dst.chunks_exact_mut(2)) {
        o.copy_from_slice(&qref::fp32_to_bf16(*x).to_le_bytes());
    }
}

// ------------------------------------------------------------ legacy blocks

/// A 32-value block unpacked to signed quants: value `i` is `d * q[i] + m`.
pub(crate) trait LegacyBlock: Pod {
    const TYPE: GgmlType;
    fn unpack(&self) -> ([i8; QK], f32, f32);
}

/// The 5th bits of Q5_0/Q5_1: bit `j` of `qh` belongs to value `j`.
#[inline]
fn q5_values(qs: &[u8; 16], qh: [u8; 4]) -> [u8; QK] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; QK];
    for j in 0..16 {
        q[j] = (qs[j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

#[inline]
fn nibbles(qs: &[u8; 16]) -> [u8; QK] {
    let mut q = [0u8; QK];
    for j in 0..16 {
        q[j] = qs[j] & 0xF;
        q[j + 16] = qs[j] >> 4;
    }
    q
}

impl LegacyBlock for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    fn unpack(&self) -> ([i8; QK], f32, f32) {
        (nibbles(&self.qs).map(|v| v as i8 - 8), f16f(self.d), 0.0)
    }
}
impl LegacyBlock for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    fn unpack(&self) -> ([i8; QK], f32, f32) {
        (
            nibbles(&self.qs).map(|v| v as i8),
            f16f(self.d),
            f16f(self.m),
        )
    }
}
impl LegacyBlock for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    fn unpack(&self) -> ([i8; QK], f32, f32) {
        let q = q5_values(&self.qs, self.qh).map(|v| v as i8 - 16);
        (q, f16f(self.d), 0.0)
    }
}
impl LegacyBlock for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    fn unpack(&self) -> ([i8; QK], f32, f32) {
        let q = q5_values(&self.qs, self.qh).map(|v| v as i8);
        (q, f16f(self.d), f16f(self.m))
    }
}
impl LegacyBlock for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    fn unpack(&self) -> ([i8; QK], f32, f32) {
        (self.qs, f16f(self.d), 0.0)
    }
}

/// Σ a·b over equal-length i8 slices, exact.
#[inline]
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// A symmetric-activation (Q8_0) dot product over any legacy weight block.
fn legacy_q8_0<B: LegacyBlock>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(B::TYPE, n, w);
    row_blocks(GgmlType::Q8_0, n, a);
    let mut sum = 0.0f32;
    for (x, y) in blocks::<B>(w).zip(blocks::<BlockQ8_0>(a)) {
        let (q, d, _) = x.unpack();
        sum += dot_i8(&q, &y.qs) as f32 * d * f16f(y.d);
    }
    sum
}

/// Weight blocks with an offset `m` against Q8_1 (whose `s` carries `d * Σq`).
fn legacy_q8_1<B: LegacyBlock>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(B::TYPE, n, w);
    row_blocks(GgmlType::Q8_1, n, a);
    let mut sum = 0.0f32;
    for (x, y) in blocks::<B>(w).zip(blocks::<BlockQ8_1>(a)) {
        let (q, d, m) = x.unpack();
        sum += (d * f16f(y.d)) * dot_i8(&q, &y.qs) as f32 + m * f16f(y.s);
    }
    sum
}

/// One weight row against four Q8_0 activation rows, each block unpacked once.
fn legacy_q8_0_x4<B: LegacyBlock>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    row_blocks(B::TYPE, n, w);
    let sz = size_of::<BlockQ8_0>();
    for col in a {
        row_blocks(GgmlType::Q8_0, n, col);
    }
    let mut sum = [0.0f32; 4];
    for (i, x) in blocks::<B>(w).enumerate() {
        let (q, d, _) = x.unpack();
        for (s, col) in sum.iter_mut().zip(a) {
            let y: BlockQ8_0 = bytemuck::pod_read_unaligned(&col[i * sz..(i + 1) * sz]);
            *s += dot_i8(&q, &y.qs) as f32 * d * f16f(y.d);
        }
    }
    sum
}

pub fn vec_dot_q4_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    legacy_q8_0::<BlockQ4_0>(n, w, a)
}
pub fn vec_dot_q5_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    legacy_q8_0::<BlockQ5_0>(n, w, a)
}
pub fn vec_dot_q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
    legacy_q8_0::<BlockQ8_0>(n, w, a)
}
pub fn vec_dot_q4_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    legacy_q8_1::<BlockQ4_1>(n, w, a)
}
pub fn vec_dot_q5_1(n: usize, w: &[u8], a: &[u8]) -> f32 {
    legacy_q8_1::<BlockQ5_1>(n, w, a)
}
pub fn vec_dot_x4_q4_0(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    legacy_q8_0_x4::<BlockQ4_0>(n, w, a)
}
pub fn vec_dot_x4_q5_0(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    legacy_q8_0_x4::<BlockQ5_0>(n, w, a)
}
pub fn vec_dot_x4_q8_0(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    legacy_q8_0_x4::<BlockQ8_0>(n, w, a)
}

// ---------------------------------------------------------------- K-quants

/// A K-quant super-block unpacked: value `i` is
/// `d * scales[i / 16] * q[i] - dmin * mins[i / 16]`.
pub(crate) struct KUnpacked {
    pub q: [i8; QK_K],
    pub scales: [i32; 16],
    pub mins: [i32; 16],
    pub d: f32,
    pub dmin: f32,
}

pub(crate) trait KBlock: Pod {
    const TYPE: GgmlType;
    fn unpack(&self) -> KUnpacked;
}

/// The eight 6-bit (scale, min) pairs of Q4_K/Q5_K, each spread over two 16-value groups.
#[inline]
fn k4_scales(s: &[u8; K_SCALE_SIZE]) -> ([i32; 16], [i32; 16]) {
    let (mut sc, mut mn) = ([0i32; 16], [0i32; 16]);
    for j in 0..8 {
        let (a, b) = get_scale_min(j, s);
        sc[2 * j] = a as i32;
        sc[2 * j + 1] = a as i32;
        mn[2 * j] = b as i32;
        mn[2 * j + 1] = b as i32;
    }
    (sc, mn)
}

/// ggml's `get_scale_min_k4`.
#[inline]
pub(crate) fn get_scale_min(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K/Q5_K's packed 6-bit scales and mins → (scales[8], mins[8]) as bytes.
#[inline]
pub(crate) fn k4_scales_mins(p: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    const M1: u32 = 0x3f3f_3f3f;
    const M2: u32 = 0x0f0f_0f0f;
    const M3: u32 = 0x0303_0303;
    let u = |i: usize| u32::from_le_bytes([p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let sc0 = u0 & M1;
    let sc1 = (u2 & M2) | (((u0 >> 6) & M3) << 4);
    let mn0 = u1 & M1;
    let mn1 = ((u2 >> 4) & M2) | (((u1 >> 6) & M3) << 4);
    let cat = |a: u32, b: u32| {
        let mut o = [0u8; 8];
        o[..4].copy_from_slice(&a.to_le_bytes());
        o[4..].copy_from_slice(&b.to_le_bytes());
        o
    };
    (cat(sc0, sc1), cat(mn0, mn1))
}

impl KBlock for BlockQ2K {
    const TYPE: GgmlType = GgmlType::Q2_K;
    fn unpack(&self) -> KUnpacked {
        let mut q = [0i8; QK_K];
        for (half, qs) in self.qs.chunks_exact(32).enumerate() {
            for shift in 0..4 {
                for l in 0..32 {
                    q[128 * half + 32 * shift + l] = ((qs[l] >> (2 * shift)) & 3) as i8;
                }
            }
        }
        KUnpacked {
            q,
            scales: self.scales.map(|s| (s & 0xF) as i32),
            mins: self.scales.map(|s| (s >> 4) as i32),
            d: f16f(self.d),
            dmin: f16f(self.dmin),
        }
    }
}

impl KBlock for BlockQ3K {
    const TYPE: GgmlType = GgmlType::Q3_K;
    fn unpack(&self) -> KUnpacked {
        let mut q = [0i8; QK_K];
        for (half, qs) in self.qs.chunks_exact(32).enumerate() {
            for shift in 0..4 {
                let bit = 1u8 << (4 * half + shift);
                for l in 0..32 {
                    let low = ((qs[l] >> (2 * shift)) & 3) as i8;
                    let sub = if self.hmask[l] & bit != 0 { 0 } else { 4 };
                    q[128 * half + 32 * shift + l] = low - sub;
                }
            }
        }
        let mut scales = [0i32; 16];
        for (j, s) in scales.iter_mut().enumerate() {
            let low = if j < 8 {
                self.scales[j] & 0xF
            } else {
                self.scales[j - 8] >> 4
            };
            let high = (self.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s = (low | (high << 4)) as i32 - 32;
        }
        KUnpacked {
            q,
            scales,
            mins: [0; 16],
            d: f16f(self.d),
            dmin: 0.0,
        }
    }
}

impl KBlock for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4_K;
    fn unpack(&self) -> KUnpacked {
        let mut q = [0i8; QK_K];
        for (j, qs) in self.qs.chunks_exact(32).enumerate() {
            for l in 0..32 {
                q[64 * j + l] = (qs[l] & 0xF) as i8;
                q[64 * j + 32 + l] = (qs[l] >> 4) as i8;
            }
        }
        let (scales, mins) = k4_scales(&self.scales);
        KUnpacked {
            q,
            scales,
            mins,
            d: f16f(self.d),
            dmin: f16f(self.dmin),
        }
    }
}

impl KBlock for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5_K;
    fn unpack(&self) -> KUnpacked {
        let mut q = [0i8; QK_K];
        for (j, qs) in self.qs.chunks_exact(32).enumerate() {
            for l in 0..32 {
                let h = self.qh[l] >> (2 * j);
                q[64 * j + l] = ((qs[l] & 0xF) | ((h & 1) << 4)) as i8;
                q[64 * j + 32 + l] = ((qs[l] >> 4) | ((h & 2) << 3)) as i8;
            }
        }
        let (scales, mins) = k4_scales(&self.scales);
        KUnpacked {
            q,
            scales,
            mins,
            d: f16f(self.d),
            dmin: f16f(self.dmin),
        }
    }
}

impl KBlock for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    fn unpack(&self) -> KUnpacked {
        let mut q = [0i8; QK_K];
        for half in 0..2 {
            let ql = &self.ql[64 * half..64 * half + 64];
            let qh = &self.qh[32 * half..32 * half + 32];
            let q = &mut q[128 * half..128 * half + 128];
            for l in 0..32 {
                q[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                q[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        KUnpacked {
            q,
            scales: self.scales.map(|s| s as i32),
            mins: [0; 16],
            d: f16f(self.d),
            dmin: 0.0,
        }
    }
}

/// One unpacked super-block against one Q8_K block.
#[inline]
fn k_block_dot(u: &KUnpacked, y: &BlockQ8K) -> f32 {
    let mut isum = 0i32;
    for (s, (q, a)) in u.q.chunks_exact(16).zip(y.qs.chunks_exact(16)).enumerate() {
        isum += u.scales[s] * dot_i8(q, a);
    }
    let msum: i32 = u
        .mins
        .iter()
        .zip(&y.bsums)
        .map(|(&m, &b)| m * b as i32)
        .sum();
    (y.d * u.d) * isum as f32 - (y.d * u.dmin) * msum as f32
}

fn k_dot<B: KBlock>(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(B::TYPE, n, w);
    row_blocks(GgmlType::Q8_K, n, a);
    blocks::<B>(w)
        .zip(blocks::<BlockQ8K>(a))
        .fold(0.0, |s, (x, y)| s + k_block_dot(&x.unpack(), &y))
}

fn k_dot_x4<B: KBlock>(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    row_blocks(B::TYPE, n, w);
    for col in a {
        row_blocks(GgmlType::Q8_K, n, col);
    }
    let sz = size_of::<BlockQ8K>();
    let mut sum = [0.0f32; 4];
    for (i, x) in blocks::<B>(w).enumerate() {
        let u = x.unpack();
        for (s, col) in sum.iter_mut().zip(a) {
            let y: BlockQ8K = bytemuck::pod_read_unaligned(&col[i * sz..(i + 1) * sz]);
            *s += k_block_dot(&u, &y);
        }
    }
    sum
}

pub fn vec_dot_q2_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    k_dot::<BlockQ2K>(n, w, a)
}
pub fn vec_dot_q3_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    k_dot::<BlockQ3K>(n, w, a)
}
pub fn vec_dot_q4_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    k_dot::<BlockQ4K>(n, w, a)
}
pub fn vec_dot_q5_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    k_dot::<BlockQ5K>(n, w, a)
}
pub fn vec_dot_q6_k(n: usize, w: &[u8], a: &[u8]) -> f32 {
    k_dot::<BlockQ6K>(n, w, a)
}
pub fn vec_dot_x4_q2_k(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    k_dot_x4::<BlockQ2K>(n, w, a)
}
pub fn vec_dot_x4_q3_k(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    k_dot_x4::<BlockQ3K>(n, w, a)
}
pub fn vec_dot_x4_q4_k(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    k_dot_x4::<BlockQ4K>(n, w, a)
}
pub fn vec_dot_x4_q5_k(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    k_dot_x4::<BlockQ5K>(n, w, a)
}
pub fn vec_dot_x4_q6_k(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    k_dot_x4::<BlockQ6K>(n, w, a)
}

// ------------------------------------------------------------------- floats

/// Σ w·a accumulated in f64 (as ggml's generic `ggml_vec_dot_f16` does in `ggml_float`).
fn float_dot<T: Pod>(ty: GgmlType, n: usize, w: &[u8], a: &[u8], f: fn(T) -> f32) -> f32 {
    row_blocks(ty, n, w);
    row_blocks(ty, n, a);
    blocks::<T>(w)
        .zip(blocks::<T>(a))
        .map(|(x, y)| f(x) as f64 * f(y) as f64)
        .sum::<f64>() as f32
}

pub fn vec_dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    float_dot::<f32>(GgmlType::F32, n, w, a, |v| v)
}
pub fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    float_dot::<f16>(GgmlType::F16, n, w, a, f16::to_f32)
}
pub fn vec_dot_bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    float_dot::<bf16>(GgmlType::BF16, n, w, a, bf16::to_f32)
}

/// Decodes a row of any supported type (the reference for tolerances in tests).
#[cfg(test)]
pub(crate) fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    lamina_quant::dequantize_row(ty, bytes, out).expect("supported, whole, aligned row");
}
