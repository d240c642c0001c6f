//! Shared test machinery: random rows of every type and the comparison of an
//! ISA's table against the scalar reference.
//!
//! # Tolerances
//! Quantizers must match the scalar reference byte for byte. Dot products
//! share the exact integer sums; they differ only in how f32 partial sums are
//! associated (8 or 16 lanes, FMA). With `mag = Σ|each term|` (every
//! `d·scale·q·a` and `dmin·m·a` taken absolutely, see [`magnitude`]) the
//! difference is bounded by `(c + n/8) · ε · mag` (ε = `f32::EPSILON`):
//! `c = 32` covers the per-block products of scales and the horizontal sums,
//! `n/8` the length of the longest lane's running sum. A 1×4 tile must equal
//! the same ISA's row kernel column by column within the same bound.

use crate::dispatch::{SCALAR, TypeKernels};
use crate::isa::Isa;
use crate::scalar::{self, KBlock, LegacyBlock};
use crate::{GgmlType, kernels_for};
use half::f16;
use lamina_quant::blocks::*;

/// SplitMix64: a tiny deterministic generator, enough for test data.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn bytes(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next() as u8;
        }
    }
}

/// Offsets of the f16 scale fields inside a weight block.
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 => &[0],
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => &[0, 2],
        T::Q2_K => &[80, 82],
        T::Q3_K => &[108],
        T::Q6_K => &[208],
        _ => &[],
    }
}

/// An f16 scale: ordinary, zero, subnormal-small or near the f16 maximum.
fn scale(rng: &mut Rng, style: u64) -> f16 {
    let v = match (style, rng.below(8)) {
        (1, _) | (_, 0) => 0.0,
        (2, _) | (_, 1) => 6.0e-8 * (1 + rng.below(4)) as f32,
        (3, _) | (_, 2) => 60000.0 * rng.unit(),
        _ => rng.unit() * 0.1,
    };
    f16::from_f32_const(v)
}

/// Random f32 activations: gaussian-ish, with outliers, all zero, or saturating.
pub fn activations(rng: &mut Rng, n: usize, style: u64) -> Vec<f32> {
    (0..n)
        .map(|i| match style {
            1 => 0.0,
            2 => {
                if rng.below(2) == 0 {
                    1.0
                } else {
                    -1.0
                }
            }
            3 if i % 37 == 0 => 1.0e4 * rng.unit(),
            3 if i % 64 < 32 => 0.0,
            _ => rng.unit() + rng.unit() * rng.unit(),
        })
        .collect()
}

/// A random weight row of `n` values: random quant bits, chosen scales
/// (style 0 mixed, 1 zero, 2 tiny, 3 huge); float types from random values.
pub fn weight_row(rng: &mut Rng, ty: GgmlType, n: usize, style: u64) -> Vec<u8> {
    let mut row = vec![0u8; n / ty.block_size() * ty.type_size()];
    match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let x = activations(rng, n, style);
            let q = SCALAR
                .iter()
                .find(|k| k.weight == ty)
                .unwrap()
                .quantize_activation;
            q(&x, &mut row);
        }
        _ => {
            rng.bytes(&mut row);
            if style == 4 {
                // Extreme quants: all bits set or all clear, alternating by
                // block from a random start, so any two blocks hold both.
                let first = rng.below(2) as usize;
                for (i, b) in row.chunks_exact_mut(ty.type_size()).enumerate() {
                    let set = (i + first).is_multiple_of(2);
                    b.fill(if set { 0xFF } else { 0x00 });
                }
            }
            for b in row.chunks_exact_mut(ty.type_size()) {
                for &o in scale_offsets(ty) {
                    b[o..o + 2].copy_from_slice(&scale(rng, style % 4).to_le_bytes());
                }
            }
        }
    }
    row
}

fn blocks<B: bytemuck::Pod>(b: &[u8]) -> Vec<B> {
    b.chunks_exact(size_of::<B>())
        .map(bytemuck::pod_read_unaligned)
        .collect()
}

