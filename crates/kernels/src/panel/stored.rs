//! Stored panels: a Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q4_K or Q6_K matrix whose rows come
//! in whole panels can be *stored* as panels (rewritten once, at load).
//! Decoding then reads sixteen rows per 512-bit vector with one broadcast
//! activation dword per `vpdpbusd` (eight rows per 256-bit vector and
//! `vpmaddubsw` on AVX2), far fewer instructions per byte than the kernels
//! over ggml's rows, so single-token matmuls stay memory-bound. Each stored
//! layout is exactly the size of its rows: a Q8_0 block is the panel's own
//! (no call unpacks it); the other types keep their
//! quants packed, rebuilt in registers (or, for large batches, unpacked per
//! call like the rows). Rows read back and dequantized go through ggml's
//! layout, rebuilt block by block.

use super::*;

/// Bytes per block of a stored Q8_0 panel: the legacy panel's 512 bytes of
/// quants (`w + 128`), then the sixteen rows' scales as the file's f16. That
/// is exactly the sixteen rows' blocks, so a matrix keeps its size stored.
pub(crate) const STORED_Q8_0_BLOCK: usize = 544;

/// Sixteen whole weight rows → their stored panel (`out`, the same length).
pub type StoreFn = fn(cols: usize, rows: &[u8], out: &mut [u8]);
/// Row `r` of a stored panel back in ggml's layout (`out`: one row).
pub type StoredRowFn = fn(cols: usize, panel: &[u8], r: usize, out: &mut [u8]);
/// Row `r` of a stored panel dequantized (`out`: the row's values), with
/// the bits of dequantizing it from ggml's layout.
pub type StoredDequantizeFn = fn(cols: usize, panel: &[u8], r: usize, out: &mut [f32]);
/// Stored panels back to back against one prepared activation row:
/// `out[16·p + r]` is panel `p`'s row `r`, with the row kernel's bits.
pub type StoredDotFn = fn(cols: usize, panels: &[u8], act: &[u8], out: &mut [f32]);

/// The stored-panel functions of one weight type on one ISA. Activations
/// are prepared as for the type's [`PanelFns`].
#[derive(Clone, Copy, Debug)]
pub struct StoredPanelFns {
    /// Sixteen rows into their stored panel (once, at load).
    pub store: StoreFn,
    /// One row of a stored panel back in ggml's layout.
    pub row: StoredRowFn,
    /// Embedding lookups in a stored token embedding (a tied LM head).
    pub dequantize_row: StoredDequantizeFn,
    /// One token (decoding), over any number of whole panels.
    pub single: StoredDotFn,
    /// Whether [`single`](Self::single) reads the type's quantized
    /// activation row as it is instead of the row prepared for the panels.
    pub single_reads_quantized: bool,
    /// [`PANEL_TOKENS`] tokens on one stored panel.
    pub wide: PanelFn,
    /// Half as many.
    pub narrow: PanelFn,
    /// Where the ISA has one: two stored panels back to back against
    /// [`PANEL_TOKENS`] tokens ([`PanelFns::pair`]).
    pub pair: Option<PanelFn>,
    /// Where the ISA has one: whole groups of [`MANY_TOKENS`] tokens on one
    /// stored panel ([`PanelFns::many`]).
    pub many: Option<PanelFn>,
    /// Stored bytes per weight block.
    pub block_bytes: usize,
    /// Where a stored block is packed tighter than the type's panel: a
    /// stored panel → that panel ([`UnpackFn`] over its bytes), which
    /// batches of [`unpack_tokens`](Self::unpack_tokens) or more multiply instead of
    /// expanding every block again for each group of tokens.
    pub unpack: Option<UnpackFn>,
    /// The fewest tokens that [`unpack`](Self::unpack) takes (usually
    /// [`STORED_UNPACK_TOKENS`]).
    pub unpack_tokens: usize,
}

/// Batches of at least this many tokens unpack stored panels that have an
/// unpacker: the stored kernels expand each block again per eight tokens,
/// which beats unpacking for small batches and loses to it for large ones.
pub const STORED_UNPACK_TOKENS: usize = 64;

