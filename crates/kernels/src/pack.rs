//! Activation layout of the 1×8 tiles ([`crate::table::Tile8Fn`]).
//!
//! Eight consecutive activation rows (quantized by the type's activation
//! quantizer) become one *group*:
//! * Q8_0: per 32-value block, the 8 rows' 32 quants back to back (256 bytes),
//!   then their 8 scales as f32 (32 bytes). A tile then reduces the 8 integer
//!   dot products of a block together and scales them with one vector multiply,
//!   instead of converting and broadcasting a scale per row and block.
//! * Every other activation type (Q8_K): the 8 rows as they are, back to back
//!   (the K-quant tiles already scale once per 256-value super-block).

use half::f16;

use crate::GgmlType;

/// Rows in a group.
pub const TILE: usize = 8;
/// Bytes of one packed Q8_0 block group: 8 × 32 quants + 8 f32 scales.
pub const Q8_0_GROUP_BLOCK: usize = TILE * 32 + TILE * 4;

/// Bytes of one packed group of rows of `cols` values of activation type `act`.
pub fn group_bytes(act: GgmlType, cols: usize) -> usize {
    match act {
        GgmlType::Q8_0 => cols / 32 * Q8_0_GROUP_BLOCK,
        _ => TILE * (cols / act.block_size() * act.type_size()),
    }
}

/// Whether `act` needs [`pack8`] (else a group is the rows as they lie).
pub fn needs_packing(act: GgmlType) -> bool {
    act == GgmlType::Q8_0
}

/// Packs 8 consecutive Q8_0 rows (`rows` = 8 × row bytes) into `out`
/// ([`group_bytes`] long).
pub fn pack8(act: GgmlType, cols: usize, rows: &[u8], out: &mut [u8]) {
    assert_eq!(act, GgmlType::Q8_0, "only Q8_0 activations are packed");
    let nb = cols / 32;
    let arow = nb * 34;
    assert_eq!(rows.len(), TILE * arow);
    assert_eq!(out.len(), nb * Q8_0_GROUP_BLOCK);
    for (i, dst) in out.chunks_exact_mut(Q8_0_GROUP_BLOCK).enumerate() {
        let (quants, scales) = dst.split_at_mut(TILE * 32);
        for c in 0..TILE {
            let b = &rows[c * arow + i * 34..][..34];
            quants[c * 32..(c + 1) * 32].copy_from_slice(&b[2..]);
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            scales[c * 4..(c + 1) * 4].copy_from_slice(&d.to_le_bytes());
        }
    }
}
