//! Weight panels: sixteen weight rows unpacked once into int8, laid out so
//! that one 64-byte vector holds four consecutive quants of each of the
//! sixteen rows, for large batches (prompt processing, batched embedding).
//!
//! The 1×16 tiles over packed activations unpack every weight block again
//! for each group of tokens and spend two or three shuffles per multiply-add
//! doing it, which bounds large batches well below the int8 peak. A panel is unpacked once per matmul call (by the task that owns its rows,
//! into that task's part of the scratch) and then multiplied against every
//! token: per multiply-add, one broadcast of four activation bytes and one
//! `vpdpbusd`, each lane one weight row. Each lane ends a block (or
//! sub-block) with that row's exact integer sum, and the float step is the
//! row kernel's, so a panel gives every (row, token) the bits of
//! [`crate::TypeKernels::vec_dot`] on the same ISA.
//!
//! Activations are *prepared* per token first ([`PanelFns::prepare`]): the
//! quantized row rearranged so that every value a kernel broadcasts or
//! multiplies lies at a fixed offset of its block.
//!
//! A matmul splits a matrix's rows into tasks of whole panels (see
//! [`crate::matmul`]). A task unpacks a slab of its panels at a time, small
//! enough to stay in L2, and runs blocks of prepared tokens over the whole
//! slab so that each block's activations stay in cache across its panels.
//! Each kernel call covers one panel and [`PANEL_TOKENS`] tokens (or half as
//! many for the batch's last ones, padded with zero rows). Where a type has a
//! pair kernel ([`PanelFns::pair`]), a call covers two panels of the slab:
//! each broadcast of activation bytes then feeds both panels' products,
//! which halves the loads per product, the limit of the one-panel kernel.
//!
//! Layouts, per weight block of a panel (`r` a row 0..16, all little-endian):
//! * legacy Q8_0/Q4_0/Q5_0 (576 bytes per 32 values): for dword `k` in 0..8,
//!   64 bytes holding quants `4k..4k+4` of each row as `w + 2^shift`
//!   (unsigned); then the rows' 16 scales as f32. Prepared activations (40
//!   bytes per block): the 32 quants, the scale as f32, and `−Σa · 2^shift`,
//!   which starts the integer sum and takes the offset back.
//! * Q4_1/Q5_1 (640 bytes per 32 values): the quant dwords as above, the
//!   quants unsigned as they are (no offset); then the rows' 16 `d` and
//!   their 16 `m` as f32. Prepared activations (40 bytes, from Q8_1): the
//!   32 quants, `d` and `s = d · Σa` as f32.
//! * Q4_K (4992 bytes per 256 values): per 32-value sub-block `s`, 8 × 64
//!   bytes of quants (0..15) as above; then per sub-block the rows' scales as
//!   i32 (`4096 + 64s`); then per pair `p` of sub-blocks the rows' mins as i16
//!   pairs `(m[2p], m[2p+1])` (`4608 + 64p`); then `d` and `dmin` as f32
//!   (4864, 4928). Prepared activations (320 bytes): `d` as f32, the eight
//!   32-value sums as i16 (4), and the 256 quants from the block's second
//!   cache line (64), so that a tile row of 64 quants never straddles two.
//! * Q2_K (5760 bytes per 256 values): per 16-value sub-block `s`, 4 × 64
//!   bytes of quants (0..3); then per sub-block the rows' scales as i32
//!   (`4096 + 64s`); then per pair `p` of sub-blocks the rows' mins as i16
//!   pairs (`5120 + 64p`); then `d` and `dmin` as f32 (5632, 5696).
//!   Prepared activations (320 bytes): Q4_K's, with the sixteen 16-value
//!   sums as i16 (4).
//! * Q6_K (5248 bytes per 256 values): per 16-value sub-block `s`, 4 × 64
//!   bytes of signed quants `q − 32`; then per sub-block the rows' scales as
//!   i32 (`4096 + 64s`); then each row's `Σ_s scale_s · (−128 · Σ(q − 32))`
//!   as i32 (5120); then `d` as f32 (5184). Prepared activations (320
//!   bytes): `d` as f32, then from the block's second cache line (64) the
//!   quants plus 128, unsigned, so that signed weights meet unsigned
//!   activations in `vpdpbusd`; the super-block sum starts from the row's
//!   stored term, which takes the 128 back.
//! * Q8_0 as i16 (AVX2, 1088 bytes per 32 values): for pair `k` in 0..16,
//!   64 bytes holding quants `2k, 2k+1` of each row as an i16 pair; then the
//!   rows' 16 scales as f32. Prepared activations (68 bytes): the 32 quants
//!   as i16 and the scale as f32. `vpmaddubsw` would saturate on full 8-bit
//!   quants against 8-bit activations, so these are multiplied with
//!   `vpmaddwd`, two values per lane.

