//! Activation layout of the 1×8 and 1×4 tiles ([`crate::table::TileFns`]).
//!
//! Eight (or four) consecutive activation rows (quantized by the type's activation
//! quantizer) become one *group*:
//! * Q8_0: per 32-value block, the rows' 32 quants back to back, then their
//!   scales as f32. A tile then reduces the 8 integer
//!   dot products of a block together and scales them with one vector multiply,
//!   instead of converting and broadcasting a scale per row and block.
//! * Every other activation type (Q8_K): the 8 rows as they are, back to back
//!   (the K-quant tiles already scale once per 256-value super-block).

use half::f16;

use crate::GgmlType;

/// Rows in a group of the wide tile (a narrow tile takes [`TILE`]` / 2`).
pub const TILE: usize = 8;

/// Bytes of one packed Q8_0 block of a group of `n` rows: `n` × 32 quants + `n` f32 scales.
pub const fn q8_0_group_block(n: usize) -> usize {
    n * 36
}

/// Bytes of one packed group of `n` rows of `cols` values of activation type `act`.
pub fn group_bytes(act: GgmlType, cols: usize, n: usize) -> usize {
    match act {
        GgmlType::Q8_0 => cols / 32 * q8_0_group_block(n),
        _ => n * (cols / act.block_size() * act.type_size()),
    }
}

/// Whether `act` needs [`pack`] (else a group is the rows as they lie).
pub fn needs_packing(act: GgmlType) -> bool {
    act == GgmlType::Q8_0
}

/// Packs `n` consecutive Q8_0 rows (`rows` = `n` × row bytes) into `out`
/// ([`group_bytes`] long).
pub fn pack(act: GgmlType, cols: usize, n: usize, rows: &[u8], out: &mut [u8]) {
    assert_eq!(act, GgmlType::Q8_0, "only Q8_0 activations are packed");
    let nb = cols / 32;
    let arow = nb * 34;
    let gb = q8_0_group_block(n);
    assert_eq!(rows.len(), n * arow);
    assert_eq!(out.len(), nb * gb);
    for (i, dst) in out.chunks_exact_mut(gb).enumerate() {
        let (quants, scales) = dst.split_at_mut(n * 32);
        for c in 0..n {
            let b = &rows[c * arow + i * 34..][..34];
            quants[c * 32..(c + 1) * 32].copy_from_slice(&b[2..]);
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            scales[c * 4..(c + 1) * 4].copy_from_slice(&d.to_le_bytes());
        }
    }
}
