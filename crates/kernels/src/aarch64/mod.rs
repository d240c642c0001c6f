//! aarch64 kernels and their tables: [`NEON`] for any Advanced SIMD CPU,
//! [`DOTPROD`] for those with `sdot`. Both use the same kernel bodies,
//! instantiated with the dot-product instruction or with widening
//! multiplies; DOTPROD adds 1×8/1×4 tiles of the legacy types built on the
//! indexed `sdot`.
//!
//! Each entry is a named constant built with struct-update syntax from the
//! scalar entry (DOTPROD's from NEON's): every field an ISA replaces is
//! named where it is set. A SIMD row kernel always comes with its own 1×4
//! twin: the scalar 1×4 kernel would give tokens in groups of four other
//! bits than the row kernel gives a lone token (batch invariance).

pub(crate) mod neon;

use crate::GgmlType as T;
use crate::dispatch::{Simd, TileFns, TypeKernels, scalar};
use crate::isa::Isa;

/// Every kernel of the entry is SIMD: quantizer, row and 1×4 kernels.
const ALL_SIMD: Simd = Simd {
    quantize: true,
    vec_dot: true,
    vec_dot_x4: true,
};

/// Only the quantizer is SIMD (the type's dots stay scalar).
const QUANTIZE_SIMD: Simd = Simd {
    quantize: true,
    vec_dot: false,
    vec_dot_x4: false,
};

/// Only the row kernel is SIMD (float types have no 1×4 kernel).
const ROW_SIMD: Simd = Simd {
    quantize: false,
    vec_dot: true,
    vec_dot_x4: false,
};

const NEON_F32: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ROW_SIMD,
    vec_dot: neon::vec_dot_f32,
    vec_dot_x4: None,
    vec_dot_rows8: Some(neon::vec_dot_rows8_f32),
    f32_tiles: Some(crate::dispatch::F32Tiles {
        narrow: neon::F32_TILE,
        wide: None,
        widen: None,
    }),
    ..scalar(T::F32)
};

/// F16 and BF16 batches widen both sides to take the F32 tile, whose bits
/// their row kernels keep.
const NEON_F16: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ROW_SIMD,
    vec_dot: neon::vec_dot_f16,
    vec_dot_x4: None,
    vec_dot_rows8: Some(neon::vec_dot_rows8_f16),
    f32_tiles: Some(crate::dispatch::F32Tiles {
        narrow: neon::F32_TILE,
        wide: None,
        widen: Some(neon::widen_f16),
    }),
    ..scalar(T::F16)
};

const NEON_BF16: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ROW_SIMD,
    vec_dot: neon::vec_dot_bf16,
    vec_dot_x4: None,
    vec_dot_rows8: Some(neon::vec_dot_rows8_bf16),
    f32_tiles: Some(crate::dispatch::F32Tiles {
        narrow: neon::F32_TILE,
        wide: None,
        widen: Some(neon::widen_bf16),
    }),
    ..scalar(T::BF16)
};

const NEON_Q4_0: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_0,
    vec_dot: neon::plain::vec_dot_q4_0,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q4_0),
    ..scalar(T::Q4_0)
};

const NEON_Q4_1: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_1,
    vec_dot: neon::plain::vec_dot_q4_1,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q4_1),
    ..scalar(T::Q4_1)
};

const NEON_Q5_0: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_0,
    vec_dot: neon::plain::vec_dot_q5_0,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q5_0),
    ..scalar(T::Q5_0)
};

const NEON_Q5_1: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_1,
    vec_dot: neon::plain::vec_dot_q5_1,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q5_1),
    ..scalar(T::Q5_1)
};

const NEON_Q8_0: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_0,
    vec_dot: neon::plain::vec_dot_q8_0,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q8_0),
    ..scalar(T::Q8_0)
};

const NEON_Q2_K: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: QUANTIZE_SIMD,
    quantize_activation: neon::quantize_q8_k,
    ..scalar(T::Q2_K)
};