impl StoredPanelFns {
    /// `p` (the type's panel functions) multiplying stored panels in place
    /// of unpacked ones.
    pub fn panel_fns(&self, p: PanelFns) -> PanelFns {
        PanelFns {
            wide: self.wide,
            narrow: self.narrow,
            pair: self.pair,
            many: self.many,
            block_bytes: self.block_bytes,
            ..p
        }
    }
}

/// Bytes per block of a stored Q5_0 panel, exactly the sixteen rows'
/// blocks (22 bytes each): for `j` in 0..4, 64 bytes holding bytes
/// `4j..4j+4` of each row's low-nibble pairs (values `4j..4j+4` below,
/// `16+4j..` above); then for dword `k` in 0..8 a 64-bit mask whose bit
/// `4r + i` is the fifth bit of row `r`'s value `4k + i` (an AVX-512 byte
/// mask of the legacy panel's dword `k`); then the rows' scales as f16.
/// A kernel rebuilds the legacy panel's quants `w + 16` with two ands, a
/// shift and one masked add per 64 bytes.
pub(crate) const STORED_Q5_0_BLOCK: usize = 352;

/// Bytes per block of a stored Q4_0 panel, exactly the sixteen rows'
/// blocks (18 bytes each): for `j` in 0..4, 64 bytes holding bytes
/// `4j..4j+4` of each row's nibble pairs (values `4j..4j+4` below,
/// `16+4j..` above), as in [`STORED_Q5_0_BLOCK`]; then the rows' scales as
/// f16. A kernel rebuilds the legacy panel's quants `w + 8` with two ands
/// and a shift per 64 bytes.
pub(crate) const STORED_Q4_0_BLOCK: usize = 288;

/// Bytes per block of a stored Q4_1 panel, exactly the sixteen rows'
/// blocks (20 bytes each): a stored Q4_0 block of the quants and `d`
/// ([`STORED_Q4_0_BLOCK`]), then the rows' `m` as f16.
pub(crate) const STORED_Q4_1_BLOCK: usize = STORED_Q4_0_BLOCK + 32;

/// Bytes per block of a stored Q5_1 panel, exactly the sixteen rows'
/// blocks (24 bytes each): a stored Q5_0 block of the quants and `d`
/// ([`STORED_Q5_0_BLOCK`]), then the rows' `m` as f16.
pub(crate) const STORED_Q5_1_BLOCK: usize = STORED_Q5_0_BLOCK + 32;

