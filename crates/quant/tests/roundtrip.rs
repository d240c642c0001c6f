//! Property tests: quantize -> dequantize stays within the per-type error
//! bounds documented in the crate docs; all-zero blocks decode to exact
//! zeros; requantizing a decoded Q8_0/Q4_0/Q5_0 row gives the same bytes.

use lamina_quant::blocks::*;
use lamina_quant::{GgmlType, QuantBlock};
use proptest::prelude::*;

/// How a test row is shaped (applied per 32-value chunk so blocks mix shapes).
#[derive(Clone, Copy, Debug)]
enum Shape {
    Uniform,
    Gaussianish,
    Outliers,
    Constant,
    Zero,
    Positive,
}

fn shapes() -> impl Strategy<Value = Shape> {
    prop_oneof![
        3 => Just(Shape::Uniform),
        3 => Just(Shape::Gaussianish),
        2 => Just(Shape::Outliers),
        1 => Just(Shape::Constant),
        1 => Just(Shape::Zero),
        1 => Just(Shape::Positive),
    ]
}

/// A row of `n` values from a seed: xorshift keeps generation cheap, proptest picks the knobs.
fn make_row(n: usize, seed: u64, shape: Shape, scale: f32) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0 // [-1, 1)
    };
    // A constant block's one draw kept at ±[0.25, 1): near zero, its absmax
    // would fall out of `scales()`'s range, where f16 scales turn subnormal
    // (a draw of 2e-5 once failed Q8_0's bound that way).
    let c = {
        let v = next();
        v.signum() * (0.25 + 0.75 * v.abs())
    };
    (0..n)
        .map(|_| {
            scale
                * match shape {
                    Shape::Uniform => next(),
                    Shape::Gaussianish => (next() + next() + next() + next()) * 0.5,
                    Shape::Outliers => {
                        let v = next() * 0.05;
                        if next() > 0.95 { v * 20.0 } else { v }
                    }
                    Shape::Constant => c,
                    Shape::Zero => 0.0,
                    Shape::Positive => next().abs(),
                }
        })
        .collect()
}

/// Per-block (max abs error, RMSE), each relative to the block's absmax, and the absmax.
fn block_errors(x: &[f32], y: &[f32], bs: usize) -> Vec<(f32, f32, f32)> {
    x.chunks(bs)
        .zip(y.chunks(bs))
        .map(|(x, y)| {
            let a = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (mut max, mut sq) = (0f64, 0f64);
            for (&p, &q) in x.iter().zip(y) {
                let e = (p as f64 - q as f64).abs();
                max = max.max(e);
                sq += e * e;
            }
            let rmse = (sq / bs as f64).sqrt();
            ((max / a as f64) as f32, (rmse / a as f64) as f32, a)
        })
        .collect()
}

fn round_trip<B: QuantBlock>(x: &[f32]) -> (Vec<B>, Vec<f32>) {
    let mut q = vec![B::zeroed(); x.len() / B::BLOCK_SIZE];
    B::quantize(x, &mut q);
    let mut y = vec![f32::NAN; x.len()];
    B::dequantize(&q, &mut y);
    (q, y)
}

/// The documented bounds: (max abs error / absmax, RMSE / absmax).
fn bounds(t: GgmlType) -> (f32, f32) {
    match t {
        GgmlType::Q8_0 | GgmlType::Q8_1 => (0.0045, 0.0045),
        GgmlType::Q8_K => (0.004, 0.004),
        GgmlType::Q5_0 => (0.063, 0.063),
        GgmlType::Q5_1 => (0.034, 0.034),
        GgmlType::Q4_0 => (0.126, 0.126),
        GgmlType::Q4_1 => (0.0685, 0.0685),
        GgmlType::Q6_K => (f32::INFINITY, 0.012),
        GgmlType::Q5_K => (f32::INFINITY, 0.025),
        GgmlType::Q4_K => (f32::INFINITY, 0.05),
        GgmlType::Q3_K => (f32::INFINITY, 0.12),
        GgmlType::Q2_K => (f32::INFINITY, 0.30),
        _ => unreachable!(),
    }
}