const NEON_Q3_K: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: QUANTIZE_SIMD,
    quantize_activation: neon::quantize_q8_k,
    ..scalar(T::Q3_K)
};

const NEON_Q4_K: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_k,
    vec_dot: neon::plain::vec_dot_q4_k,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q4_k),
    ..scalar(T::Q4_K)
};

const NEON_Q5_K: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_k,
    vec_dot: neon::plain::vec_dot_q5_k,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q5_k),
    ..scalar(T::Q5_K)
};

const NEON_Q6_K: TypeKernels = TypeKernels {
    isa: Isa::Neon,
    simd: ALL_SIMD,
    quantize_activation: neon::quantize_q8_k,
    vec_dot: neon::plain::vec_dot_q6_k,
    vec_dot_x4: Some(neon::plain::vec_dot_x4_q6_k),
    ..scalar(T::Q6_K)
};

pub(crate) static NEON: [TypeKernels; 13] = [
    NEON_F32, NEON_F16, NEON_BF16, NEON_Q4_0, NEON_Q4_1, NEON_Q5_0, NEON_Q5_1, NEON_Q8_0,
    NEON_Q2_K, NEON_Q3_K, NEON_Q4_K, NEON_Q5_K, NEON_Q6_K,
];

/// A NEON entry's kernels, tagged as the DOTPROD table's (types whose
/// kernels do not use `sdot`).
const fn on_dotprod(k: TypeKernels) -> TypeKernels {
    TypeKernels {
        isa: Isa::NeonDotprod,
        ..k
    }
}

const DOTPROD_Q4_0: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q4_0,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q4_0),
    tiles: Some(TileFns {
        x16: None,
        x12: None,
        x8: neon::tile8_q4_0,
        x4: neon::tile4_q4_0,
        // The signed `sdot` tiles leave the quant sums unused.
        sum_shift: 0,
    }),
    ..NEON_Q4_0
};

const DOTPROD_Q4_1: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q4_1,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q4_1),
    ..NEON_Q4_1
};

const DOTPROD_Q5_0: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q5_0,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q5_0),
    tiles: Some(TileFns {
        x16: None,
        x12: None,
        x8: neon::tile8_q5_0,
        x4: neon::tile4_q5_0,
        // The signed `sdot` tiles leave the quant sums unused.
        sum_shift: 0,
    }),
    ..NEON_Q5_0
};

const DOTPROD_Q5_1: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q5_1,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q5_1),
    ..NEON_Q5_1
};

const DOTPROD_Q8_0: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q8_0,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q8_0),
    tiles: Some(TileFns {
        x16: None,
        x12: None,
        x8: neon::tile8_q8_0,
        x4: neon::tile4_q8_0,
        // The signed `sdot` tiles leave the quant sums unused.
        sum_shift: 0,
    }),
    ..NEON_Q8_0
};

const DOTPROD_Q4_K: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q4_k,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q4_k),
    ..NEON_Q4_K
};

const DOTPROD_Q5_K: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q5_k,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q5_k),
    ..NEON_Q5_K
};

const DOTPROD_Q6_K: TypeKernels = TypeKernels {
    isa: Isa::NeonDotprod,
    vec_dot: neon::dotprod::vec_dot_q6_k,
    vec_dot_x4: Some(neon::dotprod::vec_dot_x4_q6_k),
    ..NEON_Q6_K
};

pub(crate) static DOTPROD: [TypeKernels; 13] = [
    on_dotprod(NEON_F32),
    on_dotprod(NEON_F16),
    on_dotprod(NEON_BF16),
    DOTPROD_Q4_0,
    DOTPROD_Q4_1,
    DOTPROD_Q5_0,
    DOTPROD_Q5_1,
    DOTPROD_Q8_0,
    on_dotprod(NEON_Q2_K),
    on_dotprod(NEON_Q3_K),
    DOTPROD_Q4_K,
    DOTPROD_Q5_K,
    DOTPROD_Q6_K,
];