/// Checks a stored panel's shape (`block` bytes per stored block of `ty`);
/// returns its blocks per row.
fn stored_shape(ty: GgmlType, block: usize, cols: usize, panel_len: usize) -> usize {
    let bs = ty.block_size();
    assert!(
        cols > 0 && cols.is_multiple_of(bs),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / bs;
    assert_eq!(panel_len, nb * block, "stored {ty} panel size");
    nb
}

/// Checks a stored-row call: `r` names one of a panel's rows and `out`
/// holds `len`.
fn check_stored_row(r: usize, out: usize, len: usize) {
    assert!(
        r < PANEL_ROWS,
        "a panel has {PANEL_ROWS} rows, not {}",
        r + 1
    );
    assert_eq!(out, len, "stored row size");
}

/// Sixteen rows' blocks (`TS` bytes) → stored blocks, each through `block`.
fn store_blocks<const TS: usize, const SB: usize>(
    ty: GgmlType,
    cols: usize,
    rows: &[u8],
    out: &mut [u8],
    block: impl Fn(usize, &[u8; TS], &mut [u8; SB]),
) {
    let nb = stored_shape(ty, SB, cols, out.len());
    assert_eq!(rows.len(), out.len(), "a stored panel is its sixteen rows");
    let wrow = nb * TS;
    for (i, dst) in out.chunks_exact_mut(SB).enumerate() {
        let dst: &mut [u8; SB] = dst.try_into().unwrap();
        for r in 0..PANEL_ROWS {
            block(r, rows[r * wrow + i * TS..][..TS].try_into().unwrap(), dst);
        }
    }
}

/// Row `r` of a stored panel back in ggml's layout, block by block
/// through `block` (a stored block and a row → that row's block).
fn stored_row<const SB: usize, const TS: usize>(
    ty: GgmlType,
    cols: usize,
    panel: &[u8],
    r: usize,
    out: &mut [u8],
    block: fn(&[u8; SB], usize) -> [u8; TS],
) {
    let nb = stored_shape(ty, SB, cols, panel.len());
    check_stored_row(r, out.len(), nb * TS);
    for (src, b) in panel.chunks_exact(SB).zip(out.chunks_exact_mut(TS)) {
        b.copy_from_slice(&block(src.try_into().unwrap(), r));
    }
}

/// A block's bytes on the alignment `lamina_quant`'s block types want.
#[repr(C, align(8))]
struct Aligned<const N: usize>([u8; N]);

/// Row `r` of a stored panel dequantized: each block rebuilt in ggml's
/// layout by `block`, then dequantized by `lamina_quant`, so the values
/// have the bits of dequantizing the file's row.
fn stored_dequantize_row<const SB: usize, const TS: usize>(
    ty: GgmlType,
    cols: usize,
    panel: &[u8],
    r: usize,
    out: &mut [f32],
    block: fn(&[u8; SB], usize) -> [u8; TS],
) {
    stored_shape(ty, SB, cols, panel.len());
    check_stored_row(r, out.len(), cols);
    for (src, y) in panel
        .chunks_exact(SB)
        .zip(out.chunks_exact_mut(ty.block_size()))
    {
        let b = Aligned(block(src.try_into().unwrap(), r));
        lamina_quant::dequantize_row(ty, &b.0, y).expect("one whole, aligned block");
    }
}

pub(crate) fn store_q8_0(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q8_0,
        cols,
        rows,
        out,
        |r, b: &[u8; 34], dst: &mut [u8; STORED_Q8_0_BLOCK]| {
            for (k, q) in q8_0_dwords(b).into_iter().enumerate() {
                put(dst, 64 * k + 4 * r, q.to_le_bytes());
            }
            dst[512 + 2 * r..514 + 2 * r].copy_from_slice(&b[..2]);
        },
    );
}

/// Row `r`'s block, in ggml's layout, of a stored Q8_0 block.
#[inline(always)]
fn stored_q8_0_row_block(src: &[u8; STORED_Q8_0_BLOCK], r: usize) -> [u8; 34] {
    let mut b = [0u8; 34];
    b[..2].copy_from_slice(&src[512 + 2 * r..514 + 2 * r]);
    for k in 0..8 {
        put(
            &mut b,
            2 + 4 * k,
            (u32_at(src, 64 * k + 4 * r) ^ 0x8080_8080).to_le_bytes(),
        );
    }
    b
}

pub(crate) fn stored_row_q8_0(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q8_0, cols, panel, r, out, stored_q8_0_row_block);
}

pub(crate) fn stored_dequantize_row_q8_0(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q8_0, cols, panel, r, out, stored_q8_0_row_block);
}

/// Row `r`'s five-bit quants (`qh`, then the nibbles at `qs`) into the
/// first 320 bytes of a stored Q5_0 or Q5_1 block.
#[inline(always)]
fn store_q5_quants(r: usize, qh: u32, qs: &[u8], dst: &mut [u8]) {
    store_q4_quants(r, qs, dst);
    // Nibble `k` of the row's `qh` into nibble `r` of mask `k`: one byte
    // each, where a read-modify-write of the whole mask per row waited on
    // the last row's.
    let shift = 4 * (r % 2);
    for k in 0..8 {
        let at = 256 + 8 * k + r / 2;
        let nibble = ((qh >> (4 * k)) & 0xF) as u8;
        dst[at] = (dst[at] & !(0xF << shift)) | nibble << shift;
    }
}

pub(crate) fn store_q5_0(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q5_0,
        cols,
        rows,
        out,
        |r, b: &[u8; 22], dst: &mut [u8; STORED_Q5_0_BLOCK]| {
            store_q5_quants(r, u32_at(b, 2), &b[6..], dst);
            dst[320 + 2 * r..322 + 2 * r].copy_from_slice(&b[..2]);
        },
    );
}