use half::f16;

use crate::GgmlType;
use crate::scalar::{f16f, k4_scales_mins, row_blocks};

/// Weight rows in a panel: one per 32-bit lane of a 512-bit vector.
pub const PANEL_ROWS: usize = 16;
/// Tokens per call of a wide panel kernel (a narrow one takes half).
pub const PANEL_TOKENS: usize = 8;

/// Tokens per group of a [`PanelFns::many`] kernel: one tile's rows.
pub const MANY_TOKENS: usize = 16;

/// Unpacks up to [`PANEL_ROWS`] consecutive weight rows of `cols` values
/// (`rows`, whole rows) into `out` ([`PanelFns::panel_bytes`] long); missing
/// rows are zeros and yield zeros.
pub type UnpackFn = fn(cols: usize, rows: &[u8], out: &mut [u8]);
/// One quantized activation row → its prepared form ([`PanelFns::act_row_bytes`]).
pub type PrepareFn = fn(cols: usize, act: &[u8], out: &mut [u8]);
/// A float activation row straight to its prepared form: the same bytes as
/// [`PanelFns::prepare`] of the type's activation quantizer's row, in one
/// pass, since a second pass over every row is a noticeable part of a large
/// batch over small matrices.
pub type QuantizePreparedFn = fn(x: &[f32], out: &mut [u8]);
/// A panel against `T` prepared activation rows (`acts`, `T` rows back to
/// back; `T` is [`PANEL_TOKENS`] or half of it): `out[t · 16 + r]` is row
/// `r`'s dot product with token `t`.
pub type PanelFn = fn(cols: usize, panel: &[u8], acts: &[u8], out: &mut [f32]);

/// The panel functions of one weight type on one ISA.
#[derive(Clone, Copy, Debug)]
pub struct PanelFns {
    /// Weight rows into a panel.
    pub unpack: UnpackFn,
    /// A quantized activation row into its prepared form.
    pub prepare: PrepareFn,
    /// Where the ISA has one: quantizing and preparing in one pass.
    pub quantize_prepared: Option<QuantizePreparedFn>,
    /// Against [`PANEL_TOKENS`] tokens.
    pub wide: PanelFn,
    /// Against [`PANEL_TOKENS`]` / 2` tokens.
    pub narrow: PanelFn,
    /// Where the ISA has one: two panels back to back against
    /// [`PANEL_TOKENS`] tokens (`out` holds the first panel's outputs, then
    /// the second's), each activation load feeding both; every output's
    /// bits are `wide`'s.
    pub pair: Option<PanelFn>,
    /// Where the ISA has one: against any whole number of
    /// [`MANY_TOKENS`]-token groups (the output's length says how many),
    /// each panel block prepared once for all of them; every output's bits
    /// are `wide`'s.
    pub many: Option<PanelFn>,
    /// Panel bytes per weight block.
    pub block_bytes: usize,
    /// Prepared activation bytes per weight block.
    pub act_block_bytes: usize,
    /// Values per weight block.
    pub block_values: usize,
    /// Batches of at least this many tokens take the panels: below it,
    /// unpacking a panel costs more than the tiles' shuffles it saves.
    pub min_tokens: usize,
}

