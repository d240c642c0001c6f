//! A token's matmul result is the same bits whichever path its position in
//! the batch takes (1×8 tile, 1×4 tile or single row): embeddings of a text
//! must not depend on the other texts packed with it, and with quantized
//! activations any rounding difference grows into a visible one.

use lamina_kernels::matmul::{Layout, Scratch, Weights, matmul};
use lamina_kernels::pool::Serial;
use lamina_kernels::{GgmlType, Isa, kernels_for};

use lamina_testkit as require_models;

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

#[test]
fn batch_position_does_not_change_a_tokens_result() {
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.is_available()).collect();
    // Where the ISA has them, 21 tokens take the weight panels (AVX2) or a
    // 16- or 8-wide tile and a padded 8-wide one of 5; 14 one padded 16-wide
    // tile (or 8 and a padded 8); 11 one padded 12-wide tile (or 8 and a
    // padded 4); 3 one padded 4-wide tile. Without tiles, x4 and row kernels.
    let cases = isas
        .iter()
        .flat_map(|&i| types.map(|t| (i, t)))
        .flat_map(|(i, t)| [21, 14, 11, 3].map(|n| (i, t, n)));
    for (isa, ty, tokens) in cases {
        let k = kernels_for(ty, isa).unwrap();
        let (rows, cols) = (24, 1024);
        let wf = pseudo(rows * cols, 7);
        let mut w = vec![0u8; rows * k.weight_row_bytes(cols)];
        lamina_quant::quantize_row(ty, &wf, &mut w).unwrap();
        let wm = Weights {
            kernels: k,
            data: &w,
            rows,
            cols,
            layout: Layout::Rows,
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
                    "{} {ty} token {t} row {r}: {a} alone, {b} in the batch",
                    isa.name()
                );
            }
        }
    }
}

/// The AVX-512 VNNI row kernels replace AVX2's but keep their arithmetic
/// (exact integer block sums, the same float steps), so a token's result is
/// also the same whichever of the two a CPU runs, and either one matches the
/// AVX2 tiles a batch goes through.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_row_kernels_give_avx2_bits() {
    if !Isa::Avx512Vnni.is_available() {
        eprintln!("skipped: this CPU has no AVX-512 VNNI");
        return;
    }
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
        let (k2, k5) = (
            kernels_for(ty, Isa::Avx2).unwrap(),
            kernels_for(ty, Isa::Avx512Vnni).unwrap(),
        );
        for (cols, seed) in [(256, 1), (768, 2), (1280, 3), (3072, 4)] {
            let wf = pseudo(cols * 3, seed);
            let mut w = vec![0u8; 3 * k2.weight_row_bytes(cols)];
            lamina_quant::quantize_row(ty, &wf, &mut w).unwrap();
            let x = pseudo(cols, seed + 100);
            let mut a = vec![0u8; k2.activation_row_bytes(cols)];
            (k2.quantize_activation)(&x, &mut a);
            for w in w.chunks(k2.weight_row_bytes(cols)) {
                let (r2, r5) = ((k2.vec_dot)(cols, w, &a), (k5.vec_dot)(cols, w, &a));
                assert_eq!(
                    r2.to_bits(),
                    r5.to_bits(),
                    "{ty} {cols}: avx2 {r2}, avx512 {r5}"
                );
            }
        }
    }
}