pub(crate) fn store_q5_1(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q5_1,
        cols,
        rows,
        out,
        |r, b: &[u8; 24], dst: &mut [u8; STORED_Q5_1_BLOCK]| {
            store_q5_quants(r, u32_at(b, 4), &b[8..], dst);
            dst[320 + 2 * r..322 + 2 * r].copy_from_slice(&b[..2]);
            dst[352 + 2 * r..354 + 2 * r].copy_from_slice(&b[2..4]);
        },
    );
}

/// Row `r`'s block, in ggml's layout, of a stored Q5_1 block.
#[inline(always)]
fn stored_q5_1_row_block(src: &[u8; STORED_Q5_1_BLOCK], r: usize) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..2].copy_from_slice(&src[320 + 2 * r..322 + 2 * r]);
    b[2..4].copy_from_slice(&src[352 + 2 * r..354 + 2 * r]);
    put(&mut b, 4, stored_q5_0_qh(src, r).to_le_bytes());
    stored_row_nibbles(src, r, &mut b[8..]);
    b
}

pub(crate) fn stored_row_q5_1(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q5_1, cols, panel, r, out, stored_q5_1_row_block);
}

pub(crate) fn stored_dequantize_row_q5_1(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q5_1, cols, panel, r, out, stored_q5_1_row_block);
}

/// Row `r`'s fifth bits (ggml's `qh`) of a stored Q5_0 block.
#[inline(always)]
fn stored_q5_0_qh(src: &[u8], r: usize) -> u32 {
    (0..8)
        .map(|k| {
            let mask = u64::from_le_bytes(src[256 + 8 * k..264 + 8 * k].try_into().unwrap());
            (((mask >> (4 * r)) & 0xF) as u32) << (4 * k)
        })
        .fold(0, |a, b| a | b)
}

/// Row `r`'s block, in ggml's layout, of a stored Q5_0 block.
#[inline(always)]
fn stored_q5_0_row_block(src: &[u8; STORED_Q5_0_BLOCK], r: usize) -> [u8; 22] {
    let mut b = [0u8; 22];
    b[..2].copy_from_slice(&src[320 + 2 * r..322 + 2 * r]);
    put(&mut b, 2, stored_q5_0_qh(src, r).to_le_bytes());
    stored_row_nibbles(src, r, &mut b[6..]);
    b
}

pub(crate) fn stored_row_q5_0(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q5_0, cols, panel, r, out, stored_q5_0_row_block);
}

pub(crate) fn stored_dequantize_row_q5_0(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q5_0, cols, panel, r, out, stored_q5_0_row_block);
}

/// Row `r`'s sixteen nibble bytes, out of the first 256 bytes of a stored
/// Q4_0, Q4_1, Q5_0 or Q5_1 block, into `qs`.
#[inline(always)]
fn stored_row_nibbles(src: &[u8], r: usize, qs: &mut [u8]) {
    for j in 0..4 {
        qs[4 * j..4 * j + 4].copy_from_slice(&src[64 * j + 4 * r..64 * j + 4 * r + 4]);
    }
}

/// Row `r`'s nibbles (at `qs`) into the first 256 bytes of a stored Q4_0
/// or Q4_1 block.
#[inline(always)]
fn store_q4_quants(r: usize, qs: &[u8], dst: &mut [u8]) {
    for j in 0..4 {
        dst[64 * j + 4 * r..64 * j + 4 * r + 4].copy_from_slice(&qs[4 * j..4 * j + 4]);
    }
}

pub(crate) fn store_q4_0(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q4_0,
        cols,
        rows,
        out,
        |r, b: &[u8; 18], dst: &mut [u8; STORED_Q4_0_BLOCK]| {
            store_q4_quants(r, &b[2..], dst);
            dst[256 + 2 * r..258 + 2 * r].copy_from_slice(&b[..2]);
        },
    );
}