/// Σ of every term of the dot product taken absolutely (the scale of its rounding error).
pub fn magnitude(ty: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    fn legacy<B: LegacyBlock>(w: &[u8], a: &[u8], act_size: usize) -> f64 {
        let mut m = 0.0f64;
        for (x, y) in blocks::<B>(w).iter().zip(a.chunks_exact(act_size)) {
            let (q, d, mm) = x.unpack();
            let dy = f16::from_le_bytes([y[0], y[1]]).to_f32_const() as f64;
            let qs = &y[act_size - 32..];
            for (&qw, &qa) in q.iter().zip(qs) {
                let qa = qa as i8 as f64;
                m += (d as f64 * qw as f64 * dy * qa).abs() + (mm as f64 * dy * qa).abs();
            }
        }
        m
    }
    fn k<B: KBlock>(w: &[u8], a: &[u8]) -> f64 {
        let mut m = 0.0f64;
        for (x, y) in blocks::<B>(w).iter().zip(blocks::<BlockQ8K>(a)) {
            let u = x.unpack();
            for i in 0..QK_K {
                let qa = y.qs[i] as f64 * y.d as f64;
                m += (u.d as f64 * u.scales[i / 16] as f64 * u.q[i] as f64 * qa).abs()
                    + (u.dmin as f64 * u.mins[i / 16] as f64 * qa).abs();
            }
        }
        m
    }
    fn float(ty: GgmlType, w: &[u8], a: &[u8]) -> f64 {
        let n = w.len() / ty.type_size();
        let (mut x, mut y) = (vec![0f32; n], vec![0f32; n]);
        // The decoder wants aligned floats; test rows are byte vectors,
        // which Miri places at any address.
        let decode = |bytes: &[u8], out: &mut [f32]| {
            let mut words = vec![0u64; bytes.len().div_ceil(8)];
            let aligned = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()];
            aligned.copy_from_slice(bytes);
            scalar::dequantize(ty, aligned, out);
        };
        decode(w, &mut x);
        decode(a, &mut y);
        x.iter()
            .zip(&y)
            .map(|(&p, &q)| (p as f64 * q as f64).abs())
            .sum()
    }
    use GgmlType as T;
    match ty {
        T::Q4_0 => legacy::<BlockQ4_0>(w, a, 34),
        T::Q5_0 => legacy::<BlockQ5_0>(w, a, 34),
        T::Q8_0 => legacy::<BlockQ8_0>(w, a, 34),
        T::Q4_1 => legacy::<BlockQ4_1>(w, a, 36),
        T::Q5_1 => legacy::<BlockQ5_1>(w, a, 36),
        T::Q2_K => k::<BlockQ2K>(w, a),
        T::Q3_K => k::<BlockQ3K>(w, a),
        T::Q4_K => k::<BlockQ4K>(w, a),
        T::Q5_K => k::<BlockQ5K>(w, a),
        T::Q6_K => k::<BlockQ6K>(w, a),
        _ => float(ty, w, a),
    }
}

pub fn tolerance(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f64 {
    (32.0 + n as f64 / 8.0) * f32::EPSILON as f64 * magnitude(ty, w, a)
}

/// One random case: `blocks` blocks of `ty`, data styles from `style`.
/// Compares `k` (an ISA's entry) with the scalar entry of the same type.
pub fn check_case(k: &TypeKernels, seed: u64, nblocks: usize, style: u64) {
    let r = &SCALAR.iter().find(|s| s.weight == k.weight).unwrap();
    let ty = k.weight;
    let mut rng = Rng(seed);
    // Float rows get an odd tail so the SIMD remainder loops run.
    let n = if ty.block_size() == 1 {
        nblocks * 37 + (seed % 8) as usize
    } else {
        nblocks * ty.block_size()
    };
    let w = weight_row(&mut rng, ty, n, style % 5);
    let xs: Vec<Vec<f32>> = (0..8)
        .map(|c| activations(&mut rng, n, (style / 5 + c) % 4))
        .collect();
    let cols: Vec<Vec<u8>> = xs
        .iter()
        .map(|x| {
            let mut want = vec![0u8; k.activation_row_bytes(n)];
            (r.quantize_activation)(x, &mut want);
            let mut got = vec![0xAAu8; want.len()];
            (k.quantize_activation)(x, &mut got);
            assert!(
                got == want,
                "{} {}: activation quantizer differs (seed {seed})",
                k.isa,
                k.activation
            );
            want
        })
        .collect();
    let row = check_rows(k, r, n, &w, &cols, seed);
    check_tiles(k, n, &w, &cols, &row, seed, false);
    check_panel(k, n, &w, &cols, seed, style % 5);
    check_stored(k, n, &w, &cols, seed, style % 5);
    check_quantize_prepared(k, n, &xs, &cols, seed);
}

/// Whether the tests of `isa` run here. Under Miri (with the AVX-512 target
/// features of `.ci/isa-tests.sh`) they must: a missing feature fails.
pub fn runs_here(isa: Isa) -> bool {
    if cfg!(miri) {
        assert!(
            isa.is_available(),
            "{isa} must be available under Miri: check RUSTFLAGS"
        );
        return true;
    }
    if !isa.is_available() {
        eprintln!("skipped: this CPU lacks {}", isa.features());
    }
    isa.is_available()
}

/// The entry of `ty` on `isa`.
pub fn entry(isa: Isa, ty: GgmlType) -> &'static TypeKernels {
    kernels_for(ty, isa).unwrap()
}