impl PanelFns {
    /// Bytes of a panel of rows of `cols` values.
    pub fn panel_bytes(&self, cols: usize) -> usize {
        cols / self.block_values * self.block_bytes
    }
    /// Bytes of one prepared activation row of `cols` values.
    pub fn act_row_bytes(&self, cols: usize) -> usize {
        cols / self.block_values * self.act_block_bytes
    }
}

/// Bytes per block of the legacy panel and of its prepared activations.
pub(crate) const LEGACY_BLOCK: usize = 576;
pub(crate) const LEGACY_ACT: usize = 40;
/// Bytes per block of the Q4_1 and Q5_1 panel; their prepared activations
/// take [`LEGACY_ACT`] bytes.
pub(crate) const OFFSET_BLOCK: usize = 640;
/// Bytes per block of the Q8_0 i16 panel and of its prepared activations.
pub(crate) const Q8_0_I16_BLOCK: usize = 1088;
pub(crate) const Q8_0_I16_ACT: usize = 68;
/// Bytes per super-block of the Q4_K panel and of its prepared activations.
pub(crate) const Q4_K_BLOCK: usize = 4992;
pub(crate) const Q4_K_ACT: usize = 320;
/// Where a prepared Q4_K block's 32-value sums and its quants start.
pub(crate) const Q4_K_ACT_SUMS: usize = 4;
pub(crate) const Q4_K_ACT_QUANTS: usize = 64;
/// Bytes per super-block of the Q2_K panel; its prepared activations take
/// [`Q4_K_ACT`] bytes, with sixteen sums.
pub(crate) const Q2_K_BLOCK: usize = 5760;
/// Bytes per super-block of the Q6_K panel and of its prepared activations.
pub(crate) const Q6_K_BLOCK: usize = 5248;
pub(crate) const Q6_K_ACT: usize = 320;
/// Where a prepared Q6_K block's quants start.
pub(crate) const Q6_K_ACT_QUANTS: usize = 64;
/// Bytes of a Q8_K block (the K-quants' activations): its scale (f32), 256
/// quants, the sums of each 16 (i16).
pub(crate) const Q8_K_BYTES: usize = 292;

#[inline(always)]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[inline(always)]
fn put(out: &mut [u8], at: usize, bytes: [u8; 4]) {
    out[at..at + 4].copy_from_slice(&bytes);
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16f(f16::from_le_bytes([b[at], b[at + 1]]))
}

/// Checks a panel's rows and output and returns (blocks per row, rows given).
pub(crate) fn panel_shape(
    ty: GgmlType,
    cols: usize,
    rows: &[u8],
    out: &[u8],
    block: usize,
) -> (usize, usize) {
    let wrow = cols / ty.block_size() * ty.type_size();
    assert!(
        wrow > 0 && rows.len().is_multiple_of(wrow) && rows.len() <= PANEL_ROWS * wrow,
        "{ty} panel: {} bytes is not 1 to 16 rows of {cols} values",
        rows.len()
    );
    let nb = row_blocks(ty, cols, &rows[..wrow]);
    assert_eq!(out.len(), nb * block, "{ty} panel size");
    (nb, rows.len() / wrow)
}