pub(crate) fn store_q4_1(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q4_1,
        cols,
        rows,
        out,
        |r, b: &[u8; 20], dst: &mut [u8; STORED_Q4_1_BLOCK]| {
            store_q4_quants(r, &b[4..], dst);
            dst[256 + 2 * r..258 + 2 * r].copy_from_slice(&b[..2]);
            dst[288 + 2 * r..290 + 2 * r].copy_from_slice(&b[2..4]);
        },
    );
}

/// Row `r`'s block, in ggml's layout, of a stored Q4_1 block.
#[inline(always)]
fn stored_q4_1_row_block(src: &[u8; STORED_Q4_1_BLOCK], r: usize) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..2].copy_from_slice(&src[256 + 2 * r..258 + 2 * r]);
    b[2..4].copy_from_slice(&src[288 + 2 * r..290 + 2 * r]);
    stored_row_nibbles(src, r, &mut b[4..]);
    b
}

pub(crate) fn stored_row_q4_1(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q4_1, cols, panel, r, out, stored_q4_1_row_block);
}

pub(crate) fn stored_dequantize_row_q4_1(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q4_1, cols, panel, r, out, stored_q4_1_row_block);
}

/// Row `r`'s block, in ggml's layout, of a stored Q4_0 block.
#[inline(always)]
fn stored_q4_0_row_block(src: &[u8; STORED_Q4_0_BLOCK], r: usize) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..2].copy_from_slice(&src[256 + 2 * r..258 + 2 * r]);
    stored_row_nibbles(src, r, &mut b[2..]);
    b
}

pub(crate) fn stored_row_q4_0(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q4_0, cols, panel, r, out, stored_q4_0_row_block);
}

pub(crate) fn stored_dequantize_row_q4_0(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q4_0, cols, panel, r, out, stored_q4_0_row_block);
}

/// Bytes per super-block of a stored Q4_K panel, exactly the sixteen rows'
/// blocks (144 bytes each): for each pair `j` of 32-value sub-blocks and
/// dword `k` in 0..8, 64 bytes holding bytes `32j + 4k..+4` of each row's
/// quants (sub-block `2j` in the low nibbles, `2j + 1` in the high ones);
/// then the rows' twelve bytes of 6-bit scales and mins as three dwords
/// (`2048 + 64m`); then `d` and `dmin` as f16 (2240, 2272). A kernel
/// rebuilds the Q4_K panel's quants with an and (and a shift), and its
/// scales and mins with a few byte shuffles per super-block.
pub(crate) const STORED_Q4_K_BLOCK: usize = 2304;

pub(crate) fn store_q4_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q4_K,
        cols,
        rows,
        out,
        |r, b: &[u8; 144], dst: &mut [u8; STORED_Q4_K_BLOCK]| {
            stored_q4_k_dwords(r, |at, from| {
                dst[at..at + 4].copy_from_slice(&b[from..from + 4])
            });
            dst[2240 + 2 * r..2242 + 2 * r].copy_from_slice(&b[..2]);
            dst[2272 + 2 * r..2274 + 2 * r].copy_from_slice(&b[2..4]);
        },
    );
}

/// Where each dword of row `r`'s Q4_K block lies in a stored super-block:
/// (stored offset, block offset) for the quants and the scales and mins;
/// `d` and `dmin` go to `2240 + 2r` and `2272 + 2r`. Calls `f(stored,
/// block)` for each, in loops of fixed bounds that the compiler unrolls, so
/// a copy of four bytes per call stays a move (a chain of iterators stayed a
/// loop of a few branches per dword, and loading a model rewrites every
/// matrix through here).
#[inline(always)]
fn stored_q4_k_dwords(r: usize, mut f: impl FnMut(usize, usize)) {
    for j in 0..4 {
        for k in 0..8 {
            f(512 * j + 64 * k + 4 * r, 16 + 32 * j + 4 * k);
        }
    }
    for m in 0..3 {
        f(2048 + 64 * m + 4 * r, 4 + 4 * m);
    }
}

