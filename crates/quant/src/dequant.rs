//! Scalar dequantization, a port of ggml's `dequantize_row_*`.
//!
//! Each function keeps ggml's operation order (`d * sc` first, then `* q`,
//! then `- m`) so the results match llama.cpp and gguf-py bit for bit. The
//! output slice must hold exactly `blocks.len() * BLOCK_SIZE` values.

// Index loops mirror ggml's C line for line, which keeps the port auditable.
#![allow(clippy::needless_range_loop)]

use crate::blocks::*;
use half::{bf16, f16};

#[inline]
fn check(n_blocks: usize, block: usize, out: &[f32]) {
    assert_eq!(
        out.len(),
        n_blocks * block,
        "output holds {} values, {n_blocks} blocks need {}",
        out.len(),
        n_blocks * block
    );
}

/// Converts f16 values (ggml's `GGML_FP16_TO_FP32`, exact).
pub fn dequantize_f16(src: &[f16], out: &mut [f32]) {
    check(src.len(), 1, out);
    for (o, &v) in out.iter_mut().zip(src) {
        *o = v.to_f32();
    }
}

/// Converts bf16 values (a 16-bit shift, exact).
pub fn dequantize_bf16(src: &[bf16], out: &mut [f32]) {
    check(src.len(), 1, out);
    for (o, &v) in out.iter_mut().zip(src) {
        *o = v.to_f32();
    }
}

pub fn dequantize_q4_0(blocks: &[BlockQ4_0], out: &mut [f32]) {
    check(blocks.len(), QK, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub fn dequantize_q4_1(blocks: &[BlockQ4_1], out: &mut [f32]) {
    check(blocks.len(), QK, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        let m = b.m.to_f32();
        for (j, &q) in b.qs.iter().enumerate() {
            y[j] = (q & 0x0F) as f32 * d + m;
            y[j + QK / 2] = (q >> 4) as f32 * d + m;
        }
    }
}

pub fn dequantize_q5_0(blocks: &[BlockQ5_0], out: &mut [f32]) {
    check(blocks.len(), QK, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        let qh = u32::from_le_bytes(b.qh);
        for (j, &q) in b.qs.iter().enumerate() {
            let h0 = (((qh >> j) << 4) & 0x10) as i32;
            let h1 = ((qh >> (j + 12)) & 0x10) as i32;
            y[j] = (((q & 0x0F) as i32 | h0) - 16) as f32 * d;
            y[j + QK / 2] = (((q >> 4) as i32 | h1) - 16) as f32 * d;
        }
    }
}

pub fn dequantize_q5_1(blocks: &[BlockQ5_1], out: &mut [f32]) {
    check(blocks.len(), QK, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        let m = b.m.to_f32();
        let qh = u32::from_le_bytes(b.qh);
        for (j, &q) in b.qs.iter().enumerate() {
            let h0 = (((qh >> j) << 4) & 0x10) as i32;
            let h1 = ((qh >> (j + 12)) & 0x10) as i32;
            y[j] = ((q & 0x0F) as i32 | h0) as f32 * d + m;
            y[j + QK / 2] = ((q >> 4) as i32 | h1) as f32 * d + m;
        }
    }
}

pub fn dequantize_q8_0(blocks: &[BlockQ8_0], out: &mut [f32]) {
    check(blocks.len(), QK, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as f32 * d;
        }
    }
}

pub fn dequantize_q8_1(blocks: &[BlockQ8_1], out: &mut [f32]) {
    check(blocks.len(), QK, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as f32 * d;
        }
    }
}

pub fn dequantize_q2_k(blocks: &[BlockQ2K], out: &mut [f32]) {
    check(blocks.len(), QK_K, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        let mut is = 0;
        let mut o = 0;
        for q in b.qs.chunks_exact(32) {
            for shift in [0, 2, 4, 6] {
                for half in [&q[..16], &q[16..]] {
                    let sc = b.scales[is];
                    is += 1;
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for &v in half {
                        y[o] = dl * ((v >> shift) & 3) as f32 - ml;
                        o += 1;
                    }
                }
            }
        }
    }
}

/// Unpacks Q3_K's twelve bytes into sixteen 6-bit scales (still biased by 32).
#[inline]
pub(crate) fn q3k_scales(s: &[u8; 12]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = low | (high << 4);
    }
    out
}

pub fn dequantize_q3_k(blocks: &[BlockQ3K], out: &mut [f32]) {
    check(blocks.len(), QK_K, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d_all = b.d.to_f32();
        let scales = q3k_scales(&b.scales);
        let mut is = 0;
        let mut o = 0;
        let mut m = 1u8;
        for q in b.qs.chunks_exact(32) {
            for shift in [0, 2, 4, 6] {
                for off in [0, 16] {
                    let dl = d_all * (scales[is] as i32 - 32) as f32;
                    is += 1;
                    for l in off..off + 16 {
                        let low = ((q[l] >> shift) & 3) as i32;
                        let sub = if b.hmask[l] & m != 0 { 0 } else { 4 };
                        y[o] = dl * (low - sub) as f32;
                        o += 1;
                    }
                }
                m <<= 1;
            }
        }
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j`.
#[inline]
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

pub fn dequantize_q4_k(blocks: &[BlockQ4K], out: &mut [f32]) {
    check(blocks.len(), QK_K, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (k, (q, y)) in
            b.qs.chunks_exact(32)
                .zip(y.chunks_exact_mut(64))
                .enumerate()
        {
            let (sc, m) = get_scale_min_k4(2 * k, &b.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * k + 1, &b.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            for l in 0..32 {
                y[l] = d1 * (q[l] & 0xF) as f32 - m1;
                y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

pub fn dequantize_q5_k(blocks: &[BlockQ5K], out: &mut [f32]) {
    check(blocks.len(), QK_K, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        let qh = &b.qh;
        for (k, (ql, y)) in
            b.qs.chunks_exact(32)
                .zip(y.chunks_exact_mut(64))
                .enumerate()
        {
            let (sc, m) = get_scale_min_k4(2 * k, &b.scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * k + 1, &b.scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            let (u1, u2) = (1u8 << (2 * k), 2u8 << (2 * k));
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * ((ql[l] & 0xF) + h1) as f32 - m1;
                y[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
            }
        }
    }
}

pub fn dequantize_q6_k(blocks: &[BlockQ6K], out: &mut [f32]) {
    check(blocks.len(), QK_K, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for n in 0..2 {
            let ql = &b.ql[64 * n..64 * n + 64];
            let qh = &b.qh[32 * n..32 * n + 32];
            let sc = &b.scales[8 * n..8 * n + 8];
            let y = &mut y[128 * n..128 * n + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

pub fn dequantize_q8_k(blocks: &[BlockQ8K], out: &mut [f32]) {
    check(blocks.len(), QK_K, out);
    for (b, y) in blocks.iter().zip(out.chunks_exact_mut(QK_K)) {
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = b.d * q as f32;
        }
    }
}