/// The legacy types' unsigned quant dwords: dword `k` (values `4k..4k+4`)
/// of a block, as `w + 2^shift`.
#[inline(always)]
fn q8_0_dwords(b: &[u8; 34]) -> [u32; 8] {
    std::array::from_fn(|k| u32_at(b, 2 + 4 * k) ^ 0x8080_8080)
}
/// The four-bit quants whose nibbles start at byte `at` of block `b`.
#[inline(always)]
fn q4_dwords(b: &[u8], at: usize) -> [u32; 8] {
    std::array::from_fn(|k| (u32_at(b, at + 4 * (k % 4)) >> (4 * (k / 4))) & 0x0F0F_0F0F)
}
/// The five-bit quants whose high bits start at byte `qh` of block `b`
/// and whose nibbles follow them.
#[inline(always)]
fn q5_dwords(b: &[u8], qh: usize) -> [u32; 8] {
    let high_bits = u32_at(b, qh);
    let low = q4_dwords(b, qh + 4);
    std::array::from_fn(|k| {
        let high = (high_bits >> (4 * k)) & 0xF;
        // Bit e of `high` → bit 4 of byte e.
        let spread = (high & 1) | (high & 2) << 7 | (high & 4) << 14 | (high & 8) << 21;
        low[k] | spread << 4
    })
}
#[inline(always)]
fn q4_0_dwords(b: &[u8; 18]) -> [u32; 8] {
    q4_dwords(b, 2)
}
#[inline(always)]
fn q5_0_dwords(b: &[u8; 22]) -> [u32; 8] {
    q5_dwords(b, 2)
}
#[inline(always)]
fn q4_1_dwords(b: &[u8; 20]) -> [u32; 8] {
    q4_dwords(b, 4)
}
#[inline(always)]
fn q5_1_dwords(b: &[u8; 24]) -> [u32; 8] {
    q5_dwords(b, 4)
}

/// Calls `f(r, block, panel block)` for every `TS`-byte block of every
/// row given, in a panel of `BLOCK`-byte blocks that starts zeroed where
/// fewer than sixteen rows are given.
#[inline(always)]
fn for_each_block<const TS: usize, const BLOCK: usize>(
    ty: GgmlType,
    cols: usize,
    rows: &[u8],
    out: &mut [u8],
    mut f: impl FnMut(usize, &[u8; TS], &mut [u8; BLOCK]),
) {
    let (nb, given) = panel_shape(ty, cols, rows, out, BLOCK);
    if given < PANEL_ROWS {
        out.fill(0);
    }
    for r in 0..given {
        let row = &rows[r * nb * TS..(r + 1) * nb * TS];
        for (b, dst) in row.chunks_exact(TS).zip(out.chunks_exact_mut(BLOCK)) {
            f(r, b.try_into().unwrap(), dst.try_into().unwrap());
        }
    }
}

/// Rows of a 32-value type into its panel of `BLOCK`-byte blocks: each
/// block's quant dwords (`dwords`), then its scales by `meta`.
#[inline(always)]
fn unpack_dwords<const TS: usize, const BLOCK: usize>(
    ty: GgmlType,
    cols: usize,
    rows: &[u8],
    out: &mut [u8],
    dwords: impl Fn(&[u8; TS]) -> [u32; 8],
    meta: fn(usize, &[u8], &mut [u8]),
) {
    for_each_block::<TS, BLOCK>(ty, cols, rows, out, |r, b, dst| {
        for (k, q) in dwords(b).into_iter().enumerate() {
            put(dst, 64 * k + 4 * r, q.to_le_bytes());
        }
        meta(r, b, dst);
    });
}

/// Row `r`'s `d` of a legacy block `b` into panel block `dst`.
#[inline(always)]
pub(crate) fn legacy_meta(r: usize, b: &[u8], dst: &mut [u8]) {
    put(dst, 512 + 4 * r, f16_at(b, 0).to_le_bytes());
}