/// Generates one proptest per weight type comparing `$isa`'s table with scalar.
#[macro_export]
#[doc(hidden)]
macro_rules! isa_proptests {
    ($isa:expr; $($name:ident => $ty:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            use proptest::prelude::*;
            if !$crate::testutil::runs_here($isa) {
                return;
            }
            let k = $crate::testutil::entry($isa, $crate::GgmlType::$ty);
            let cfg = ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() };
            proptest!(cfg, |(seed in any::<u64>(), nblocks in 1usize..10, style in 0u64..20)| {
                $crate::testutil::check_case(k, seed, nblocks, style);
            });
        }
    )*};
}

/// `k`'s row kernel against the scalar one `r` on each of the 8 activation
/// rows `cols`, within the type's tolerance; returns `k`'s results.
fn check_rows(
    k: &TypeKernels,
    r: &TypeKernels,
    n: usize,
    w: &[u8],
    cols: &[Vec<u8>],
    seed: u64,
) -> [f32; 8] {
    let ty = k.weight;
    let mut row = [0f32; 8];
    for (c, a) in cols.iter().enumerate() {
        let want = (r.vec_dot)(n, w, a);
        let got = (k.vec_dot)(n, w, a);
        let tol = tolerance(ty, n, w, a);
        assert!(
            ((got - want) as f64).abs() <= tol,
            "{} {ty}: vec_dot {got} vs scalar {want} (tol {tol:e}, seed {seed}, {} blocks)",
            k.isa,
            n / ty.block_size().max(1)
        );
        row[c] = got;
    }
    row
}

