//! x86-64 kernels and their tables.
//!
//! [`AVX2`] replaces the scalar kernels with `avx2` ones where they exist;
//! [`AVX512`] starts from [`AVX2`] (every AVX-512 VNNI CPU has AVX2) and
//! replaces the Q4_K and Q6_K row/x4 kernels and all the tiles with VNNI
//! ones that keep AVX2's arithmetic (the same bits: batch invariance holds
//! across the two tables too), and adds the weight panels
//! ([`crate::panel`]), and eight-row kernels for Q8_0, Q4_0, Q5_0 and Q4_K
//! (four rows' blocks per 512-bit `vpdpbusd`; Q4_K's activation loads and
//! float step shared by eight rows), and an attention kernel in 512-bit
//! vectors with AVX2's bits. The legacy row kernels stay AVX2's: a
//! VNNI version (two blocks per 512-bit `vpdpbusd`, scales converted by
//! gathers) measured no faster in decoding.

/// The 1×16, 1×12, 1×8 and 1×4 tile functions of the legacy
/// (Q8_0-activation) types for one ISA: `#[target_feature]` entry points over
/// [`avx2::legacy_tile`] with a weight decoder (signed, or unsigned with its
/// offset's shift, which must be the table's [`TileFns::sum_shift`]) and the
/// ISA's block sums (generic over sets), and the checked wrappers the tables
/// hold.
macro_rules! legacy_tile_fns {
    ($feat:literal;
     $($ty:ident, $size:expr, $quants:ident, $shift:expr, $sets:ident,
       $k16:ident => $f16:ident, $k12:ident => $f12:ident, $k8:ident => $f8:ident,
       $k4:ident => $f4:ident;)*) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $k16(nb: usize, w: *const u8, packed: *const u8) -> [f32; 16] {
            let tile = legacy_tile::<4, 2, $shift>;
            // SAFETY: forwarded from the wrapper's checks.
            let ([a, b], _) = unsafe { tile(nb, w, $size, packed, $quants, $sets::<4>) };
            std::array::from_fn(|c| if c < 8 { a[c] } else { b[c - 8] })
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k12(nb: usize, w: *const u8, packed: *const u8) -> [f32; 12] {
            let tile = legacy_tile::<3, 1, $shift>;
            // SAFETY: forwarded from the wrapper's checks.
            let ([a], b) = unsafe { tile(nb, w, $size, packed, $quants, $sets::<3>) };
            std::array::from_fn(|c| if c < 8 { a[c] } else { b[c - 8] })
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k8(nb: usize, w: *const u8, packed: *const u8) -> [f32; 8] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { legacy_tile::<2, 1, $shift>(nb, w, $size, packed, $quants, $sets::<2>).0[0] }
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k4(nb: usize, w: *const u8, packed: *const u8) -> [f32; 4] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { legacy_tile::<1, 0, $shift>(nb, w, $size, packed, $quants, $sets::<1>).1 }
        }
        tile_wrappers!(Q8_0, $ty: $k16 => $f16, 16; $k12 => $f12, 12; $k8 => $f8, 8; $k4 => $f4, 4);
    )*};
}

/// The checked wrappers the tables hold, one per tile width: whole weight
/// blocks, a packed group of `act` activations of the width's rows.
macro_rules! tile_wrappers {
    ($act:ident, $ty:ident: $($k:ident => $f:ident, $width:literal);*) => {$(
        pub(crate) fn $f(n: usize, w: &[u8], packed: &[u8]) -> [f32; $width] {
            let nb = row_blocks(GgmlType::$ty, n, w);
            assert_eq!(
                packed.len(),
                crate::pack::group_bytes(GgmlType::$act, n, $width),
                "packed group size"
            );
            // SAFETY: `nb` weight blocks and `nb` packed block groups of the width's rows
            // (checked above); reachable only through a table handed out after the ISA's
            // detection.
            unsafe { $k(nb, w.as_ptr(), packed.as_ptr()) }
        }
    )*};
}