pub(crate) fn unpack_q8_0(cols: usize, rows: &[u8], out: &mut [u8]) {
    let ty = GgmlType::Q8_0;
    unpack_dwords::<34, LEGACY_BLOCK>(ty, cols, rows, out, q8_0_dwords, legacy_meta);
}
pub(crate) fn unpack_q4_0(cols: usize, rows: &[u8], out: &mut [u8]) {
    let ty = GgmlType::Q4_0;
    unpack_dwords::<18, LEGACY_BLOCK>(ty, cols, rows, out, q4_0_dwords, legacy_meta);
}
pub(crate) fn unpack_q5_0(cols: usize, rows: &[u8], out: &mut [u8]) {
    let ty = GgmlType::Q5_0;
    unpack_dwords::<22, LEGACY_BLOCK>(ty, cols, rows, out, q5_0_dwords, legacy_meta);
}

/// Row `r`'s `d` and `m` of a Q4_1 or Q5_1 block `b` into panel block `dst`.
#[inline(always)]
pub(crate) fn offset_meta(r: usize, b: &[u8], dst: &mut [u8]) {
    put(dst, 512 + 4 * r, f16_at(b, 0).to_le_bytes());
    put(dst, 576 + 4 * r, f16_at(b, 2).to_le_bytes());
}

/// [`offset_meta`] of a Q4_1 block, as the SIMD unpackers take it.
pub(crate) fn q4_1_meta(r: usize, b: &[u8; 20], dst: &mut [u8; OFFSET_BLOCK]) {
    offset_meta(r, b, dst);
}
/// [`offset_meta`] of a Q5_1 block, as the SIMD unpackers take it.
pub(crate) fn q5_1_meta(r: usize, b: &[u8; 24], dst: &mut [u8; OFFSET_BLOCK]) {
    offset_meta(r, b, dst);
}

/// Q4_1 and Q5_1 rows (`d`, `m`, unsigned quants) into their panel: the
/// quant dwords as the legacy panel holds them, then the rows' `d` and
/// their `m` as f32.
pub(crate) fn unpack_q4_1(cols: usize, rows: &[u8], out: &mut [u8]) {
    let ty = GgmlType::Q4_1;
    unpack_dwords::<20, OFFSET_BLOCK>(ty, cols, rows, out, q4_1_dwords, offset_meta);
}
pub(crate) fn unpack_q5_1(cols: usize, rows: &[u8], out: &mut [u8]) {
    let ty = GgmlType::Q5_1;
    unpack_dwords::<24, OFFSET_BLOCK>(ty, cols, rows, out, q5_1_dwords, offset_meta);
}

/// Q8_1 activations for the Q4_1 and Q5_1 panels: the quants, `d` and
/// `s` (`d · Σa`) as f32.
pub(crate) fn prepare_q8_1(cols: usize, act: &[u8], out: &mut [u8]) {
    let nb = row_blocks(GgmlType::Q8_1, cols, act);
    assert_eq!(out.len(), nb * LEGACY_ACT, "prepared Q8_1 row size");
    for (b, dst) in act.chunks_exact(36).zip(out.chunks_exact_mut(LEGACY_ACT)) {
        dst[..32].copy_from_slice(&b[4..]);
        put(dst, 32, f16_at(b, 0).to_le_bytes());
        put(dst, 36, f16_at(b, 2).to_le_bytes());
    }
}

/// Q8_0 activations for weights offset by `2^shift`.
fn prepare_legacy(shift: u32, cols: usize, act: &[u8], out: &mut [u8]) {
    let nb = row_blocks(GgmlType::Q8_0, cols, act);
    assert_eq!(out.len(), nb * LEGACY_ACT, "prepared Q8_0 row size");
    for (b, dst) in act.chunks_exact(34).zip(out.chunks_exact_mut(LEGACY_ACT)) {
        dst[..32].copy_from_slice(&b[2..]);
        put(dst, 32, f16_at(b, 0).to_le_bytes());
        // |Σa| ≤ 32·128 = 2^12: the offset fits an i32 for any shift ≤ 18.
        let sum: i32 = b[2..].iter().map(|&q| q as i8 as i32).sum();
        put(dst, 36, (-(sum << shift)).to_le_bytes());
    }
}