/// The 1×16/1×12/1×8/1×4 tiles and the x4 kernel of `k` against its row kernel's
/// results `row` on the activation rows `cols`: within the type's tolerance,
/// or bit for bit when `exact` (the batch-invariance contract).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn check_tiles(
    k: &TypeKernels,
    n: usize,
    w: &[u8],
    cols: &[Vec<u8>],
    row: &[f32; 8],
    seed: u64,
    exact: bool,
) {
    let ty = k.weight;
    let close = |got: f32, want: f32, a: &[u8]| {
        if exact {
            got.to_bits() == want.to_bits()
        } else {
            ((got - want) as f64).abs() <= tolerance(ty, n, w, a)
        }
    };
    if let Some(tiles) = k.tiles {
        // A group of the given activation rows, packed where the type needs it.
        let group = |rows: Vec<&Vec<u8>>| -> Vec<u8> {
            let g = rows.len();
            let rows: Vec<u8> = rows.into_iter().flatten().copied().collect();
            if crate::act_pack::needs_packing(k.activation) {
                let mut packed = vec![0u8; crate::act_pack::group_bytes(k.activation, n, g)];
                crate::act_pack::pack(k.activation, n, g, &rows, &mut packed, tiles.sum_shift);
                packed
            } else {
                rows
            }
        };
        let got8 = (tiles.x8)(n, w, &group(cols.iter().collect()));
        let got4 = (tiles.x4)(n, w, &group(cols[..4].iter().collect()));
        // The 1×16 tile takes the eight rows twice, the second time in reverse;
        // the 1×12 tile the eight rows, then the first four in reverse.
        let got16 = tiles
            .x16
            .map(|x16| x16(n, w, &group(cols.iter().chain(cols.iter().rev()).collect())));
        let got12 = tiles.x12.map(|x12| {
            x12(
                n,
                w,
                &group(cols.iter().chain(cols[..4].iter().rev()).collect()),
            )
        });
        let col16 = |c: usize| if c < 8 { c } else { 15 - c };
        let col12 = |c: usize| if c < 8 { c } else { 11 - c };
        let all = got8
            .iter()
            .enumerate()
            .chain(got4.iter().enumerate())
            .chain(
                got16
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(c, v)| (col16(c), v)),
            )
            .chain(
                got12
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(c, v)| (col12(c), v)),
            );
        for (c, &got) in all {
            assert!(
                close(got, row[c], &cols[c]),
                "{} {ty}: tile column {c} {got} vs row kernel {} (exact: {exact}, seed {seed})",
                k.isa,
                row[c]
            );
        }
    }
    // Eight rows: the weight row with its blocks rotated by 0..8.
    let bytes = w.len() / (n / ty.block_size()).max(1);
    let rotated: Vec<Vec<u8>> = (0..8)
        .map(|r| {
            let mut v = w.to_vec();
            let len = v.len().max(1);
            v.rotate_left(r * bytes % len);
            v
        })
        .collect();
    let f32_tiles = k.f32_tiles.iter().flat_map(|t| [Some(t.narrow), t.wide]);
    // What the tiles read: the rows themselves, or (F16, BF16) widened to f32.
    let as_f32 = |bytes: Vec<u8>| match k.f32_tiles.and_then(|t| t.widen) {
        None => bytes,
        Some(widen) => {
            let mut wide = vec![0.0f32; bytes.len() / 2];
            widen(&bytes, &mut wide);
            bytemuck::cast_slice(&wide).to_vec()
        }
    };
    for crate::dispatch::F32Tile { tile, rows, tokens } in f32_tiles.flatten() {
        // Rows against tokens, each with the row kernel's bits; tiles wider
        // than the eight activation rows take them again.
        let col = |t: usize| &cols[t % cols.len()];
        let acts = as_f32((0..tokens).flat_map(|t| col(t).iter().copied()).collect());
        let mut got = vec![0.0; rows * tokens];
        // With and without hints past some rows: the same bits.
        let hint = crate::dispatch::TileHint {
            ahead: [0, 4096][seed as usize % 2],
            rows: [0, 0b1, 0b1010, !0][seed as usize / 2 % 4],
        };
        tile(n, &as_f32(rotated[..rows].concat()), &acts, &mut got, hint);
        for t in 0..tokens {
            for r in 0..rows {
                let want = (k.vec_dot)(n, &rotated[r], col(t));
                let got = got[t * rows + r];
                assert!(
                    got.to_bits() == want.to_bits(),
                    "{} {ty}: f32 tile ({rows} x {tokens}) row {r} token {t} {got} vs row kernel {want} (seed {seed})",
                    k.isa
                );
            }
        }
    }
    if let Some(rows8) = k.vec_dot_rows8 {
        // Each rotated row against its row kernel on the first activation row.
        let got = rows8(n, &rotated.concat(), &cols[0]);
        for (r, (row, &got)) in rotated.iter().zip(&got).enumerate() {
            let want = (k.vec_dot)(n, row, &cols[0]);
            assert!(
                got.to_bits() == want.to_bits(),
                "{} {ty}: eight-row kernel row {r} {got} vs row kernel {want} (seed {seed})",
                k.isa
            );
        }
    }
    if let Some(x4) = k.vec_dot_x4 {
        let got = x4(n, w, [&cols[0], &cols[1], &cols[2], &cols[3]]);
        for c in 0..4 {
            assert!(
                close(got[c], row[c], &cols[c]),
                "{} {ty}: vec_dot_x4 column {c} {} vs row kernel {} (exact: {exact}, seed {seed})",
                k.isa,
                got[c],
                row[c]
            );
        }
    }
}