/// Row `r`'s block, in ggml's layout, of a stored Q4_K super-block.
#[inline(always)]
fn stored_q4_k_row_block(src: &[u8; STORED_Q4_K_BLOCK], r: usize) -> [u8; 144] {
    let mut b = [0u8; 144];
    stored_q4_k_dwords(r, |at, to| b[to..to + 4].copy_from_slice(&src[at..at + 4]));
    b[..2].copy_from_slice(&src[2240 + 2 * r..2242 + 2 * r]);
    b[2..4].copy_from_slice(&src[2272 + 2 * r..2274 + 2 * r]);
    b
}

pub(crate) fn stored_row_q4_k(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q4_K, cols, panel, r, out, stored_q4_k_row_block);
}

pub(crate) fn stored_dequantize_row_q4_k(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q4_K, cols, panel, r, out, stored_q4_k_row_block);
}

/// Bytes per super-block of a stored Q6_K panel, exactly the sixteen rows'
/// blocks (210 bytes each), in the order a kernel reads them: for half `h`
/// and dword `k` in 0..8, 192 bytes at `192·(8h + k)`: the rows' high bits
/// `32h + 4k..+4`, then for each pair `p` the rows' low bits
/// `64h + 32p + 4k..+4` (64 bytes each, one row per dword); then the rows'
/// sixteen 8-bit scales as four dwords (`3072 + 64m`); then `d` as f16
/// (3328). A kernel rebuilds each 64 bytes of the Q6_K panel's quants
/// `q − 32` with two shifts, a merge and a subtraction, and the panel's
/// per-row offset from their sums. The high and low bits share one run, so
/// the kernel reads one stream the hardware prefetchers can follow.
pub(crate) const STORED_Q6_K_BLOCK: usize = 3360;

pub(crate) fn store_q6_k(cols: usize, rows: &[u8], out: &mut [u8]) {
    store_blocks(
        GgmlType::Q6_K,
        cols,
        rows,
        out,
        |r, b: &[u8; 210], dst: &mut [u8; STORED_Q6_K_BLOCK]| {
            stored_q6_k_dwords(r, |at, from| {
                dst[at..at + 4].copy_from_slice(&b[from..from + 4])
            });
            dst[3328 + 2 * r..3330 + 2 * r].copy_from_slice(&b[208..210]);
        },
    );
}

/// Where each dword of row `r`'s Q6_K block lies in a stored super-block:
/// `f(stored offset, block offset)` for the high bits, low bits and
/// scales, in loops of fixed bounds as [`stored_q4_k_dwords`]'s.
#[inline(always)]
fn stored_q6_k_dwords(r: usize, mut f: impl FnMut(usize, usize)) {
    // Run `8h + k`: 64 bytes of high bits, then the low bits of both pairs.
    for h in 0..2 {
        for k in 0..8 {
            let at = 192 * (8 * h + k) + 4 * r;
            f(at, 128 + 32 * h + 4 * k);
            for p in 0..2 {
                f(at + 64 + 64 * p, 64 * h + 32 * p + 4 * k);
            }
        }
    }
    for m in 0..4 {
        f(3072 + 64 * m + 4 * r, 192 + 4 * m);
    }
}

/// Row `r`'s block, in ggml's layout, of a stored Q6_K super-block.
#[inline(always)]
fn stored_q6_k_row_block(src: &[u8; STORED_Q6_K_BLOCK], r: usize) -> [u8; 210] {
    let mut b = [0u8; 210];
    stored_q6_k_dwords(r, |at, to| b[to..to + 4].copy_from_slice(&src[at..at + 4]));
    b[208..210].copy_from_slice(&src[3328 + 2 * r..3330 + 2 * r]);
    b
}

pub(crate) fn stored_row_q6_k(cols: usize, panel: &[u8], r: usize, out: &mut [u8]) {
    stored_row(GgmlType::Q6_K, cols, panel, r, out, stored_q6_k_row_block);
}

pub(crate) fn stored_dequantize_row_q6_k(cols: usize, panel: &[u8], r: usize, out: &mut [f32]) {
    stored_dequantize_row(GgmlType::Q6_K, cols, panel, r, out, stored_q6_k_row_block);
}
