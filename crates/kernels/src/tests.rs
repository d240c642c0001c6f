//! Every ISA's table against the scalar reference (see [`crate::testutil`]
//! for data and tolerances). Tests of an ISA the CPU lacks are skipped,
//! except under Miri, where the AVX-512 ones must run.

use crate::isa::Isa;

mod scalar_tiles {
    use super::*;
    // The scalar 1×4 tiles against the scalar row kernels.
    crate::isa_proptests!(Isa::Scalar;
        q4_0 => Q4_0, q5_0 => Q5_0, q8_0 => Q8_0,
        q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K,
    );
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    crate::isa_proptests!(Isa::Avx2;
        f32 => F32, f16 => F16, bf16 => BF16,
        q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0,
        q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K,
    );
}

#[cfg(target_arch = "x86_64")]
mod avx512_native {
    use super::*;
    crate::isa_proptests!(Isa::Avx512Vnni;
        f32 => F32, bf16 => BF16, q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0, q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K,
        q5_k => Q5_K, q6_k => Q6_K,
    );
}

/// The AMX table natively, where the CPU has AMX and the OS grants it
/// (Miri runs no assembly). Its tile kernel is the stored Q4_K panels'.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod amx_native {
    use super::*;
    crate::isa_proptests!(Isa::Amx;
        f32 => F32, bf16 => BF16, q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0, q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K,
        q5_k => Q5_K, q6_k => Q6_K,
    );

    /// The table's stored Q4_K and Q6_K panels are the tile unit's, not
    /// AVX-512's.
    #[test]
    fn stored_k_quant_panels_are_the_tile_units() {
        if !crate::testutil::runs_here(Isa::Amx) {
            return;
        }
        for ty in [crate::GgmlType::Q4_K, crate::GgmlType::Q6_K] {
            let stored = |isa| crate::testutil::entry(isa, ty).stored.unwrap();
            assert!(stored(Isa::Amx).many.is_some(), "{ty}");
            assert!(stored(Isa::Avx512Vnni).many.is_none(), "{ty}");
        }
    }
}

/// Small deterministic cases for Miri (`.ci/isa-tests.sh`), which interprets
/// the AVX-512 VNNI intrinsics ~1000× slower than native.
#[cfg(target_arch = "x86_64")]
mod miri_avx512 {
    use super::*;
    use crate::GgmlType;
    use crate::testutil::{check_case, check_dot_only, check_stored_single, entry, runs_here};

    fn run(ty: GgmlType) {
        if !runs_here(Isa::Avx512Vnni) {
            return;
        }
        let k = entry(Isa::Avx512Vnni, ty);
        // VNNI kernels replace AVX2's: the tiles of the legacy types and Q6_K,
        // the row kernels of the K-quants.
        let avx2 = entry(Isa::Avx2, ty);
        let tile = |k: &crate::TypeKernels| k.tiles.map(|t| t.x8 as usize);
        let vnni = if ty.block_size() == 256 {
            k.vec_dot as usize != avx2.vec_dot as usize
        } else {
            tile(k).is_some() && tile(k) != tile(avx2)
        };
        assert!(vnni, "{ty}: the AVX-512 table must use VNNI kernels");
        // 3 blocks: an odd count exercises the remainder paths. Q6_K's
        // one-token stored kernel takes rows past 16 super-blocks in chunks.
        let long = 16 + 3;
        if cfg!(miri) {
            // Miri's time grows with the blocks: random quants and mixed
            // scales on three (block pairs and a tail), extreme quants on
            // two (both extremes), huge and tiny scales on one.
            for (seed, style, blocks) in [(1, 0, 3), (2, 4, 2), (3, 3, 1), (4, 2, 1)] {
                check_dot_only(k, seed, blocks, style);
            }
            check_stored_single(k, 6, long);
        } else {
            for (seed, style) in [(1, 0), (2, 4), (3, 13)] {
                check_case(k, seed, 3, style);
            }
            check_case(k, 6, long, 0);
        }
    }

    /// F16 and BF16 batches widen to the 512-bit F32 tile, with the bits of
    /// AVX2's row kernels, which the table keeps.
    #[test]
    fn halves() {
        if !runs_here(Isa::Avx512Vnni) {
            return;
        }
        // Under Miri, BF16 only: the `half` crate's f16 conversions, which
        // make the F16 test data, take F16C, which Miri lacks.
        let types: &[GgmlType] = if cfg!(miri) {
            &[GgmlType::BF16]
        } else {
            &[GgmlType::F16, GgmlType::BF16]
        };
        for &ty in types {
            let k = entry(Isa::Avx512Vnni, ty);
            let tiles = k.f32_tiles.expect("F32 tiles");
            // BF16 in pairs ([`bf16_pairs`]) reads its rows as they are.
            let pairs = ty == GgmlType::BF16 && Isa::has_avx512_bf16();
            assert!(tiles.wide.is_some(), "{ty}");
            assert_eq!(tiles.widen.is_some(), !pairs, "{ty}");
            for (seed, style) in [(1, 0), (2, 4), (7, 13)] {
                check_case(k, seed, 3, style);
            }
        }
    }