/// A valid activation row of `n` values for `k` made directly from random
/// quants and a small scale (with Q8_K's sums), without a quantizer: under
/// Miri, which lacks F16C, even the scalar one cannot run.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn random_activation_row(k: &TypeKernels, rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut a = vec![0u8; k.activation_row_bytes(n)];
    let asz = k.activation.type_size();
    for b in a.chunks_exact_mut(asz) {
        for q in b.iter_mut() {
            *q = (rng.below(255) as i32 - 127) as i8 as u8;
        }
        if k.activation == GgmlType::Q8_K {
            b[..4].copy_from_slice(&(rng.unit() * 0.01).to_le_bytes());
            for g in 0..16 {
                let s: i32 = b[4 + 16 * g..20 + 16 * g]
                    .iter()
                    .map(|&v| v as i8 as i32)
                    .sum();
                b[260 + 2 * g..262 + 2 * g].copy_from_slice(&(s as i16).to_le_bytes());
            }
        } else {
            let d = f16::from_f32_const(rng.unit() * 0.01);
            b[..2].copy_from_slice(&d.to_le_bytes());
            if k.activation == GgmlType::Q8_1 {
                // `s` is `d · Σq`, as the quantizer makes it.
                let sum: i32 = b[4..].iter().map(|&v| v as i8 as i32).sum();
                let s = f16::from_f32_const(d.to_f32_const() * sum as f32);
                b[2..4].copy_from_slice(&s.to_le_bytes());
            }
        }
    }
    a
}

/// Dot products only, on activation blocks built directly from random bytes
/// (no quantizer, no hardware f16 conversion: both are beyond Miri).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn check_dot_only(k: &TypeKernels, seed: u64, nblocks: usize, style: u64) {
    let r = &SCALAR.iter().find(|s| s.weight == k.weight).unwrap();
    let ty = k.weight;
    let mut rng = Rng(seed);
    let n = nblocks * ty.block_size();
    let w = weight_row(&mut rng, ty, n, style % 5);
    let cols: Vec<Vec<u8>> = (0..8)
        .map(|_| random_activation_row(k, &mut rng, n))
        .collect();
    let row = check_rows(k, r, n, &w, &cols, seed);
    // The SIMD tiles and x4 kernels keep their row kernel's arithmetic exactly.
    check_tiles(k, n, &w, &cols, &row, seed, true);
    check_panel(k, n, &w, &cols, seed, style % 5);
    check_stored(k, n, &w, &cols, seed, style % 5);
}

/// One stored panel of rows of `nblocks` blocks through the one-token
/// stored kernel, against the row kernel bit for bit: the long rows that
/// [`check_case`] covers natively (Q6_K's kernel takes rows past 16
/// super-blocks in chunks), at a cost Miri can afford.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub fn check_stored_single(k: &TypeKernels, seed: u64, nblocks: usize) {
    let (Some(s), Some(p)) = (k.stored, k.panel) else {
        return;
    };
    let ty = k.weight;
    let mut rng = Rng(seed);
    let n = nblocks * ty.block_size();
    let rows: Vec<Vec<u8>> = (0..16).map(|_| weight_row(&mut rng, ty, n, 0)).collect();
    let flat = rows.concat();
    let mut stored = vec![0xAAu8; flat.len()];
    (s.store)(n, &flat, &mut stored);
    let act = random_activation_row(k, &mut rng, n);
    let input = if s.single_reads_quantized {
        act.clone()
    } else {
        prepared_rows(&p, n, std::slice::from_ref(&act))
    };
    let mut single = vec![f32::NAN; 16];
    (s.single)(n, &stored, &input, &mut single);
    for r in [0, 9, 15] {
        let want = (k.vec_dot)(n, &rows[r], &act);
        assert!(
            single[r].to_bits() == want.to_bits(),
            "{} {ty}: stored panel row {r}, {nblocks} blocks, one token: {} vs row kernel {want} (seed {seed})",
            k.isa,
            single[r]
        );
    }
}

