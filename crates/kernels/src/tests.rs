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
        f32 => F32, q4_0 => Q4_0, q5_0 => Q5_0, q8_0 => Q8_0, q3_k => Q3_K, q4_k => Q4_K,
        q5_k => Q5_K, q6_k => Q6_K,
    );
}

/// The AMX table natively, where the CPU has AMX and the OS grants it
/// (Miri runs no assembly). Its tile kernel is the stored Q4_K panels'.
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod amx_native {
    use super::*;
    crate::isa_proptests!(Isa::Amx;
        f32 => F32, q4_0 => Q4_0, q5_0 => Q5_0, q8_0 => Q8_0, q3_k => Q3_K, q4_k => Q4_K,
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
            assert!(tiles.wide.is_some() && tiles.widen.is_some(), "{ty}");
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
    #[test]
    fn q4_k() {
        run(GgmlType::Q4_K);
    }
    #[test]
    fn q6_k() {
        run(GgmlType::Q6_K);
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