    /// The 512-bit F32 tile against AVX2's row kernel, which the table keeps.
    #[test]
    fn f32() {
        if !runs_here(Isa::Avx512Vnni) {
            return;
        }
        let k = entry(Isa::Avx512Vnni, GgmlType::F32);
        assert!(
            k.f32_tiles.and_then(|t| t.wide).is_some(),
            "the 512-bit tile"
        );
        for (seed, style) in [(1, 0), (2, 4), (7, 13)] {
            check_case(k, seed, 3, style);
        }
    }
    #[test]
    fn q8_0() {
        run(GgmlType::Q8_0);
    }
    #[test]
    fn q4_0() {
        run(GgmlType::Q4_0);
    }
    #[test]
    fn q5_0() {
        run(GgmlType::Q5_0);
    }
    /// Q4_1, Q5_1 and Q2_K keep AVX2's row kernels and add VNNI panels
    /// (and stored panels for Q4_1 and Q5_1).
    #[test]
    fn panels_without_tiles() {
        if !runs_here(Isa::Avx512Vnni) {
            return;
        }
        for ty in [GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q2_K] {
            let k = entry(Isa::Avx512Vnni, ty);
            assert!(
                k.panel.is_some(),
                "{ty}: the AVX-512 table must have panels"
            );
            if cfg!(miri) {
                for (seed, style, blocks) in [(1, 0, 3), (2, 4, 2)] {
                    check_dot_only(k, seed, blocks, style);
                }
                // Q4_1 and Q5_1 are stored as panels (Q2_K is not).
                check_stored_single(k, 6, 3);
            } else {
                for (seed, style) in [(1, 0), (2, 4), (3, 13)] {
                    check_case(k, seed, 3, style);
                }
            }
        }
    }
    #[test]
    fn q4_k() {
        run(GgmlType::Q4_K);
    }
    #[test]
    fn q6_k() {
        run(GgmlType::Q6_K);
    }
}

/// BF16 on CPUs with AVX-512 BF16: `vdpbf16ps` in every kernel.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod bf16_pairs {
    use super::*;
    use crate::GgmlType;
    use crate::testutil::{Rng, check_case, entry};

    /// The chain the module documents (`x86_64::avx512::bf16`), in scalar
    /// f32: each lane adds its odd product, then its even one, per sixteen
    /// values; AVX2's reduction tree; the tail one product at a time.
    fn reference(w: &[u16], a: &[u16]) -> f32 {
        let widen = |v: u16| f32::from_bits(u32::from(v) << 16);
        let n = w.len();
        let mut lanes = [0.0f32; 8];
        for i in (0..n / 16 * 16).step_by(16) {
            for (l, lane) in lanes.iter_mut().enumerate() {
                for k in [i + 2 * l + 1, i + 2 * l] {
                    *lane += widen(w[k]) * widen(a[k]);
                }
            }
        }
        let s: [f32; 4] = std::array::from_fn(|j| lanes[j] + lanes[j + 4]);
        let mut sum = (s[0] + s[2]) + (s[1] + s[3]);
        for k in n / 16 * 16..n {
            sum += widen(w[k]) * widen(a[k]);
        }
        sum
    }

    /// Random bf16 values of either sign, magnitudes 2^-8..2^8 (normal:
    /// `vdpbf16ps` flushes denormals, the reference would not).
    fn values(rng: &mut Rng, n: usize) -> Vec<u16> {
        (0..n)
            .map(|_| {
                let x = (rng.next() % 2001) as f32 / 1000.0 - 1.0;
                let e = (rng.next() % 17) as i32 - 8;
                let v = if x == 0.0 { 0.5 } else { x } * 2f32.powi(e);
                (v.to_bits() >> 16) as u16
            })
            .collect()
    }

    #[test]
    fn the_tables_multiply_bf16_in_pairs() {
        if !Isa::has_avx512_bf16() {
            return;
        }
        for isa in [Isa::Avx512Vnni, Isa::Amx] {
            if !isa.is_available() {
                continue;
            }
            let k = entry(isa, GgmlType::BF16);
            assert_eq!(
                k.vec_dot as usize,
                crate::x86_64::avx512::vec_dot_bf16_pairs as crate::dispatch::VecDotFn as usize,
                "{isa}"
            );
            assert!(k.f32_tiles.is_some_and(|t| t.widen.is_none()), "{isa}");
        }
    }

    /// The row kernel has the documented bits: this checks the CPU's
    /// `vdpbf16ps` against the order and rounding the module relies on.
    #[test]
    fn the_row_kernel_is_the_documented_chain() {
        if !Isa::has_avx512_bf16() {
            return;
        }
        let k = entry(Isa::Avx512Vnni, GgmlType::BF16);
        let mut rng = Rng(11);
        for n in [1, 15, 16, 17, 64, 100, 384, 1000] {
            for _ in 0..20 {
                let (w, a) = (values(&mut rng, n), values(&mut rng, n));
                let want = reference(&w, &a);
                let got = (k.vec_dot)(n, bytemuck::cast_slice(&w), bytemuck::cast_slice(&a));
                assert_eq!(got.to_bits(), want.to_bits(), "n {n}: {got} vs {want}");
            }
        }
    }

    /// Rows, eight rows and both tiles keep the row kernel's bits, over
    /// lengths with and without a tail; the sums stay near the F32 ones.
    #[test]
    fn every_kernel_keeps_the_row_kernels_bits() {
        if !Isa::has_avx512_bf16() {
            return;
        }
        let k = entry(Isa::Avx512Vnni, GgmlType::BF16);
        for seed in 0..24 {
            check_case(k, seed, 1 + seed as usize % 5, seed % 20);
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::*;
    crate::isa_proptests!(Isa::Neon;
        f32 => F32, f16 => F16, bf16 => BF16,
        q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0,
        q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K,
    );
}

#[cfg(target_arch = "aarch64")]
mod dotprod {
    use super::*;
    crate::isa_proptests!(Isa::NeonDotprod;
        f32 => F32, f16 => F16, bf16 => BF16,
        q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0,
        q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K,
    );
}
