//! aarch64 kernels and their tables: [`NEON`] for any Advanced SIMD CPU,
//! [`DOTPROD`] for those with `sdot` (the same kernel bodies, instantiated
//! with the dot-product instruction instead of widening multiplies, plus
//! 1×8/1×4 tiles of the legacy types built on the indexed `sdot`).

pub(crate) mod neon;

use crate::GgmlType as T;
use crate::isa::Isa;
use crate::table::{
    QuantizeFn, Tile4Fn, Tile8Fn, TileFns, TypeKernels, VecDotFn, VecDotX4Fn, scalar,
};

/// `base` with the kernels given replaced. A row kernel comes with its own
/// x4 twin or none: the scalar x4 kernel would give tokens in groups of four
/// other bits than this row kernel gives a lone token (batch invariance).
const fn with(
    base: TypeKernels,
    isa: Isa,
    q: Option<QuantizeFn>,
    dot: Option<(VecDotFn, Option<VecDotX4Fn>)>,
) -> TypeKernels {
    let mut k = base;
    k.isa = isa;
    if let Some(q) = q {
        k.quantize_activation = q;
        k.simd.quantize = true;
    }
    if let Some((d, x4)) = dot {
        k.vec_dot = d;
        k.simd.vec_dot = true;
        k.vec_dot_x4 = x4;
        k.simd.vec_dot_x4 = x4.is_some();
        k.tiles = None;
    }
    k
}

/// `k` with 1×8 and 1×4 tiles.
const fn tiles(k: TypeKernels, x8: Tile8Fn, x4: Tile4Fn) -> TypeKernels {
    let mut k = k;
    k.tiles = Some(TileFns {
        x16: None,
        x12: None,
        x8,
        x4,
        // The signed `sdot` tiles leave the quant sums unused.
        sum_shift: 0,
    });
    k
}

macro_rules! table {
    ($isa:expr, $m:ident) => {
        [
            with(scalar(T::F32), $isa, None, Some((neon::vec_dot_f32, None))),
            with(scalar(T::F16), $isa, None, Some((neon::vec_dot_f16, None))),
            with(scalar(T::BF16), $isa, None, None),
            with(
                scalar(T::Q4_0),
                $isa,
                Some(neon::quantize_q8_0),
                Some((neon::$m::vec_dot_q4_0, Some(neon::$m::vec_dot_x4_q4_0))),
            ),
            with(
                scalar(T::Q4_1),
                $isa,
                Some(neon::quantize_q8_1),
                Some((neon::$m::vec_dot_q4_1, Some(neon::$m::vec_dot_x4_q4_1))),
            ),
            with(
                scalar(T::Q5_0),
                $isa,
                Some(neon::quantize_q8_0),
                Some((neon::$m::vec_dot_q5_0, Some(neon::$m::vec_dot_x4_q5_0))),
            ),
            with(
                scalar(T::Q5_1),
                $isa,
                Some(neon::quantize_q8_1),
                Some((neon::$m::vec_dot_q5_1, Some(neon::$m::vec_dot_x4_q5_1))),
            ),
            with(
                scalar(T::Q8_0),
                $isa,
                Some(neon::quantize_q8_0),
                Some((neon::$m::vec_dot_q8_0, Some(neon::$m::vec_dot_x4_q8_0))),
            ),
            with(scalar(T::Q2_K), $isa, Some(neon::quantize_q8_k), None),
            with(scalar(T::Q3_K), $isa, Some(neon::quantize_q8_k), None),
            with(
                scalar(T::Q4_K),
                $isa,
                Some(neon::quantize_q8_k),
                Some((neon::$m::vec_dot_q4_k, Some(neon::$m::vec_dot_x4_q4_k))),
            ),
            with(
                scalar(T::Q5_K),
                $isa,
                Some(neon::quantize_q8_k),
                Some((neon::$m::vec_dot_q5_k, Some(neon::$m::vec_dot_x4_q5_k))),
            ),
            with(
                scalar(T::Q6_K),
                $isa,
                Some(neon::quantize_q8_k),
                Some((neon::$m::vec_dot_q6_k, Some(neon::$m::vec_dot_x4_q6_k))),
            ),
        ]
    };
}

pub(crate) static NEON: [TypeKernels; 13] = table!(Isa::Neon, plain);
/// The dotprod table: [`NEON`]'s kernel bodies with `sdot`, plus the legacy
/// types' 1×8/1×4 tiles over packed activations (the same bits as the row kernels).
pub(crate) static DOTPROD: [TypeKernels; 13] = {
    let mut t = table!(Isa::NeonDotprod, dotprod);
    t[3] = tiles(t[3], neon::tiles::tile8_q4_0, neon::tiles::tile4_q4_0);
    t[5] = tiles(t[5], neon::tiles::tile8_q5_0, neon::tiles::tile4_q5_0);
    t[7] = tiles(t[7], neon::tiles::tile8_q8_0, neon::tiles::tile4_q8_0);
    t
};
