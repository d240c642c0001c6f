//! Q3_K blocks rewritten as Q6_K blocks with the same values, exactly: a
//! Q3_K quant (−4..3) is a Q6_K quant less 32, its sixteen 6-bit scales
//! less 32 are Q6_K's signed scales, one per sixteen values in the same
//! order, and `d` is shared. So Q3_K batches can run on the Q6_K panels,
//! whose integer sums are the ones a Q3_K row kernel forms.

use std::cell::RefCell;

/// Bytes of a Q3_K block: hmask[32], qs[64], scales[12], d.
const Q3_K_BYTES: usize = 110;
/// Bytes of a Q6_K block: ql[128], qh[64], scales[16], d.
const Q6_K_BYTES: usize = 210;

thread_local! {
    /// A worker's rewritten rows, one panel's at a time.
    static Q6: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The sixteen signed scales of a Q3_K block (its 6-bit scales less 32).
pub(crate) fn scales(s: &[u8; 12]) -> [i8; 16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// One Q3_K block as the Q6_K block of the same values.
fn to_q6_k(src: &[u8], dst: &mut [u8]) {
    let (hmask, qs) = (&src[..32], &src[32..96]);
    // Q6_K's unsigned quant (q + 32) of value `v`.
    let q6 = |v: usize| -> u8 {
        let (half, shift, l) = (v / 128, v % 128 / 32, v % 32);
        let low = (qs[32 * half + l] >> (2 * shift)) & 3;
        let high = (hmask[l] >> (4 * half + shift)) & 1;
        // low + 4·high is q + 4.
        low + 4 * high + 28
    };
    let (ql, rest) = dst.split_at_mut(128);
    let (qh, rest) = rest.split_at_mut(64);
    for half in 0..2 {
        for l in 0..32 {
            let v = |k: usize| q6(128 * half + 32 * k + l);
            let [a, b, c, d] = [v(0), v(1), v(2), v(3)];
            ql[64 * half + l] = (a & 0xF) | ((c & 0xF) << 4);
            ql[64 * half + l + 32] = (b & 0xF) | ((d & 0xF) << 4);
            qh[32 * half + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((d >> 4) << 6);
        }
    }
    let sc: &[u8; 12] = src[96..108].try_into().expect("twelve scale bytes");
    for (o, s) in rest[..16].iter_mut().zip(scales(sc)) {
        *o = s as u8;
    }
    rest[16..18].copy_from_slice(&src[108..110]);
}

/// Runs `f` on `rows` (whole Q3_K rows of `cols` values) rewritten as Q6_K
/// rows, in this thread's buffer.
pub(crate) fn as_q6_k_rows(cols: usize, rows: &[u8], f: impl FnOnce(&[u8])) {
    let blocks = rows.len() / Q3_K_BYTES;
    assert!(
        rows.len() == blocks * Q3_K_BYTES && cols.is_multiple_of(256),
        "whole Q3_K rows of {cols} values"
    );
    Q6.with_borrow_mut(|buf| {
        let need = blocks * Q6_K_BYTES;
        if buf.len() < need {
            buf.resize(need, 0);
        }
        for (src, dst) in rows
            .chunks_exact(Q3_K_BYTES)
            .zip(buf.chunks_exact_mut(Q6_K_BYTES))
        {
            to_q6_k(src, dst);
        }
        f(&buf[..need]);
    });
}

/// The reference (scalar) Q3_K panel unpacker: Q6_K's, over the rewritten rows.
#[cfg(test)]
pub(crate) fn unpack_reference(cols: usize, rows: &[u8], out: &mut [u8]) {
    as_q6_k_rows(cols, rows, |q6| crate::panel::unpack_q6_k(cols, q6, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType;
    use crate::testutil::{Rng, weight_row};

    /// The rewritten block decodes to the Q3_K block's values.
    #[test]
    fn rewritten_blocks_keep_their_values() {
        let mut rng = Rng(5);
        for style in 0..5 {
            let q3 = weight_row(&mut rng, GgmlType::Q3_K, 512, style);
            let mut q6 = Vec::new();
            as_q6_k_rows(512, &q3, |r| q6 = r.to_vec());
            let (mut a, mut b) = (vec![0.0; 512], vec![0.0; 512]);
            crate::scalar::dequantize(GgmlType::Q3_K, &q3, &mut a);
            crate::scalar::dequantize(GgmlType::Q6_K, &q6, &mut b);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "style {style}"
            );
        }
    }
}