/// Checks one row of blocks of `B` built from `parts` (one shape per 32 values).
fn check_bounds<B: QuantBlock>(parts: &[(u64, Shape)], scale: f32) -> Result<(), TestCaseError> {
    let x: Vec<f32> = parts
        .iter()
        .flat_map(|&(seed, shape)| make_row(32, seed, shape, scale))
        .collect();
    let n = x.len() / B::BLOCK_SIZE * B::BLOCK_SIZE;
    let x = &x[..n];
    let (_, y) = round_trip::<B>(x);
    let (max_bound, rmse_bound) = bounds(B::TYPE);
    for (i, (max, rmse, a)) in block_errors(x, &y, B::BLOCK_SIZE).into_iter().enumerate() {
        let yb = &y[i * B::BLOCK_SIZE..(i + 1) * B::BLOCK_SIZE];
        if a == 0.0 {
            prop_assert!(
                yb.iter().all(|&v| v == 0.0),
                "{} zero block {i} decodes to {yb:?}",
                B::TYPE
            );
            continue;
        }
        prop_assert!(
            yb.iter().all(|v| v.is_finite()),
            "{} block {i}: non-finite output",
            B::TYPE
        );
        prop_assert!(
            max <= max_bound,
            "{} block {i}: max error {max} * absmax {a} > {max_bound}",
            B::TYPE
        );
        prop_assert!(
            rmse <= rmse_bound,
            "{} block {i}: RMSE {rmse} * absmax {a} > {rmse_bound}",
            B::TYPE
        );
    }
    Ok(())
}

fn parts(n: usize) -> impl Strategy<Value = Vec<(u64, Shape)>> {
    prop::collection::vec((any::<u64>(), shapes()), n)
}

/// Block absmax in [1, 1e4]: every f16 scale of every type is a normal number there.
fn scales() -> impl Strategy<Value = f32> {
    (0.0f32..4.0).prop_map(|e| 10f32.powf(e))
}

macro_rules! bound_tests {
    ($($name:ident: $block:ty, $chunks:expr;)*) => {$(
        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]
            #[test]
            fn $name(p in parts($chunks), scale in scales()) {
                check_bounds::<$block>(&p, scale)?;
            }
        }
    )*};
}

bound_tests! {
    q4_0_within_bounds: BlockQ4_0, 8;
    q4_1_within_bounds: BlockQ4_1, 8;
    q5_0_within_bounds: BlockQ5_0, 8;
    q5_1_within_bounds: BlockQ5_1, 8;
    q8_0_within_bounds: BlockQ8_0, 8;
    q8_1_within_bounds: BlockQ8_1, 8;
    q2_k_within_bounds: BlockQ2K, 16;
    q3_k_within_bounds: BlockQ3K, 16;
    q4_k_within_bounds: BlockQ4K, 16;
    q5_k_within_bounds: BlockQ5K, 16;
    q6_k_within_bounds: BlockQ6K, 16;
    q8_k_within_bounds: BlockQ8K, 16;
}

