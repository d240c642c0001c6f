//! Activation layout of the 1×16, 1×12, 1×8 and 1×4 tiles ([`crate::dispatch::TileFns`]).
//!
//! Sixteen, twelve, eight or four consecutive activation rows (quantized by the type's activation
//! quantizer) become one *group*:
//! * Q8_0: per 32-value block, the quants four bytes (one "dword") at a time,
//!   then the rows' scales as f32, then the sums of their quants as i32. The
//!   quants come as 32-byte vectors, for `j` in 0..4 and each set of four
//!   rows: dword `j` of those four rows, then their dword `j + 4`. A tile
//!   shuffles weight dword `j` into the low 128 bits and dword `j + 4` into
//!   the high ones (one in-lane shuffle), so one `u8·i8` multiply-add covers
//!   four rows and two dwords; after four steps the two halves add up to the
//!   rows' exact block sums, one row per i32 lane, with no horizontal
//!   reduction. The quant sums, stored as `−o·Σa`, take back the offset `o`
//!   of weights made unsigned (`Σ(w+o)·a − o·Σa`: a tile starts its integer
//!   sums from them); the scales are applied with one vector multiply.
//!   On aarch64 each 16-byte half of a vector is one `sdot` by element
//!   (four rows × one weight dword), signed, so the sums go unused.
//! * Q8_K: per 256-value super-block, its eight 32-value units laid out as a
//!   Q8_0 block's quants above, then the rows' scales as f32, then their
//!   16-value sums as i16 pairs (sums `2p` and `2p+1` of every row, for `p` in
//!   0..8): one `madd` applies two 16-value scales, or a 32-value min, to
//!   four or eight rows at once. Same size as the rows themselves.

use half::f16;

use crate::GgmlType;

/// Rows in a group of the 1×8 tile (a narrow tile takes [`TILE`]` / 2`, a
/// wide one `2 · `[`TILE`]).
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
    matches!(act, GgmlType::Q8_0 | GgmlType::Q8_K)
}

/// Bytes of one 256-value Q8_K super-block of a group of `n` rows.
pub const fn q8_k_group_block(n: usize) -> usize {
    n * 292
}

/// Where dword `dword` (0..8) of row `c` lands in a packed 32-value unit of a
/// group of `n` rows.
const fn dword_at(n: usize, c: usize, dword: usize) -> usize {
    let (set, lane, j, half) = (c / 4, c % 4, dword % 4, dword / 4);
    (((j * (n / 4) + set) * 2 + half) * 4 + lane) * 4
}

/// Packs up to `n` consecutive rows of `act` (Q8_0 or Q8_K; `rows`, a whole
/// number of rows) into `out` ([`group_bytes`] long); rows past those given
/// are zeros (a tile's padding: their columns come out 0 and are dropped).
/// Q8_0 quant sums are stored as `−Σa · 2^sum_shift` (the tiles'
/// [`crate::dispatch::TileFns::sum_shift`]).
pub fn pack(act: GgmlType, cols: usize, n: usize, rows: &[u8], out: &mut [u8], sum_shift: u32) {
    assert!(needs_packing(act), "{act} activations are not packed");
    assert!(
        matches!(n, 4 | 8 | 12 | 16),
        "groups of 4, 8, 12 or 16 rows"
    );
    assert!(sum_shift <= 18, "quant sum shift {sum_shift}");
    let (bs, ts) = (act.block_size(), act.type_size());
    let nb = cols / bs;
    let arow = nb * ts;
    assert!(rows.len() <= n * arow && rows.len().is_multiple_of(arow.max(1)));
    let given = rows.len().checked_div(arow).unwrap_or(0);
    let gb = if act == GgmlType::Q8_0 {
        q8_0_group_block(n)
    } else {
        q8_k_group_block(n)
    };
    assert_eq!(out.len(), nb * gb);
    let zeros = [0u8; 292];
    for (i, dst) in out.chunks_exact_mut(gb).enumerate() {
        for c in 0..n {
            let b = if c < given {
                &rows[c * arow + i * ts..][..ts]
            } else {
                &zeros[..ts]
            };
            if act == GgmlType::Q8_0 {
                let (quants, rest) = dst.split_at_mut(n * 32);
                let (scales, sums) = rest.split_at_mut(n * 4);
                for dword in 0..8 {
                    let at = dword_at(n, c, dword);
                    quants[at..at + 4].copy_from_slice(&b[2 + 4 * dword..][..4]);
                }
                let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
                scales[c * 4..(c + 1) * 4].copy_from_slice(&d.to_le_bytes());
                // |Σa| ≤ 32·128 = 2^12, so the offset fits an i32 for any shift ≤ 18.
                let sum: i32 = b[2..].iter().map(|&q| q as i8 as i32).sum();
                let offset = -(sum << sum_shift);
                sums[c * 4..(c + 1) * 4].copy_from_slice(&offset.to_le_bytes());
            } else {
                let (units, rest) = dst.split_at_mut(n * 256);
                let (scales, pairs) = rest.split_at_mut(n * 4);
                for (u, unit) in units.chunks_exact_mut(n * 32).enumerate() {
                    for dword in 0..8 {
                        let at = dword_at(n, c, dword);
                        unit[at..at + 4].copy_from_slice(&b[4 + 32 * u + 4 * dword..][..4]);
                    }
                }
                scales[c * 4..(c + 1) * 4].copy_from_slice(&b[..4]);
                for p in 0..8 {
                    let at = (p * n + c) * 4;
                    pairs[at..at + 4].copy_from_slice(&b[260 + 4 * p..][..4]);
                }
            }
        }
    }
}