/// A panel's one-pass quantize-and-prepare (where it has one) against its
/// two passes, byte for byte.
fn check_quantize_prepared(
    k: &TypeKernels,
    n: usize,
    xs: &[Vec<f32>],
    cols: &[Vec<u8>],
    seed: u64,
) {
    let Some(p) = k.panel else {
        return;
    };
    let Some(quantize_prepared) = p.quantize_prepared else {
        return;
    };
    for (x, a) in xs.iter().zip(cols) {
        let mut want = vec![0xAAu8; p.act_row_bytes(n)];
        (p.prepare)(n, a, &mut want);
        let mut got = vec![0x55u8; want.len()];
        quantize_prepared(x, &mut got);
        assert!(
            got == want,
            "{} {}: one-pass prepared activations differ (seed {seed})",
            k.isa,
            k.weight
        );
    }
}

/// The weight panels of `k` (where it has them) against its row kernel, bit
/// for bit: a full panel of `w` and 15 more random rows (of weight style
/// `style`), then a partial one of 5 rows, whose missing rows must come out
/// 0; each unpacked byte for byte as the reference unpacker does; all eight
/// activation rows `cols` through the wide kernel, the last four through
/// the narrow one; the pair kernel (where the type has one) over that panel
/// and another, each half bit for bit as the wide kernel gives it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn check_panel(k: &TypeKernels, n: usize, w: &[u8], cols: &[Vec<u8>], seed: u64, style: u64) {
    let Some(p) = k.panel else {
        return;
    };
    let ty = k.weight;
    let mut rng = Rng(seed ^ 0x9E37_79B9);
    let prow = p.act_row_bytes(n);
    let prepared = prepared_rows(&p, n, cols);
    let reference: crate::panel::UnpackFn = match ty {
        GgmlType::Q8_0 if p.block_bytes == crate::panel::Q8_0_I16_BLOCK => {
            crate::panel::unpack_q8_0_i16
        }
        GgmlType::Q8_0 => crate::panel::unpack_q8_0,
        GgmlType::Q4_0 => crate::panel::unpack_q4_0,
        GgmlType::Q5_0 => crate::panel::unpack_q5_0,
        GgmlType::Q4_1 => crate::panel::unpack_q4_1,
        GgmlType::Q5_1 => crate::panel::unpack_q5_1,
        GgmlType::Q2_K => crate::panel::unpack_q2_k,
        GgmlType::Q3_K => crate::q3_k::unpack_reference,
        GgmlType::Q4_K => crate::panel::unpack_q4_k,
        GgmlType::Q5_K => crate::q5_k::unpack_panel,
        GgmlType::Q6_K => crate::panel::unpack_q6_k,
        _ => panic!("{ty}: no reference panel unpacker"),
    };
    // Under Miri (about 1000× slower) the full panel only, its first three
    // rows against the row kernel.
    let (sizes, checked): (&[usize], usize) = if cfg!(miri) {
        (&[16], 3)
    } else {
        (&[16, 5], 16)
    };
    for &given in sizes {
        let rows: Vec<Vec<u8>> = std::iter::once(w.to_vec())
            .chain((1..given).map(|_| weight_row(&mut rng, ty, n, style)))
            .collect();
        let mut panel = vec![0xAAu8; p.panel_bytes(n)];
        (p.unpack)(n, &rows.concat(), &mut panel);
        let mut want = vec![0x55u8; p.panel_bytes(n)];
        reference(n, &rows.concat(), &mut want);
        assert!(
            panel == want,
            "{} {ty}: panel of {given} rows unpacked unlike the reference (seed {seed})",
            k.isa
        );
        let mut wide = vec![f32::NAN; 16 * 8];
        (p.wide)(n, &panel, &prepared, &mut wide);
        let mut narrow = vec![f32::NAN; 16 * 4];
        (p.narrow)(n, &panel, &prepared[4 * prow..], &mut narrow);
        if let Some(pair) = p.pair {
            // This panel, then one of 16 other rows: each half as `wide` gives it.
            let other: Vec<u8> = (0..16)
                .flat_map(|_| weight_row(&mut rng, ty, n, style))
                .collect();
            let mut second = vec![0u8; p.panel_bytes(n)];
            (p.unpack)(n, &other, &mut second);
            let mut want = wide.clone();
            want.resize(16 * 16, f32::NAN);
            (p.wide)(n, &second, &prepared, &mut want[16 * 8..]);
            let mut got = vec![f32::NAN; 16 * 16];
            (pair)(n, &[panel.clone(), second].concat(), &prepared, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits(),
                    "{} {ty}: panel pair of {given} rows, output {i}: {g} vs wide {w} (seed {seed})",
                    k.isa
                );
            }
        }
        if let Some(many) = p.many {
            check_many(k, many, p.wide, n, &panel, &prepared, prow, seed);
        }
        for (t, a) in cols.iter().enumerate() {
            for r in 0..checked {
                let want = rows.get(r).map_or(0.0, |wr| (k.vec_dot)(n, wr, a));
                let mut got = vec![wide[16 * t + r]];
                if t >= 4 {
                    got.push(narrow[16 * (t - 4) + r]);
                }
                for got in got {
                    assert!(
                        got.to_bits() == want.to_bits(),
                        "{} {ty}: panel of {given} rows, row {r} token {t}: {got} vs row kernel {want} (seed {seed})",
                        k.isa
                    );
                }
            }
        }
    }
}

