//! Q5_K rows unpacked into Q4_K's panels: the Q4_K panel holds one byte per
//! quant, and a Q5_K super-block has Q4_K's `d`, `dmin`, 6-bit scales and
//! mins in the same bytes, with quants of five bits instead of four. Where
//! the panel kernels multiply whole bytes (`vpdpbusd`, AVX-512), the same
//! kernels sum Q5_K blocks exactly; AVX2's sum eight products in 16 bits,
//! which only four-bit quants keep from overflowing.

use crate::GgmlType;
use crate::panel::{PANEL_ROWS, Q4_K_BLOCK, panel_shape, q4_k_meta};

/// Bytes of a Q5_K block: d, dmin, scales[12], qh[32], qs[128].
const Q5_K_BYTES: usize = 176;

/// Sixteen Q5_K rows (or fewer: the rest are zeros) into one Q4_K panel.
pub(crate) fn unpack_panel(cols: usize, rows: &[u8], out: &mut [u8]) {
    let (nb, given) = panel_shape(GgmlType::Q5_K, cols, rows, out, Q4_K_BLOCK);
    if given < PANEL_ROWS {
        out.fill(0);
    }
    for r in 0..given {
        let row = &rows[r * nb * Q5_K_BYTES..(r + 1) * nb * Q5_K_BYTES];
        for (b, dst) in row
            .chunks_exact(Q5_K_BYTES)
            .zip(out.chunks_exact_mut(Q4_K_BLOCK))
        {
            let (qh, qs) = (&b[16..48], &b[48..]);
            // Sub-block `s`: the low (even `s`) or high nibbles of bytes 32(s/2)..,
            // and bit `s` of the qh bytes as the fifth bit.
            // Four quants at a time, as u32 lanes of bytes.
            let word = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
            for s in 0..8 {
                for k in 0..8 {
                    let low = (word(qs, 32 * (s / 2) + 4 * k) >> (4 * (s % 2))) & 0x0F0F_0F0F;
                    let high = ((word(qh, 4 * k) >> s) & 0x0101_0101) << 4;
                    let at = 512 * s + 64 * k + 4 * r;
                    dst[at..at + 4].copy_from_slice(&(low | high).to_le_bytes());
                }
            }
            // The scales, mins, d and dmin lie where Q4_K keeps them.
            let mut head = [0u8; 144];
            head[..16].copy_from_slice(&b[..16]);
            let dst: &mut [u8; Q4_K_BLOCK] = dst.try_into().expect("a Q4_K panel block");
            q4_k_meta(r, &head, dst);
        }
    }
}
