//! Products checked against the scalar row dots on every path.

use super::*;
use crate::pool::{Rayon, Serial};
use crate::testutil::{Rng, activations, tolerance, weight_row};
use crate::{GgmlType, Isa, kernels_for};

/// matmul equals the scalar row dot for every (t, r), on every available ISA,
/// for batch sizes around the tile width.
#[test]
fn matmul_matches_row_dots() {
    let mut rng = Rng(7);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q3_K,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q4_1,
            GgmlType::F16,
            GgmlType::BF16,
        ] {
            let k = kernels_for(ty, isa).unwrap();
            let r = kernels_for(ty, Isa::Scalar).unwrap();
            let (rows, cols) = (37, 512);
            let w: Vec<u8> = (0..rows)
                .flat_map(|_| weight_row(&mut rng, ty, cols, 0))
                .collect();
            for tokens in [1, 3, 4, 9, 11, 12, 14, 16, 21, 25, 29, 35, 40] {
                let x = activations(&mut rng, tokens * cols, 0);
                let mut y = vec![f32::NAN; tokens * rows];
                let mut s = Scratch::new();
                let pool: &dyn ThreadPool = if tokens % 2 == 0 { &Rayon } else { &Serial };
                matmul(
                    &Weights {
                        kernels: k,
                        data: &w,
                        rows,
                        cols,
                        layout: Layout::Rows,
                    },
                    &x,
                    tokens,
                    &mut y,
                    &mut s,
                    pool,
                )
                .unwrap();
                let mut a = vec![0u8; r.activation_row_bytes(cols)];
                for t in 0..tokens {
                    (r.quantize_activation)(&x[t * cols..(t + 1) * cols], &mut a);
                    for row in 0..rows {
                        let wr = &w
                            [row * k.weight_row_bytes(cols)..(row + 1) * k.weight_row_bytes(cols)];
                        let want = (r.vec_dot)(cols, wr, &a);
                        let got = y[t * rows + row];
                        let tol = tolerance(ty, cols, wr, &a);
                        assert!(
                            ((got - want) as f64).abs() <= tol,
                            "{isa} {ty} T={tokens} ({t},{row}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// Float weights give every (token, row) the ISA's row kernel's bits, in a
/// batch of any size (F16 and BF16 through their widened rows), also with
/// rows past a whole tile and columns past a whole vector.
#[test]
fn float_batches_keep_the_row_kernels_bits() {
    let mut rng = Rng(11);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let k = kernels_for(ty, isa).unwrap();
            let (rows, cols) = (70, 203);
            let wrow = k.weight_row_bytes(cols);
            let w: Vec<u8> = (0..rows)
                .flat_map(|_| weight_row(&mut rng, ty, cols, 0))
                .collect();
            for tokens in [2, 5, 12, 13, 40, 100] {
                let x = activations(&mut rng, tokens * cols, 1);
                let mut y = vec![f32::NAN; tokens * rows];
                let weights = Weights {
                    kernels: k,
                    data: &w,
                    rows,
                    cols,
                    layout: Layout::Rows,
                };
                let mut s = Scratch::new();
                matmul(&weights, &x, tokens, &mut y, &mut s, &Rayon).unwrap();
                let mut a = vec![0u8; k.activation_row_bytes(cols)];
                for t in 0..tokens {
                    (k.quantize_activation)(&x[t * cols..(t + 1) * cols], &mut a);
                    for (row, wr) in w.chunks_exact(wrow).enumerate() {
                        let want = (k.vec_dot)(cols, wr, &a);
                        let got = y[t * rows + row];
                        assert!(
                            got.to_bits() == want.to_bits(),
                            "{isa} {ty} T={tokens} ({t},{row}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// A matrix of no rows or no columns (or no tokens) is a valid product on
/// every path (rows, tiles and panels): empty, or zeros.
#[test]
fn empty_products_are_fine() {
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
            let k = kernels_for(ty, isa).unwrap();
            for tokens in [0, 1, 9, 40] {
                // No rows of 256 values, then 3 rows of none.
                for (rows, cols) in [(0, 256), (3, 0)] {
                    let wm = Weights {
                        kernels: k,
                        data: &[],
                        rows,
                        cols,
                        layout: Layout::Rows,
                    };
                    let x = vec![0.5f32; tokens * cols];
                    let mut y = vec![f32::NAN; tokens * rows];
                    matmul(&wm, &x, tokens, &mut y, &mut Scratch::new(), &Rayon).unwrap();
                    assert!(y.iter().all(|&v| v == 0.0), "{isa} {ty} T={tokens}");
                }
            }
        }
    }
}

#[test]
fn shape_errors_are_reported() {
    let k = kernels_for(GgmlType::Q8_0, Isa::Scalar).unwrap();
    let mut y = vec![0f32; 2];
    let e = matmul(
        &Weights {
            kernels: k,
            data: &[0u8; 34],
            rows: 2,
            cols: 32,
            layout: Layout::Rows,
        },
        &[0.0; 32],
        1,
        &mut y,
        &mut Scratch::new(),
        &Serial,
    )
    .unwrap_err();
    assert_eq!(
        e,
        KernelError::Shape {
            what: "weight bytes (rows × row bytes)",
            expected: 68,
            got: 34
        }
    );
    let e = matmul(
        &Weights {
            kernels: k,
            data: &[0u8; 34],
            rows: 1,
            cols: 31,
            layout: Layout::Rows,
        },
        &[0.0; 31],
        1,
        &mut y[..1],
        &mut Scratch::new(),
        &Serial,
    )
    .unwrap_err();
    assert!(e.to_string().contains("whole number"), "{e}");
}

/// Weights marked as stored panels are refused where their rows are not
/// whole panels, or where the ISA has no kernels for them.
#[test]
fn stored_panel_errors_are_reported() {
    let k = kernels_for(GgmlType::Q8_0, Isa::Scalar).unwrap();
    let wm = |rows: usize| Weights {
        kernels: k,
        data: &[],
        rows,
        cols: 32,
        layout: Layout::Panels,
    };
    let run = |rows: usize| {
        let mut y = vec![0f32; rows];
        matmul(
            &wm(rows),
            &[0.0; 32],
            1,
            &mut y,
            &mut Scratch::new(),
            &Serial,
        )
        .unwrap_err()
    };
    assert_eq!(
        run(20),
        KernelError::PartialPanel {
            ty: GgmlType::Q8_0,
            rows: 20
        }
    );
    assert_eq!(run(16), KernelError::NoPanelKernels { ty: GgmlType::Q8_0 });
    assert!(run(16).to_string().contains("no kernels"), "{}", run(16));
}