/// Tiny and huge magnitudes: the output stays finite, zero blocks stay zero,
/// and the error never exceeds the block absmax plus 1e-4 (for tiny rows the
/// f16 scales and mins underflow to zero or subnormals, as in llama.cpp, so
/// only an absolute bound holds: half a subnormal f16 step, 2^-25 ~ 3e-8, times
/// the largest scale-times-level product of Q5_K, 63 * 31, is ~6e-5). Huge rows
/// stay below 65504, beyond which Q4_1/Q5_1's f16 minimum overflows, as in ggml.
fn check_extreme<B: QuantBlock>(x: &[f32]) -> Result<(), TestCaseError> {
    let (_, y) = round_trip::<B>(x);
    for (i, (max, _, a)) in block_errors(x, &y, B::BLOCK_SIZE).into_iter().enumerate() {
        let yb = &y[i * B::BLOCK_SIZE..(i + 1) * B::BLOCK_SIZE];
        prop_assert!(
            yb.iter().all(|v| v.is_finite()),
            "{} block {i}: non-finite output",
            B::TYPE
        );
        if a == 0.0 {
            prop_assert!(yb.iter().all(|&v| v == 0.0));
        } else {
            prop_assert!(
                max * a <= a * 1.001 + 1e-4,
                "{} block {i}: error {max} * absmax {a}",
                B::TYPE
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn extreme_magnitudes_stay_finite(p in parts(16), e in prop_oneof![-12.0f32..-2.0, 4.0f32..4.2]) {
        let scale = 10f32.powf(e);
        let x: Vec<f32> = p.iter().flat_map(|&(s, sh)| make_row(32, s, sh, scale)).collect();
        check_extreme::<BlockQ4_0>(&x)?;
        check_extreme::<BlockQ4_1>(&x)?;
        check_extreme::<BlockQ5_0>(&x)?;
        check_extreme::<BlockQ5_1>(&x)?;
        check_extreme::<BlockQ8_0>(&x)?;
        check_extreme::<BlockQ8_1>(&x)?;
        check_extreme::<BlockQ2K>(&x)?;
        check_extreme::<BlockQ3K>(&x)?;
        check_extreme::<BlockQ4K>(&x)?;
        check_extreme::<BlockQ5K>(&x)?;
        check_extreme::<BlockQ6K>(&x)?;
        check_extreme::<BlockQ8K>(&x)?;
    }

    /// Q8_0, Q4_0 and Q5_0 decode to `q * d` with an f16 `d`; requantizing
    /// recovers the same `d` (the extreme level is exact) and the same levels.
    /// Q8_1 keeps `d` and `qs`, but not `s`: ggml computes `s = sum * d` with
    /// the unrounded f32 `d`, which differs from the f16 one the second time.
    #[test]
    fn requantizing_a_decoded_row_is_idempotent(p in parts(8), scale in scales()) {
        let x: Vec<f32> = p.iter().flat_map(|&(s, sh)| make_row(32, s, sh, scale)).collect();
        fn idem<B: QuantBlock + PartialEq + std::fmt::Debug>(x: &[f32]) -> Result<(), TestCaseError> {
            let (q, y) = round_trip::<B>(x);
            let (q2, y2) = round_trip::<B>(&y);
            prop_assert_eq!(&q, &q2, "{} bytes changed", B::TYPE);
            prop_assert_eq!(y, y2);
            Ok(())
        }
        idem::<BlockQ8_0>(&x)?;
        let (q, y) = round_trip::<BlockQ8_1>(&x);
        let (q2, _) = round_trip::<BlockQ8_1>(&y);
        for (a, b) in q.iter().zip(&q2) {
            prop_assert_eq!((a.d, a.qs), (b.d, b.qs));
        }
        idem::<BlockQ4_0>(&x)?;
        idem::<BlockQ5_0>(&x)?;
    }
}

/// Hand-checked values: a row whose quantization is known exactly.
#[test]
fn known_q8_0_and_q4_0_blocks() {
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect(); // -16..=15
    let (q, y) = round_trip::<BlockQ8_0>(&x);
    assert_eq!(q[0].d.to_f32(), half::f16::from_f32(16.0 / 127.0).to_f32());
    assert_eq!(q[0].qs[0], -127);
    assert_eq!(q[0].qs[16], 0);
    assert_eq!(y[16], 0.0);
    let (q, y) = round_trip::<BlockQ4_0>(&x);
    assert_eq!(q[0].d.to_f32(), 2.0); // max = -16, d = -16 / -8
    assert_eq!(q[0].qs[0] & 0xF, 0); // -16 -> level 0 -> (0 - 8) * 2
    assert_eq!(y[0], -16.0);
    assert_eq!(y[31], 14.0); // 15 rounds to the level 7 * 2 = 14 (8.5 + 7.5 = 16 -> clipped 15)
}

/// A hostile F32 tensor (NaN, infinities, the largest finite values,
/// subnormals) quantizes to some bytes without a panic, for every type with
/// a quantizer: the K-quants' scale searches among them.
#[test]
fn non_finite_values_quantize_without_panic() {
    let special = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE / 4.0,
        0.0,
        1.0,
    ];
    // Rows of 256: every sub-block holds a different mix.
    let rows: Vec<Vec<f32>> = (0..special.len())
        .map(|k| {
            (0..256)
                .map(|i| special[(i * (k + 1) / 7 + k) % special.len()])
                .collect()
        })
        .chain([vec![f32::NAN; 256], vec![f32::INFINITY; 256]])
        .collect();
    use GgmlType as T;
    for ty in [
        T::F16,
        T::BF16,
        T::Q8_0,
        T::Q4_0,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q2_K,
        T::Q3_K,
        T::Q4_K,
        T::Q5_K,
        T::Q6_K,
    ] {
        let mut out = vec![0u8; ty.row_bytes(256).unwrap() as usize];
        for row in &rows {
            lamina_quant::quantize_row(ty, row, &mut out).unwrap();
        }
    }
}
