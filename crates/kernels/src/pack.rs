//! Activation layout of the 1×8 and 1×4 tiles ([`crate::table::TileFns`]).
//!
//! Eight (or four) consecutive activation rows (quantized by the type's activation
//! quantizer) become one *group*:
//! * Q8_0: per 32-value block, the quants four bytes (one "dword") at a time,
//!   then the rows' scales as f32, then the sums of their quants as i32. The
//!   quants come as 32-byte vectors, for `j` in 0..4 and each set of four
//!   rows: dword `j` of those four rows, then their dword `j + 4`. A tile
//!   shuffles weight dword `j` into the low 128 bits and dword `j + 4` into
//!   the high ones (one in-lane shuffle), so one `u8·i8` multiply-add covers
//!   four rows and two dwords; after four steps the two halves add up to the
//!   rows' exact block sums, one row per i32 lane, with no horizontal
//!   reduction. The quant sums take back the offset of weights made unsigned
//!   (`Σ(w+o)·a − o·Σa`); the scales are applied with one vector multiply.
//!   On aarch64 each 16-byte half of a vector is one `sdot` by element
//!   (four rows × one weight dword), signed, so the sums go unused.
//! * Every other activation type (Q8_K): the 8 rows as they are, back to back
//!   (the K-quant tiles already scale once per 256-value super-block).

use half::f16;

use crate::GgmlType;

/// Rows in a group of the wide tile (a narrow tile takes [`TILE`]` / 2`).
pub const TILE: usize = 8;

/// Bytes of one packed Q8_0 block of a group of `n` rows: `n` × 32 quants,
/// `n` f32 scales, `n` i32 quant sums.
pub const fn q8_0_group_block(n: usize) -> usize {
    n * 40
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

/// Packs up to `n` consecutive Q8_0 rows (`rows`, a whole number of rows)
/// into `out` ([`group_bytes`] long); rows past those given are zeros (a
/// tile's padding: their columns come out 0 and are dropped).
pub fn pack(act: GgmlType, cols: usize, n: usize, rows: &[u8], out: &mut [u8]) {
    assert_eq!(act, GgmlType::Q8_0, "only Q8_0 activations are packed");
    assert!(n == 4 || n == 8, "groups of 4 or 8 rows");
    let nb = cols / 32;
    let arow = nb * 34;
    let gb = q8_0_group_block(n);
    assert!(rows.len() <= n * arow && rows.len().is_multiple_of(arow.max(1)));
    let given = rows.len().checked_div(arow).unwrap_or(0);
    assert_eq!(out.len(), nb * gb);
    for (i, dst) in out.chunks_exact_mut(gb).enumerate() {
        let (quants, rest) = dst.split_at_mut(n * 32);
        let (scales, sums) = rest.split_at_mut(n * 4);
        for c in 0..n {
            let (set, lane) = (c / 4, c % 4);
            let zeros = [0u8; 34];
            let b = if c < given {
                &rows[c * arow + i * 34..][..34]
            } else {
                &zeros[..]
            };
            for j in 0..4 {
                for half in 0..2 {
                    let at = (((j * (n / 4) + set) * 2 + half) * 4 + lane) * 4;
                    let dword = j + 4 * half;
                    quants[at..at + 4].copy_from_slice(&b[2 + 4 * dword..][..4]);
                }
            }
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            scales[c * 4..(c + 1) * 4].copy_from_slice(&d.to_le_bytes());
            let sum: i32 = b[2..].iter().map(|&q| q as i8 as i32).sum();
            sums[c * 4..(c + 1) * 4].copy_from_slice(&sum.to_le_bytes());
        }
    }
}
