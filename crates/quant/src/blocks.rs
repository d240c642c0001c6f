//! Block layouts, field for field as `ggml-common.h` declares them.
//!
//! Every struct is `#[repr(C)]` without padding, so a tensor's bytes can be
//! reinterpreted as a slice of blocks with [`crate::cast_blocks`]. The
//! `const` asserts pin each size to ggml's `static_assert`s.

use bytemuck::{Pod, Zeroable};
use half::f16;
use std::mem::{align_of, size_of};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in Q4_K/Q5_K.
pub const K_SCALE_SIZE: usize = 12;
/// Elements per legacy (non-K) block.
pub const QK: usize = 32;

/// 4-bit, symmetric: `x = (q - 8) * d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}

/// 4-bit with offset: `x = q * d + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}

/// 5-bit, symmetric: low nibbles in `qs`, fifth bits in `qh` (little-endian u32).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 5-bit with offset.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// 8-bit, symmetric: `x = q * d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}

/// 8-bit with the precomputed `s = d * sum(qs)`, the activation type of Q4_1/Q5_1.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: f16,
    pub s: f16,
    pub qs: [i8; QK],
}

/// 2-bit super-block: 16 sub-blocks of 16, 4-bit scale and min each.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: f16,
    pub dmin: f16,
}

/// 3-bit super-block: 2 low bits in `qs`, high bit in `hmask`, 6-bit scales.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: f16,
}

/// 4-bit super-block: 8 sub-blocks of 32, 6-bit scale and min each.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// 5-bit super-block: Q4_K plus one high bit per element in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// 6-bit super-block: 16 sub-blocks of 16 with signed 8-bit scales.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: f16,
}

/// 8-bit super-block with an f32 scale and per-16 sums: the activation type of the K-quants.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ2K>() == 84);
const _: () = assert!(size_of::<BlockQ3K>() == 110);
const _: () = assert!(size_of::<BlockQ4K>() == 144);
const _: () = assert!(size_of::<BlockQ5K>() == 176);
const _: () = assert!(size_of::<BlockQ6K>() == 210);
const _: () = assert!(size_of::<BlockQ8K>() == 292);
// GGUF aligns tensor data to 32 bytes (at least 8 in practice), so every
// block type can be borrowed in place: none needs more than 4.
const _: () = assert!(align_of::<BlockQ8K>() == 4);
const _: () = assert!(align_of::<BlockQ6K>() == 2);