/// A matrix stored as panels (where the ISA has them) gives every token the
/// bits of the file's rows, whatever the batch: one token (the decoding
/// kernel), narrow and wide panel calls, padded batches.
#[test]
fn stored_panels_give_the_rows_bits() {
    let mut compared = 0;
    let types = [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];
    for (isa, ty) in Isa::ALL
        .into_iter()
        .filter(|i| i.is_available())
        .flat_map(|i| types.map(|t| (i, t)))
    {
        let k = kernels_for(ty, isa).unwrap();
        let Some(stored) = k.stored else {
            continue;
        };
        compared += 1;
        let (rows, cols) = (48, 1024);
        let wrow = k.weight_row_bytes(cols);
        let mut w = vec![0u8; rows * wrow];
        lamina_quant::quantize_row(ty, &pseudo(rows * cols, 5), &mut w).unwrap();
        let mut panels = vec![0u8; w.len()];
        for (src, dst) in w
            .chunks_exact(16 * wrow)
            .zip(panels.chunks_exact_mut(16 * wrow))
        {
            (stored.store)(cols, src, dst);
        }
        let weights = |data, layout| Weights {
            kernels: k,
            data,
            rows,
            cols,
            layout,
        };
        let (by_rows, by_panels) = (weights(&w, Layout::Rows), weights(&panels, Layout::Panels));
        let mut scratch = Scratch::new();
        for tokens in [1, 2, 3, 5, 8, 14, 21, 40, 64, 70] {
            let x = pseudo(tokens * cols, 13 + tokens as u32);
            let mut want = vec![0f32; tokens * rows];
            matmul(&by_rows, &x, tokens, &mut want, &mut scratch, &Serial).unwrap();
            let mut got = vec![f32::NAN; tokens * rows];
            matmul(&by_panels, &x, tokens, &mut got, &mut scratch, &Serial).unwrap();
            for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{} {ty} {tokens} tokens, token {} row {}: rows {a}, stored panels {b}",
                    isa.name(),
                    i / rows,
                    i % rows
                );
            }
        }
        // Not whole panels, or an ISA without them: refused, not miscomputed.
        let short = Weights {
            rows: 40,
            data: &panels[..40 * wrow],
            ..by_panels
        };
        let mut y = vec![0f32; 40];
        assert!(matmul(&short, &pseudo(cols, 1), 1, &mut y, &mut scratch, &Serial).is_err());
    }
    if compared == 0 {
        require_models::say_skipped(
            "stored_panels_give_the_rows_bits: no ISA of this CPU stores panels, so only the refusal is checked",
        );
    }
    let scalar = kernels_for(GgmlType::Q8_0, Isa::Scalar).unwrap();
    let w = vec![0u8; 16 * scalar.weight_row_bytes(64)];
    let wm = Weights {
        kernels: scalar,
        data: &w,
        rows: 16,
        cols: 64,
        layout: Layout::Panels,
    };
    let mut y = vec![0f32; 16];
    let err = matmul(&wm, &pseudo(64, 1), 1, &mut y, &mut Scratch::new(), &Serial).unwrap_err();
    assert!(err.to_string().contains("no kernels"), "{err}");
}

/// Stored matrices of several types over one input (Gemma 3's Q5_0 queries
/// and keys with Q8_0 values) share one single-token region: each still
/// gets the bits of its own rows.
#[test]
fn stored_panels_of_mixed_types_give_each_its_rows_bits() {
    use lamina_kernels::matmul::matmul_many;
    let (rows, cols) = (32, 512);
    let mut compared = 0;
    // Gemma 3's mix, then one that AVX2 (which keeps Q8_0 as rows) stores;
    // Q8_0 and Q6_K read the quantized row, the others the prepared one.
    let mixes = [
        [
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q5_0,
        ],
        [
            GgmlType::Q5_0,
            GgmlType::Q6_K,
            GgmlType::Q4_K,
            GgmlType::Q4_0,
        ],
    ];
    let available = Isa::ALL.into_iter().filter(|i| i.is_available());
    for (isa, types) in available.flat_map(|i| mixes.map(|m| (i, m))) {
        let ks = types.map(|ty| kernels_for(ty, isa).unwrap());
        if ks.iter().any(|k| k.stored.is_none()) {
            continue;
        }
        compared += 1;
        let data: Vec<(Vec<u8>, Vec<u8>)> = ks
            .iter()
            .enumerate()
            .map(|(m, k)| {
                let wrow = k.weight_row_bytes(cols);
                let mut w = vec![0u8; rows * wrow];
                let v = pseudo(rows * cols, 40 + m as u32);
                lamina_quant::quantize_row(k.weight, &v, &mut w).unwrap();
                let mut p = vec![0u8; w.len()];
                for (src, dst) in w.chunks_exact(16 * wrow).zip(p.chunks_exact_mut(16 * wrow)) {
                    (k.stored.unwrap().store)(cols, src, dst);
                }
                (w, p)
            })
            .collect();
        let weights = |m: usize, stored: bool| Weights {
            kernels: ks[m],
            data: if stored { &data[m].1 } else { &data[m].0 },
            rows,
            cols,
            layout: if stored { Layout::Panels } else { Layout::Rows },
        };
        let x = pseudo(cols, 7);
        let mut scratch = Scratch::new();
        let stored: Vec<Weights<'_>> = (0..4).map(|m| weights(m, true)).collect();
        let mut got = vec![vec![f32::NAN; rows]; 4];
        let [a, b, c, d] = &mut got[..] else {
            unreachable!()
        };
        matmul_many(
            [&stored[0], &stored[1], &stored[2], &stored[3]],
            &x,
            1,
            [a, b, c, d],
            &mut scratch,
            &Serial,
        )
        .unwrap();
        for (m, got) in got.iter().enumerate() {
            let mut want = vec![0f32; rows];
            matmul(&weights(m, false), &x, 1, &mut want, &mut scratch, &Serial).unwrap();
            assert!(
                want.iter()
                    .zip(got)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} matrix {m} ({}): {want:?} vs {got:?}",
                isa.name(),
                types[m]
            );
        }
    }
    if compared == 0 {
        require_models::say_skipped(
            "stored_panels_of_mixed_types_give_each_its_rows_bits: no ISA of this CPU stores panels of either mix's four types",
        );
    }
}