pub(crate) fn prepare_q8_0(cols: usize, act: &[u8], out: &mut [u8]) {
    prepare_legacy(7, cols, act, out);
}
pub(crate) fn prepare_q4_0(cols: usize, act: &[u8], out: &mut [u8]) {
    prepare_legacy(3, cols, act, out);
}
pub(crate) fn prepare_q5_0(cols: usize, act: &[u8], out: &mut [u8]) {
    prepare_legacy(4, cols, act, out);
}

/// The Q8_0 i16 panel (see the module doc).
pub(crate) fn unpack_q8_0_i16(cols: usize, rows: &[u8], out: &mut [u8]) {
    let (nb, given) = panel_shape(GgmlType::Q8_0, cols, rows, out, Q8_0_I16_BLOCK);
    if given < PANEL_ROWS {
        out.fill(0);
    }
    for r in 0..given {
        let row = &rows[r * nb * 34..(r + 1) * nb * 34];
        for (b, dst) in row
            .chunks_exact(34)
            .zip(out.chunks_exact_mut(Q8_0_I16_BLOCK))
        {
            for k in 0..16 {
                let (lo, hi) = (b[2 + 2 * k] as i8 as i16, b[3 + 2 * k] as i8 as i16);
                let pair = lo as u16 as u32 | (hi as u16 as u32) << 16;
                put(dst, 64 * k + 4 * r, pair.to_le_bytes());
            }
            put(dst, 1024 + 4 * r, f16_at(b, 0).to_le_bytes());
        }
    }
}

/// Q8_0 activations for the Q8_0 i16 panel.
pub(crate) fn prepare_q8_0_i16(cols: usize, act: &[u8], out: &mut [u8]) {
    let nb = row_blocks(GgmlType::Q8_0, cols, act);
    assert_eq!(out.len(), nb * Q8_0_I16_ACT, "prepared Q8_0 row size");
    for (b, dst) in act.chunks_exact(34).zip(out.chunks_exact_mut(Q8_0_I16_ACT)) {
        for (d, &q) in dst[..64].chunks_exact_mut(2).zip(&b[2..]) {
            d.copy_from_slice(&(q as i8 as i16).to_le_bytes());
        }
        put(dst, 64, f16_at(b, 0).to_le_bytes());
    }
}

/// Row `r`'s Q4_K scales, mins, `d` and `dmin` of block `b` in its panel block.
#[inline(always)]
pub(crate) fn q4_k_meta(r: usize, b: &[u8; 144], dst: &mut [u8; Q4_K_BLOCK]) {
    let (scales, mins) = k4_scales_mins(b[4..16].try_into().unwrap());
    for (s, &scale) in scales.iter().enumerate() {
        put(dst, 4096 + 64 * s + 4 * r, (scale as i32).to_le_bytes());
    }
    for p in 0..4 {
        let pair = mins[2 * p] as u32 | (mins[2 * p + 1] as u32) << 16;
        put(dst, 4608 + 64 * p + 4 * r, pair.to_le_bytes());
    }
    put(dst, 4864 + 4 * r, f16_at(b, 0).to_le_bytes());
    put(dst, 4928 + 4 * r, f16_at(b, 2).to_le_bytes());
}

/// Row `r`'s sub-block scales (i32), mins (i16 pairs), `d` and `dmin` (f32)
/// of Q2_K block `b` into panel block `dst`.
pub(crate) fn q2_k_meta(r: usize, b: &[u8; 84], dst: &mut [u8; Q2_K_BLOCK]) {
    for (s, &sm) in b[..16].iter().enumerate() {
        put(
            dst,
            4096 + 64 * s + 4 * r,
            u32::from(sm & 0x0F).to_le_bytes(),
        );
    }
    for p in 0..8 {
        let pair = u32::from(b[2 * p] >> 4) | u32::from(b[2 * p + 1] >> 4) << 16;
        put(dst, 5120 + 64 * p + 4 * r, pair.to_le_bytes());
    }
    put(dst, 5632 + 4 * r, f16_at(b, 80).to_le_bytes());
    put(dst, 5696 + 4 * r, f16_at(b, 82).to_le_bytes());
}