/// A many-token kernel over `panel`, against one and then three groups of
/// sixteen rows (the eight prepared rows forwards, then reversed, then in
/// other orders): each output bit for bit as `wide` gives it for its eight.
#[allow(clippy::too_many_arguments)]
fn check_many(
    k: &TypeKernels,
    many: crate::panel::PanelFn,
    wide: crate::panel::PanelFn,
    n: usize,
    panel: &[u8],
    prepared: &[u8],
    prow: usize,
    seed: u64,
) {
    let rows: Vec<&[u8]> = prepared.chunks_exact(prow).collect();
    let eights: Vec<Vec<u8>> = (0..6)
        .map(|o| {
            (0..8)
                .flat_map(|t| rows[(t * (1 + o % 2 * 2) + o) % 8].to_vec())
                .collect()
        })
        .collect();
    for groups in [1, 3] {
        let eights = &eights[..2 * groups];
        let mut want = vec![f32::NAN; 16 * 8 * eights.len()];
        for (e, want) in eights.iter().zip(want.chunks_exact_mut(16 * 8)) {
            wide(n, panel, e, want);
        }
        let mut got = vec![f32::NAN; want.len()];
        many(n, panel, &eights.concat(), &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{} {}: {groups} group(s) in one call, output {i}: {g} vs wide {w} (seed {seed})",
                k.isa,
                k.weight
            );
        }
    }
}

