//! A token's matmul result is the same bits whichever path its position in
//! the batch takes (1×8 tile, 1×4 tile or single row): embeddings of a text
//! must not depend on the other texts packed with it, and with quantized
//! activations any rounding difference grows into a visible one.

use lamina_kernels::matmul::{Scratch, Weights, matmul};
use lamina_kernels::pool::Serial;
use lamina_kernels::{GgmlType, kernels};

fn pseudo(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|i| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let x = (s >> 8) as f32 / (1 << 24) as f32 - 0.5;
            // Some large values, as in real activations.
            if i % 97 == 0 { x * 40.0 } else { x }
        })
        .collect()
}

// Holds on x86-64 (AVX2 tiles and row kernels accumulate alike). The NEON
// 1×4 tile still reassociates differently from its row kernel: not yet invariant.
#[cfg(target_arch = "x86_64")]
#[test]
fn batch_position_does_not_change_a_tokens_result() {
    let types = [
        GgmlType::F32,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];
    for ty in types {
        let k = kernels(ty).unwrap();
        let (rows, cols, tokens) = (24, 1024, 21); // 2 tiles of 8, one of 4, 1 single
        let wf = pseudo(rows * cols, 7);
        let mut w = vec![0u8; rows * k.weight_row_bytes(cols)];
        lamina_quant::quantize_row(ty, &wf, &mut w).unwrap();
        let wm = Weights {
            kernels: k,
            data: &w,
            rows,
            cols,
        };
        let x = pseudo(tokens * cols, 11);
        let mut scratch = Scratch::new();
        let mut batch = vec![0f32; tokens * rows];
        matmul(&wm, &x, tokens, &mut batch, &mut scratch, &Serial).unwrap();
        for t in 0..tokens {
            let mut one = vec![0f32; rows];
            let xt = &x[t * cols..(t + 1) * cols];
            matmul(&wm, xt, 1, &mut one, &mut scratch, &Serial).unwrap();
            for (r, (a, b)) in one.iter().zip(&batch[t * rows..]).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{ty} token {t} row {r}: {a} alone, {b} in the batch"
                );
            }
        }
    }
}