/// Dword `j` of sub-block `s` (values `16s + 4j..16s + 4j + 4`) of a Q2_K
/// block: value `128h + 32k + l` is bits `2k..2k+2` of quant byte `32h + l`.
#[inline(always)]
fn q2_k_dword(b: &[u8; 84], s: usize, j: usize) -> u32 {
    let (h, k, l) = (s / 8, s % 8 / 2, 16 * (s % 2) + 4 * j);
    (u32_at(b, 16 + 32 * h + l) >> (2 * k)) & 0x0303_0303
}

pub(crate) fn unpack_q2_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    for_each_block::<84, Q2_K_BLOCK>(GgmlType::Q2_K, cols, rows, out, |r, b, dst| {
        for s in 0..16 {
            for j in 0..4 {
                let q = q2_k_dword(b, s, j);
                put(dst, 256 * s + 64 * j + 4 * r, q.to_le_bytes());
            }
        }
        q2_k_meta(r, b, dst);
    });
}

/// Q8_K activations for the Q2_K panel: `d` as f32, the sixteen 16-value
/// sums as i16 from [`Q4_K_ACT_SUMS`], the quants from [`Q4_K_ACT_QUANTS`].
pub(crate) fn prepare_q2_k(cols: usize, act: &[u8], out: &mut [u8]) {
    prepare_q8_k(cols, act, out, |b, sums| {
        sums[..32].copy_from_slice(&b[260..292])
    });
}

/// A Q8_K row prepared for a K-quant panel ([`Q4_K_ACT`] bytes a block):
/// `d` as f32, the sums that `sums` writes from [`Q4_K_ACT_SUMS`] (zeros
/// up to the quants), the quants from [`Q4_K_ACT_QUANTS`].
fn prepare_q8_k(cols: usize, act: &[u8], out: &mut [u8], sums: impl Fn(&[u8], &mut [u8])) {
    let nb = row_blocks(GgmlType::Q8_K, cols, act);
    assert_eq!(out.len(), nb * Q4_K_ACT, "prepared Q8_K row size");
    for (b, dst) in act
        .chunks_exact(Q8_K_BYTES)
        .zip(out.chunks_exact_mut(Q4_K_ACT))
    {
        dst[..4].copy_from_slice(&b[..4]);
        dst[Q4_K_ACT_QUANTS..].copy_from_slice(&b[4..260]);
        let at = &mut dst[Q4_K_ACT_SUMS..Q4_K_ACT_QUANTS];
        at.fill(0);
        sums(b, at);
    }
}

/// The reference Q4_K unpacker (the AVX-512 one transposes whole panels
/// with vector shuffles and must produce the same bytes).
pub(crate) fn unpack_q4_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    for_each_block::<144, Q4_K_BLOCK>(GgmlType::Q4_K, cols, rows, out, |r, b, dst| {
        // Values 64j..64j+32 are the low nibbles of bytes 32j.., the next 32 the high ones.
        for s in 0..8 {
            for k in 0..8 {
                let q = (u32_at(b, 16 + 32 * (s / 2) + 4 * k) >> (4 * (s % 2))) & 0x0F0F_0F0F;
                put(dst, 512 * s + 64 * k + 4 * r, q.to_le_bytes());
            }
        }
        q4_k_meta(r, b, dst);
    });
}

/// Q8_K activations for the Q4_K panel: the eight 32-value sums.
pub(crate) fn prepare_q4_k(cols: usize, act: &[u8], out: &mut [u8]) {
    prepare_q8_k(cols, act, out, |b, sums| {
        for s in 0..8 {
            let bsum = |i: usize| i16::from_le_bytes([b[260 + 2 * i], b[261 + 2 * i]]);
            // |Σ| ≤ 32·128: an i16.
            let sum = bsum(2 * s) + bsum(2 * s + 1);
            sums[2 * s..2 * s + 2].copy_from_slice(&sum.to_le_bytes());
        }
    });
}