/// The 1×16, 1×12, 1×8 and 1×4 tile functions of a K-quant type for one
/// ISA: a tile body generic over its sets of four rows (with the ISA's unit,
/// where the body takes one), its `#[target_feature]` entry points and the
/// checked wrappers the tables hold.
macro_rules! k_tiles {
    ($feat:literal;
     $($ty:ident: $body:ident $(($unit:ident))?, $k16:ident => $f16:ident, $k12:ident => $f12:ident,
       $k8:ident => $f8:ident, $k4:ident => $f4:ident;)*) => {$(
        #[target_feature(enable = $feat)]
        unsafe fn $k16(nb: usize, w: *const u8, packed: *const u8) -> [f32; 16] {
            // SAFETY: forwarded from the wrapper's checks.
            let sets = unsafe { $body::<4>(nb, w, packed $(, $unit::<4>)?) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k12(nb: usize, w: *const u8, packed: *const u8) -> [f32; 12] {
            // SAFETY: forwarded from the wrapper's checks.
            let sets = unsafe { $body::<3>(nb, w, packed $(, $unit::<3>)?) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k8(nb: usize, w: *const u8, packed: *const u8) -> [f32; 8] {
            // SAFETY: forwarded from the wrapper's checks.
            let sets = unsafe { $body::<2>(nb, w, packed $(, $unit::<2>)?) };
            std::array::from_fn(|c| sets[c / 4][c % 4])
        }
        #[target_feature(enable = $feat)]
        unsafe fn $k4(nb: usize, w: *const u8, packed: *const u8) -> [f32; 4] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { $body::<1>(nb, w, packed $(, $unit::<1>)?)[0] }
        }
        tile_wrappers!(Q8_K, $ty: $k16 => $f16, 16; $k12 => $f12, 12; $k8 => $f8, 8; $k4 => $f4, 4);
    )*};
}

/// The attention kernels' entry points over a generic kernel (AVX2's
/// `attend`, AVX-512's `attend16`): `R` heads of f32 or f16 rows, as a table
/// of `AttendKernel`s indexed by `R - 1`, for one feature set.
macro_rules! attend_fns {
    ($feat:literal, $kernel:ident;
     $($table:ident: $esize:literal, $load:ident => $($name:ident: $r:literal),*;)*) => {$(
        $(
            #[target_feature(enable = $feat)]
            unsafe fn $name(rows: KeyRows, q: *const f32, out: *mut f32) {
                // SAFETY: forwarded from the wrapper's checks: `R·hd` values at `q` and `out`.
                unsafe {
                    let q = std::array::from_fn(|r| q.add(r * rows.hd));
                    let out = std::array::from_fn(|r| out.add(r * rows.hd));
                    $kernel::<$r, $esize>(rows, q, out, $load)
                }
            }
        )*
        const $table: [AttendKernel; crate::attention::MAX_HEADS] = [$($name),*];
    )*};
}

pub(crate) mod avx2;
pub(crate) mod avx2_panel;
pub(crate) mod avx512;

use crate::GgmlType as T;
use crate::isa::Isa;
use crate::panel;
use crate::table::{
    QuantizeFn, Tile4Fn, Tile8Fn, Tile12Fn, Tile16Fn, TileFns, TypeKernels, VecDotFn,
    VecDotRows8Fn, VecDotX4Fn, scalar,
};

/// `base` with the kernels given replaced, tagged with `isa`.
const fn with(
    base: TypeKernels,
    isa: Isa,
    q: Option<QuantizeFn>,
    dot: Option<VecDotFn>,
    x4: Option<VecDotX4Fn>,
) -> TypeKernels {
    let mut k = base;
    k.isa = isa;
    if let Some(q) = q {
        k.quantize_activation = q;
        k.simd.quantize = true;
    }
    if let Some(d) = dot {
        k.vec_dot = d;
        k.simd.vec_dot = true;
        // Eight-row kernels are written to match their own row kernel.
        k.vec_dot_rows8 = None;
        // A SIMD row kernel must not be mixed with the scalar x4 kernel: tokens
        // in groups of four would get other bits than a lone token (batch
        // invariance). SIMD x4 kernels are written to match their row kernels.
        if x4.is_none() && !base.simd.vec_dot_x4 {
            k.vec_dot_x4 = None;
            k.simd.vec_dot_x4 = false;
        }
    }
    if let Some(x) = x4 {
        k.vec_dot_x4 = Some(x);
        k.simd.vec_dot_x4 = true;
    }
    k
}

/// `k` with an eight-row kernel (written to match `k`'s row kernel).
const fn rows8(k: TypeKernels, f: VecDotRows8Fn) -> TypeKernels {
    let mut k = k;
    k.vec_dot_rows8 = Some(f);
    k
}

/// `k` with 1×16, 1×12, 1×8 and 1×4 tile kernels, whose unsigned weights carry an
/// offset of `2^sum_shift` (0: signed weights, or Q8_K activations).
const fn tiles(
    k: TypeKernels,
    sum_shift: u32,
    (x16, x12, x8, x4): (Tile16Fn, Tile12Fn, Tile8Fn, Tile4Fn),
) -> TypeKernels {
    let mut k = k;
    k.tiles = Some(TileFns {
        x16: Some(x16),
        x12: Some(x12),
        x8,
        x4,
        sum_shift,
    });
    k
}

/// `k` (with panels) quantizing and preparing activations in one pass.
const fn fused(k: TypeKernels, f: panel::QuantizePreparedFn) -> TypeKernels {
    let mut k = k;
    if let Some(p) = &mut k.panel {
        p.quantize_prepared = Some(f);
    }
    k
}

/// `k` (with panels) multiplying matrices stored as panels too.
const fn stored(k: TypeKernels, fns: panel::StoredPanelFns) -> TypeKernels {
    let mut k = k;
    k.stored = Some(fns);
    k
}

/// `k` with weight panels: `unpack`/`prepare` from [`crate::panel`], the
/// kernels for 8 and 4 tokens, and the layout's sizes. Batches of 32 tokens
/// or more take them with AVX-512 (12 tokens took 19.1 ms through panels
/// against 13.3 through the tiles; at 31 the two were even); with AVX2, 20
/// or more (on a Zen 3 part, 16 tokens of 1152×768 Q6_K took 0.15 ms through
/// panels against 0.11 through the tiles; at 20 tokens Q8_0 was even and the
/// K-quants 10-25 % faster through panels, at 32 all three 10-25 %).
const fn panels(
    k: TypeKernels,
    unpack: panel::UnpackFn,
    prepare: panel::PrepareFn,
    kernels: (panel::PanelFn, panel::PanelFn),
    block_bytes: usize,
    act_block_bytes: usize,
) -> TypeKernels {
    let mut k = k;
    k.panel = Some(panel::PanelFns {
        unpack,
        prepare,
        quantize_prepared: None,
        wide: kernels.0,
        narrow: kernels.1,
        block_bytes,
        act_block_bytes,
        block_values: match k.weight {
            T::Q4_K | T::Q6_K => 256,
            _ => 32,
        },
        min_tokens: match k.isa {
            Isa::Avx2 => 20,
            _ => 32,
        },
    });
    k
}

const A: Isa = Isa::Avx2;
const Q8_0: Option<QuantizeFn> = Some(avx2::quantize_q8_0);
const Q8_1: Option<QuantizeFn> = Some(avx2::quantize_q8_1);
const Q8_K: Option<QuantizeFn> = Some(avx2::quantize_q8_k);

pub(crate) static AVX2: [TypeKernels; 13] = [
    with(scalar(T::F32), A, None, Some(avx2::vec_dot_f32), None),
    with(scalar(T::F16), A, None, Some(avx2::vec_dot_f16), None),
    with(scalar(T::BF16), A, None, None, None),
    fused(
        panels(
            tiles(
                rows8(
                    with(
                        scalar(T::Q4_0),
                        A,
                        Q8_0,
                        Some(avx2::vec_dot_q4_0),
                        Some(avx2::vec_dot_x4_q4_0),
                    ),
                    avx2::vec_dot_rows8_q4_0,
                ),
                3,
                (
                    avx2::tile16_q4_0,
                    avx2::tile12_q4_0,
                    avx2::tile8_q4_0,
                    avx2::tile4_q4_0,
                ),
            ),
            avx2_panel::unpack_q4_0,
            panel::prepare_q4_0,
            (avx2_panel::panel8_q4_0, avx2_panel::panel4_q4_0),
            panel::LEGACY_BLOCK,
            panel::LEGACY_ACT,
        ),
        avx2::quantize_prepared_q4_0,
    ),
    with(
        scalar(T::Q4_1),
        A,
        Q8_1,
        Some(avx2::vec_dot_q4_1),
        Some(avx2::vec_dot_x4_q4_1),
    ),
    fused(
        panels(
            tiles(
                rows8(
                    with(
                        scalar(T::Q5_0),
                        A,
                        Q8_0,
                        Some(avx2::vec_dot_q5_0),
                        Some(avx2::vec_dot_x4_q5_0),
                    ),
                    avx2::vec_dot_rows8_q5_0,
                ),
                4,
                (
                    avx2::tile16_q5_0,
                    avx2::tile12_q5_0,
                    avx2::tile8_q5_0,
                    avx2::tile4_q5_0,
                ),
            ),
            avx2_panel::unpack_q5_0,
            panel::prepare_q5_0,
            (avx2_panel::panel8_q5_0, avx2_panel::panel4_q5_0),
            panel::LEGACY_BLOCK,
            panel::LEGACY_ACT,
        ),
        avx2::quantize_prepared_q5_0,
    ),
    with(
        scalar(T::Q5_1),
        A,
        Q8_1,
        Some(avx2::vec_dot_q5_1),
        Some(avx2::vec_dot_x4_q5_1),
    ),
    panels(
        tiles(
            rows8(
                with(
                    scalar(T::Q8_0),
                    A,
                    Q8_0,
                    Some(avx2::vec_dot_q8_0),
                    Some(avx2::vec_dot_x4_q8_0),
                ),
                avx2::vec_dot_rows8_q8_0,
            ),
            0,
            (
                avx2::tile16_q8_0,
                avx2::tile12_q8_0,
                avx2::tile8_q8_0,
                avx2::tile4_q8_0,
            ),
        ),
        avx2_panel::unpack_q8_0_i16,
        panel::prepare_q8_0_i16,
        (avx2_panel::panel8_q8_0, avx2_panel::panel4_q8_0),
        panel::Q8_0_I16_BLOCK,
        panel::Q8_0_I16_ACT,
    ),
    with(scalar(T::Q2_K), A, Q8_K, None, None),
    with(scalar(T::Q3_K), A, Q8_K, None, None),
    panels(
        tiles(
            with(
                scalar(T::Q4_K),
                A,
                Q8_K,
                Some(avx2::vec_dot_q4_k),
                Some(avx2::vec_dot_x4_q4_k),
            ),
            0,
            (
                avx2::tile16_q4_k,
                avx2::tile12_q4_k,
                avx2::tile8_q4_k,
                avx2::tile4_q4_k,
            ),
        ),
        avx2_panel::unpack_q4_k,
        panel::prepare_q4_k,
        (avx2_panel::panel8_q4_k, avx2_panel::panel4_q4_k),
        panel::Q4_K_BLOCK,
        panel::Q4_K_ACT,
    ),
    tiles(
        with(
            scalar(T::Q5_K),
            A,
            Q8_K,
            Some(avx2::vec_dot_q5_k),
            Some(avx2::vec_dot_x4_q5_k),
        ),
        0,
        (
            avx2::tile16_q5_k,
            avx2::tile12_q5_k,
            avx2::tile8_q5_k,
            avx2::tile4_q5_k,
        ),
    ),
    panels(
        tiles(
            with(
                scalar(T::Q6_K),
                A,
                Q8_K,
                Some(avx2::vec_dot_q6_k),
                Some(avx2::vec_dot_x4_q6_k),
            ),
            0,
            (
                avx2::tile16_q6_k,
                avx2::tile12_q6_k,
                avx2::tile8_q6_k,
                avx2::tile4_q6_k,
            ),
        ),
        avx2_panel::unpack_q6_k,
        panel::prepare_q6_k,
        (avx2_panel::panel8_q6_k, avx2_panel::panel4_q6_k),
        panel::Q6_K_BLOCK,
        panel::Q6_K_ACT,
    ),
];

const V: Isa = Isa::Avx512Vnni;
const LEGACY_PANEL: (panel::PanelFn, panel::PanelFn) =
    (avx512::panel8_legacy, avx512::panel4_legacy);

pub(crate) static AVX512: [TypeKernels; 13] = [
    with(AVX2[0], V, None, None, None),
    with(AVX2[1], V, None, None, None),
    with(AVX2[2], V, None, None, None),
    fused(
        panels(
            tiles(
                rows8(
                    with(AVX2[3], V, None, None, None),
                    avx512::vec_dot_rows8_q4_0,
                ),
                3,
                (
                    avx512::tile16_q4_0,
                    avx512::tile12_q4_0,
                    avx512::tile8_q4_0,
                    avx512::tile4_q4_0,
                ),
            ),
            avx512::unpack_q4_0,
            panel::prepare_q4_0,
            LEGACY_PANEL,
            panel::LEGACY_BLOCK,
            panel::LEGACY_ACT,
        ),
        avx2::quantize_prepared_q4_0,
    ),
    with(AVX2[4], V, None, None, None),
    stored(
        fused(
            panels(
                tiles(
                    rows8(
                        with(AVX2[5], V, None, None, None),
                        avx512::vec_dot_rows8_q5_0,
                    ),
                    4,
                    (
                        avx512::tile16_q5_0,
                        avx512::tile12_q5_0,
                        avx512::tile8_q5_0,
                        avx512::tile4_q5_0,
                    ),
                ),
                avx512::unpack_q5_0,
                panel::prepare_q5_0,
                LEGACY_PANEL,
                panel::LEGACY_BLOCK,
                panel::LEGACY_ACT,
            ),
            avx2::quantize_prepared_q5_0,
        ),
        panel::StoredPanelFns {
            store: panel::store_q5_0,
            row: panel::stored_row_q5_0,
            dequantize_row: panel::stored_dequantize_row_q5_0,
            single: avx512::stored_single_q5_0,
            single_reads_quantized: false,
            wide: avx512::panel8_stored_q5_0,
            narrow: avx512::panel4_stored_q5_0,
            block_bytes: panel::STORED_Q5_0_BLOCK,
            unpack: Some(avx512::unpack_stored_q5_0),
        },
    ),
    with(AVX2[6], V, None, None, None),
    stored(
        fused(
            panels(
                tiles(
                    rows8(
                        with(AVX2[7], V, None, None, None),
                        avx512::vec_dot_rows8_q8_0,
                    ),
                    7,
                    (
                        avx512::tile16_q8_0,
                        avx512::tile12_q8_0,
                        avx512::tile8_q8_0,
                        avx512::tile4_q8_0,
                    ),
                ),
                avx512::unpack_q8_0,
                panel::prepare_q8_0,
                LEGACY_PANEL,
                panel::LEGACY_BLOCK,
                panel::LEGACY_ACT,
            ),
            avx2::quantize_prepared_q8_0,
        ),
        panel::StoredPanelFns {
            store: panel::store_q8_0,
            row: panel::stored_row_q8_0,
            dequantize_row: panel::stored_dequantize_row_q8_0,
            single: avx512::stored_single_q8_0,
            single_reads_quantized: false,
            wide: avx512::panel8_stored_q8_0,
            narrow: avx512::panel4_stored_q8_0,
            block_bytes: panel::STORED_Q8_0_BLOCK,
            // Its stored blocks are the panel's, scales as f16.
            unpack: None,
        },
    ),
    with(AVX2[8], V, None, None, None),
    with(AVX2[9], V, None, None, None),
    // The K-quant tiles with VNNI units (rows side by side, the same bits as
    // the VNNI row kernels).
    stored(
        panels(
            tiles(
                rows8(
                    with(
                        AVX2[10],
                        V,
                        None,
                        Some(avx512::vec_dot_q4_k),
                        Some(avx512::vec_dot_x4_q4_k),
                    ),
                    avx512::vec_dot_rows8_q4_k,
                ),
                0,
                (
                    avx512::tile16_q4_k,
                    avx512::tile12_q4_k,
                    avx512::tile8_q4_k,
                    avx512::tile4_q4_k,
                ),
            ),
            avx512::unpack_q4_k,
            panel::prepare_q4_k,
            (avx512::panel8_q4_k, avx512::panel4_q4_k),
            panel::Q4_K_BLOCK,
            panel::Q4_K_ACT,
        ),
        panel::StoredPanelFns {
            store: panel::store_q4_k,
            row: panel::stored_row_q4_k,
            dequantize_row: panel::stored_dequantize_row_q4_k,
            single: avx512::stored_single_q4_k,
            single_reads_quantized: false,
            wide: avx512::panel8_stored_q4_k,
            narrow: avx512::panel4_stored_q4_k,
            block_bytes: panel::STORED_Q4_K_BLOCK,
            unpack: Some(avx512::unpack_stored_q4_k),
        },
    ),
    with(AVX2[11], V, None, None, None),
    stored(
        panels(
            tiles(
                with(
                    AVX2[12],
                    V,
                    None,
                    Some(avx512::vec_dot_q6_k),
                    Some(avx512::vec_dot_x4_q6_k),
                ),
                0,
                (
                    avx512::tile16_q6_k,
                    avx512::tile12_q6_k,
                    avx512::tile8_q6_k,
                    avx512::tile4_q6_k,
                ),
            ),
            avx512::unpack_q6_k,
            panel::prepare_q6_k,
            (avx512::panel8_q6_k, avx512::panel4_q6_k),
            panel::Q6_K_BLOCK,
            panel::Q6_K_ACT,
        ),
        panel::StoredPanelFns {
            store: panel::store_q6_k,
            row: panel::stored_row_q6_k,
            dequantize_row: panel::stored_dequantize_row_q6_k,
            single: avx512::stored_single_q6_k,
            single_reads_quantized: true,
            wide: avx512::panel8_stored_q6_k,
            narrow: avx512::panel4_stored_q6_k,
            block_bytes: panel::STORED_Q6_K_BLOCK,
            unpack: Some(avx512::unpack_stored_q6_k),
        },
    ),
];