/// Stored panels (where the ISA has them): two panels of sixteen rows
/// (`w` first) stored and read back byte for byte, dequantized rows equal
/// to the rows' own, and the one-token, wide and narrow kernels each giving
/// every (row, token) the row kernel's bits; the pair kernel (where the type
/// has one) over both panels each wide kernel's.
fn check_stored(k: &TypeKernels, n: usize, w: &[u8], cols: &[Vec<u8>], seed: u64, style: u64) {
    let (Some(s), Some(p)) = (k.stored, k.panel) else {
        return;
    };
    let ty = k.weight;
    let mut rng = Rng(seed ^ 0x5EED_57AB);
    let rows: Vec<Vec<u8>> = std::iter::once(w.to_vec())
        .chain((1..32).map(|_| weight_row(&mut rng, ty, n, style)))
        .collect();
    let wrow = w.len();
    let pb = 16 * wrow;
    let flat = rows.concat();
    let mut stored = vec![0xAAu8; flat.len()];
    for (src, dst) in flat.chunks_exact(pb).zip(stored.chunks_exact_mut(pb)) {
        (s.store)(n, src, dst);
    }
    // A stored panel unpacked gives the bytes of its rows unpacked.
    if let Some(unpack) = s.unpack {
        for (src, panel) in flat.chunks_exact(pb).zip(stored.chunks_exact(pb)) {
            let mut want = vec![0x11u8; p.panel_bytes(n)];
            (p.unpack)(n, src, &mut want);
            let mut got = vec![0x22u8; p.panel_bytes(n)];
            unpack(n, panel, &mut got);
            assert!(
                got == want,
                "{} {ty}: a stored panel unpacked unlike its rows (seed {seed})",
                k.isa
            );
        }
    }
    // Under Miri (about 1000× slower) a few rows only.
    let checked: Vec<usize> = if cfg!(miri) {
        vec![0, 17, 31]
    } else {
        (0..32).collect()
    };
    for &r in &checked {
        let panel = &stored[r / 16 * pb..][..pb];
        let mut back = vec![0x55u8; wrow];
        (s.row)(n, panel, r % 16, &mut back);
        assert!(
            back == rows[r],
            "{} {ty}: stored row {r} read back unlike it was (seed {seed})",
            k.isa
        );
        // The block casts want the blocks' alignment (Miri's allocations
        // give a `Vec<u8>` none).
        let mut aligned = vec![0u16; wrow.div_ceil(2)];
        let bytes = &mut bytemuck::cast_slice_mut::<u16, u8>(&mut aligned)[..wrow];
        bytes.copy_from_slice(&rows[r]);
        let mut want = vec![0f32; n];
        lamina_quant::dequantize_row(ty, bytes, &mut want).unwrap();
        let mut got = vec![f32::NAN; n];
        (s.dequantize_row)(n, panel, r % 16, &mut got);
        assert!(
            got.iter()
                .map(|v| v.to_bits())
                .eq(want.iter().map(|v| v.to_bits())),
            "{} {ty}: stored row {r} dequantized unlike the row (seed {seed})",
            k.isa
        );
    }
    let prow = p.act_row_bytes(n);
    let prepared = prepared_rows(&p, n, cols);
    let mut single = vec![f32::NAN; 32];
    let single_act = if s.single_reads_quantized {
        &cols[0][..]
    } else {
        &prepared[..prow]
    };
    (s.single)(n, &stored, single_act, &mut single);
    let mut wide = vec![f32::NAN; 16 * 8];
    (s.wide)(n, &stored[pb..], &prepared, &mut wide);
    let mut narrow = vec![f32::NAN; 16 * 4];
    (s.narrow)(n, &stored[..pb], &prepared[4 * prow..], &mut narrow);
    if let Some(many) = s.many {
        check_many(k, many, s.wide, n, &stored[pb..], &prepared, prow, seed);
    }
    // Both panels at once, each half as the wide kernel gives it.
    let mut pair = vec![f32::NAN; 2 * 16 * 8];
    if let Some(f) = s.pair {
        f(n, &stored, &prepared, &mut pair);
        let mut first = vec![f32::NAN; 16 * 8];
        (s.wide)(n, &stored[..pb], &prepared, &mut first);
        for (i, (g, w)) in pair.iter().zip(first.iter().chain(&wide)).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{} {ty}: stored panel pair, output {i}: {g} vs wide {w} (seed {seed})",
                k.isa
            );
        }
    }
    for &r in &checked {
        let (tokens, got_of): (&[usize], &dyn Fn(usize) -> f32) = if r < 16 {
            (&[0, 4, 5, 6, 7], &|t| {
                if t == 0 {
                    single[r]
                } else {
                    narrow[16 * (t - 4) + r]
                }
            })
        } else {
            (&[0, 1, 2, 3, 4, 5, 6, 7], &|t| wide[16 * t + r - 16])
        };
        for &t in tokens {
            let want = (k.vec_dot)(n, &rows[r], &cols[t]);
            let got = got_of(t);
            assert!(
                got.to_bits() == want.to_bits(),
                "{} {ty}: stored panel row {r} token {t}: {got} vs row kernel {want} (seed {seed})",
                k.isa
            );
        }
        if r >= 16 {
            let want = (k.vec_dot)(n, &rows[r], &cols[0]);
            assert!(
                single[r].to_bits() == want.to_bits(),
                "{} {ty}: stored panel row {r}, one token: {} vs row kernel {want} (seed {seed})",
                k.isa,
                single[r]
            );
        }
    }
}

/// The activation rows `cols` prepared for `p`'s kernels, back to back.
fn prepared_rows(p: &crate::panel::PanelFns, n: usize, cols: &[Vec<u8>]) -> Vec<u8> {
    cols.iter()
        .flat_map(|a| {
            let mut out = vec![0xAAu8; p.act_row_bytes(n)];
            (p.prepare)(n, a, &mut out);
            out
        })
        .collect()
}