/// Row `r`'s Q6_K scales and `d` of block `b` in its panel block.
#[inline(always)]
pub(crate) fn q6_k_meta(r: usize, b: &[u8; 210], dst: &mut [u8; Q6_K_BLOCK]) {
    for s in 0..16 {
        put(
            dst,
            4096 + 64 * s + 4 * r,
            (b[192 + s] as i8 as i32).to_le_bytes(),
        );
    }
    put(dst, 5184 + 4 * r, f16_at(b, 208).to_le_bytes());
}

/// The reference Q6_K unpacker (the AVX-512 one transposes whole panels
/// with vector shuffles and must produce the same bytes).
pub(crate) fn unpack_q6_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    let (nb, given) = panel_shape(GgmlType::Q6_K, cols, rows, out, Q6_K_BLOCK);
    if given < PANEL_ROWS {
        out.fill(0);
    }
    for r in 0..given {
        let row = &rows[r * nb * 210..(r + 1) * nb * 210];
        for (b, dst) in row.chunks_exact(210).zip(out.chunks_exact_mut(Q6_K_BLOCK)) {
            let b: &[u8; 210] = b.try_into().unwrap();
            let dst: &mut [u8; Q6_K_BLOCK] = dst.try_into().unwrap();
            // Σq per 16-value sub-block (SWAR byte sums: 4 × 63 < 256).
            let mut sums = [0i32; 16];
            for h in 0..2 {
                for g in 0..4 {
                    for l in (0..32).step_by(4) {
                        // Value v = 128h + 32g + l: low 4 bits from ql[64h + 32(g % 2) + l]
                        // (nibble g / 2), high 2 bits from qh[32h + l] (bits 2g..2g+2).
                        let low =
                            (u32_at(b, 64 * h + 32 * (g % 2) + l) >> (4 * (g / 2))) & 0x0F0F_0F0F;
                        let high = (u32_at(b, 128 + 32 * h + l) >> (2 * g)) & 0x0303_0303;
                        let q = low | high << 4;
                        let (s, k) = (8 * h + 2 * g + l / 16, l % 16 / 4);
                        sums[s] += (q.wrapping_mul(0x0101_0101) >> 24) as i32;
                        // q − 32 per byte: flip bit 5, then sign-extend from it.
                        let x = q ^ 0x2020_2020;
                        let sign = x & 0x2020_2020;
                        put(
                            dst,
                            256 * s + 64 * k + 4 * r,
                            (x | sign << 1 | sign << 2).to_le_bytes(),
                        );
                    }
                }
            }
            let offset: i32 = sums
                .iter()
                .enumerate()
                .map(|(s, &sum)| b[192 + s] as i8 as i32 * -128 * (sum - 16 * 32))
                .sum();
            put(dst, 5120 + 4 * r, offset.to_le_bytes());
            q6_k_meta(r, b, dst);
        }
    }
}

pub(crate) fn prepare_q6_k(cols: usize, act: &[u8], out: &mut [u8]) {
    let nb = row_blocks(GgmlType::Q8_K, cols, act);
    assert_eq!(out.len(), nb * Q6_K_ACT, "prepared Q8_K row size");
    for (b, dst) in act
        .chunks_exact(Q8_K_BYTES)
        .zip(out.chunks_exact_mut(Q6_K_ACT))
    {
        dst[..4].copy_from_slice(&b[..4]);
        dst[4..Q6_K_ACT_QUANTS].fill(0);
        for (d, &q) in dst[Q6_K_ACT_QUANTS..].iter_mut().zip(&b[4..260]) {
            *d = q ^ 0x80;
        }
    }
}

mod stored;
pub use stored::*;
