//! x86-64 kernels and their tables.
//!
//! [`AVX2`] replaces the scalar kernels with `avx2` ones where they exist,
//! and stores Q4_K, Q6_K, Q4_0, Q5_0, Q4_1 and Q5_1 matrices as panels
//! (Q8_0's rows already stream at the limit there).
//! [`AVX512`] starts from [`AVX2`], since every AVX-512 VNNI CPU has AVX2.
//! It takes VNNI row and 1×4 kernels for Q4_K and Q6_K, VNNI tiles for
//! every tiled type, eight-row kernels for Q8_0, Q4_0, Q5_0 and Q4_K, the
//! weight panels ([`crate::panel`]) and stored panels, and a 512-bit F32
//! tile. Every AVX-512 kernel keeps AVX2's arithmetic, so a token gets the
//! same bits from either table.
//! The legacy row kernels stay AVX2's: a VNNI version is no faster there.
//! [`AMX`] starts from [`AVX512`] and multiplies stored Q4_K batches on the
//! tile unit, sixteen tokens a group, with their bits.
//! Where the CPU has AVX-512 BF16, [`AVX512_WITH_BF16`] and [`AMX_WITH_BF16`]
//! replace their BF16 entry with `vdpbf16ps` kernels, which have bits of
//! their own (not AVX2's widened chain).
//!
//! Q4_1, Q5_1 and Q2_K, which have no tiles, have panels beside their row
//! kernels.
//!
//! Each entry is a named constant built with struct-update syntax from the
//! scalar entry (or, for AVX-512, the AVX2 entry): every field an ISA
//! replaces is named where it is set.

pub(crate) mod amx;
mod attention_run;
pub(crate) mod avx2;
pub(crate) mod avx512;
mod common;
mod stored_call;

use crate::GgmlType as T;
use crate::dispatch::{F32Tiles, Simd, TileFns, TypeKernels, scalar};
use crate::isa::Isa;
use crate::panel::{self, PanelFns, StoredPanelFns};

/// Every kernel of the entry is SIMD: quantizer, row and 1×4 kernels.
const ALL_SIMD: Simd = Simd {
    quantize: true,
    vec_dot: true,
    vec_dot_x4: true,
};

/// Batches of this many tokens or more take the AVX2 Q8_0 and Q6_K panels
/// (fewer go through the tiles, which are faster there).
const AVX2_PANEL_MIN_TOKENS: usize = 20;
/// The same for Q4_0 and Q5_0, whose panels pass the tiles sooner.
const AVX2_LEGACY_PANEL_MIN_TOKENS: usize = 8;
/// The same for Q4_K.
const AVX2_Q4_K_PANEL_MIN_TOKENS: usize = 12;
/// Batches of this many tokens or more unpack AVX2's stored Q6_K panels:
/// its stored kernels unpack each super-block again per eight tokens.
const AVX2_Q6_K_UNPACK_TOKENS: usize = 12;
/// The same for AVX2's stored Q4_0, Q5_0, Q4_1 and Q5_1 panels, whose
/// stored kernels rebuild each block's quants again per four tokens.
const AVX2_LEGACY_UNPACK_TOKENS: usize = 16;
/// The same for the AVX-512 panels.
const AVX512_PANEL_MIN_TOKENS: usize = 32;
/// The same for the AVX-512 Q4_1 and Q5_1 panels, which pass the 1×4
/// kernel sooner.
const AVX512_OFFSET_PANEL_MIN_TOKENS: usize = 8;

// ------------------------------------------------------------------- AVX2

const AVX2_F32: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: Simd {
        quantize: false,
        vec_dot: true,
        vec_dot_x4: false,
    },
    vec_dot: avx2::vec_dot_f32,
    vec_dot_x4: None,
    vec_dot_rows8: Some(avx2::vec_dot_rows8_f32),
    f32_tiles: Some(F32Tiles {
        narrow: avx2::F32_TILE,
        wide: None,
        widen: None,
    }),
    ..scalar(T::F32)
};

/// F16 and BF16 round their activations as ggml does, and batches widen
/// both sides to take the F32 tiles, whose bits the row kernels keep.
const AVX2_F16: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: Simd {
        quantize: true,
        vec_dot: true,
        vec_dot_x4: false,
    },
    quantize_activation: avx2::quantize_f16,
    vec_dot: avx2::vec_dot_f16,
    vec_dot_x4: None,
    vec_dot_rows8: Some(avx2::vec_dot_rows8_f16),
    f32_tiles: Some(F32Tiles {
        narrow: avx2::F32_TILE,
        wide: None,
        widen: Some(avx2::widen_f16),
    }),
    ..scalar(T::F16)
};

const AVX2_BF16: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: AVX2_F16.simd,
    quantize_activation: avx2::quantize_bf16,
    vec_dot: avx2::vec_dot_bf16,
    vec_dot_x4: None,
    vec_dot_rows8: Some(avx2::vec_dot_rows8_bf16),
    f32_tiles: Some(F32Tiles {
        narrow: avx2::F32_TILE,
        wide: None,
        widen: Some(avx2::widen_bf16),
    }),
    ..scalar(T::BF16)
};

const AVX2_Q4_0: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_0,
    vec_dot: avx2::vec_dot_q4_0,
    vec_dot_x4: Some(avx2::vec_dot_x4_q4_0),
    vec_dot_rows8: Some(avx2::vec_dot_rows8_q4_0),
    tiles: Some(TileFns {
        x16: Some(avx2::tile16_q4_0),
        x12: Some(avx2::tile12_q4_0),
        x8: avx2::tile8_q4_0,
        x4: avx2::tile4_q4_0,
        sum_shift: 3,
    }),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q4_0,
        prepare: panel::prepare_q4_0,
        quantize_prepared: Some(avx2::quantize_prepared_q4_0),
        wide: avx2::panel8_q4_0,
        narrow: avx2::panel4_q4_0,
        pair: None,
        many: None,
        block_bytes: panel::LEGACY_BLOCK,
        act_block_bytes: panel::LEGACY_ACT,
        block_values: 32,
        min_tokens: AVX2_LEGACY_PANEL_MIN_TOKENS,
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q4_0,
        row: panel::stored_row_q4_0,
        dequantize_row: panel::stored_dequantize_row_q4_0,
        single: avx2::stored_single_q4_0,
        single_reads_quantized: false,
        wide: avx2::panel8_stored_q4_0,
        narrow: avx2::panel4_stored_q4_0,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q4_0_BLOCK,
        unpack: Some(avx2::unpack_stored_q4_0),
        unpack_tokens: AVX2_LEGACY_UNPACK_TOKENS,
    }),
    ..scalar(T::Q4_0)
};

const AVX2_Q4_1: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_1,
    vec_dot: avx2::vec_dot_q4_1,
    vec_dot_x4: Some(avx2::vec_dot_x4_q4_1),
    panel: Some(AVX2_OFFSET_PANEL),
    stored: Some(StoredPanelFns {
        store: panel::store_q4_1,
        row: panel::stored_row_q4_1,
        dequantize_row: panel::stored_dequantize_row_q4_1,
        single: avx2::stored_single_q4_1,
        single_reads_quantized: false,
        wide: avx2::panel8_stored_q4_1,
        narrow: avx2::panel4_stored_q4_1,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q4_1_BLOCK,
        unpack: Some(avx2::unpack_stored_q4_1),
        unpack_tokens: AVX2_LEGACY_UNPACK_TOKENS,
    }),
    ..scalar(T::Q4_1)
};

/// Q4_1's and Q5_1's panels: their quants unsigned as they are, each
/// block's `m_w·s_a` in chains of their own, with the row kernel's bits.
/// Batches take them from as few tokens as Q4_0's.
const AVX2_OFFSET_PANEL: PanelFns = PanelFns {
    unpack: avx2::unpack_q4_1,
    prepare: panel::prepare_q8_1,
    quantize_prepared: None,
    wide: avx2::panel8_q4_1,
    narrow: avx2::panel4_q4_1,
    pair: None,
    many: None,
    block_bytes: panel::OFFSET_BLOCK,
    act_block_bytes: panel::LEGACY_ACT,
    block_values: 32,
    min_tokens: AVX2_LEGACY_PANEL_MIN_TOKENS,
};

const AVX2_Q5_0: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_0,
    vec_dot: avx2::vec_dot_q5_0,
    vec_dot_x4: Some(avx2::vec_dot_x4_q5_0),
    vec_dot_rows8: Some(avx2::vec_dot_rows8_q5_0),
    tiles: Some(TileFns {
        x16: Some(avx2::tile16_q5_0),
        x12: Some(avx2::tile12_q5_0),
        x8: avx2::tile8_q5_0,
        x4: avx2::tile4_q5_0,
        sum_shift: 4,
    }),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q5_0,
        prepare: panel::prepare_q5_0,
        quantize_prepared: Some(avx2::quantize_prepared_q5_0),
        wide: avx2::panel8_q5_0,
        narrow: avx2::panel4_q5_0,
        pair: None,
        many: None,
        block_bytes: panel::LEGACY_BLOCK,
        act_block_bytes: panel::LEGACY_ACT,
        block_values: 32,
        min_tokens: AVX2_LEGACY_PANEL_MIN_TOKENS,
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q5_0,
        row: panel::stored_row_q5_0,
        dequantize_row: panel::stored_dequantize_row_q5_0,
        single: avx2::stored_single_q5_0,
        single_reads_quantized: false,
        wide: avx2::panel8_stored_q5_0,
        narrow: avx2::panel4_stored_q5_0,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q5_0_BLOCK,
        unpack: Some(avx2::unpack_stored_q5_0),
        unpack_tokens: AVX2_LEGACY_UNPACK_TOKENS,
    }),
    ..scalar(T::Q5_0)
};

const AVX2_Q5_1: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_1,
    vec_dot: avx2::vec_dot_q5_1,
    vec_dot_x4: Some(avx2::vec_dot_x4_q5_1),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q5_1,
        wide: avx2::panel8_q5_1,
        narrow: avx2::panel4_q5_1,
        ..AVX2_OFFSET_PANEL
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q5_1,
        row: panel::stored_row_q5_1,
        dequantize_row: panel::stored_dequantize_row_q5_1,
        single: avx2::stored_single_q5_1,
        single_reads_quantized: false,
        wide: avx2::panel8_stored_q5_1,
        narrow: avx2::panel4_stored_q5_1,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q5_1_BLOCK,
        unpack: Some(avx2::unpack_stored_q5_1),
        unpack_tokens: AVX2_LEGACY_UNPACK_TOKENS,
    }),
    ..scalar(T::Q5_1)
};

/// Q8_0's AVX2 panels hold i16 quants (`vpmaddwd`), so they have their own
/// layout and no fused quantizer.
const AVX2_Q8_0: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_0,
    vec_dot: avx2::vec_dot_q8_0,
    vec_dot_x4: Some(avx2::vec_dot_x4_q8_0),
    vec_dot_rows8: Some(avx2::vec_dot_rows8_q8_0),
    tiles: Some(TileFns {
        x16: Some(avx2::tile16_q8_0),
        x12: Some(avx2::tile12_q8_0),
        x8: avx2::tile8_q8_0,
        x4: avx2::tile4_q8_0,
        sum_shift: 0,
    }),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q8_0_i16,
        prepare: panel::prepare_q8_0_i16,
        quantize_prepared: None,
        wide: avx2::panel8_q8_0,
        narrow: avx2::panel4_q8_0,
        pair: None,
        many: None,
        block_bytes: panel::Q8_0_I16_BLOCK,
        act_block_bytes: panel::Q8_0_I16_ACT,
        block_values: 32,
        min_tokens: AVX2_PANEL_MIN_TOKENS,
    }),
    ..scalar(T::Q8_0)
};

/// Q2_K: row and 1×4 kernels, and panels from as few tokens as Q4_0's
/// (it has no tiles to pass).
const AVX2_Q2_K: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_k,
    vec_dot: avx2::vec_dot_q2_k,
    vec_dot_x4: Some(avx2::vec_dot_x4_q2_k),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q2_k,
        prepare: panel::prepare_q2_k,
        quantize_prepared: None,
        wide: avx2::panel8_q2_k,
        narrow: avx2::panel4_q2_k,
        pair: None,
        many: None,
        block_bytes: panel::Q2_K_BLOCK,
        act_block_bytes: panel::Q4_K_ACT,
        block_values: 256,
        min_tokens: AVX2_LEGACY_PANEL_MIN_TOKENS,
    }),
    ..scalar(T::Q2_K)
};

/// Q3_K: its batches unpack into Q6_K's panels (`crate::q3_k`).
const AVX2_Q3_K: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_k,
    vec_dot: avx2::vec_dot_q3_k,
    vec_dot_x4: Some(avx2::vec_dot_x4_q3_k),
    panel: match AVX2_Q6_K.panel {
        Some(p) => Some(PanelFns {
            unpack: avx2::unpack_q3_k,
            ..p
        }),
        None => panic!("Q6_K without panels"),
    },
    ..scalar(T::Q3_K)
};

const AVX2_Q4_K: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_k,
    vec_dot: avx2::vec_dot_q4_k,
    vec_dot_x4: Some(avx2::vec_dot_x4_q4_k),
    tiles: Some(TileFns {
        x16: Some(avx2::tile16_q4_k),
        x12: Some(avx2::tile12_q4_k),
        x8: avx2::tile8_q4_k,
        x4: avx2::tile4_q4_k,
        sum_shift: 0,
    }),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q4_k,
        prepare: panel::prepare_q4_k,
        quantize_prepared: None,
        wide: avx2::panel8_q4_k,
        narrow: avx2::panel4_q4_k,
        pair: None,
        many: None,
        block_bytes: panel::Q4_K_BLOCK,
        act_block_bytes: panel::Q4_K_ACT,
        block_values: 256,
        min_tokens: AVX2_Q4_K_PANEL_MIN_TOKENS,
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q4_k,
        row: panel::stored_row_q4_k,
        dequantize_row: panel::stored_dequantize_row_q4_k,
        single: avx2::stored_single_q4_k,
        single_reads_quantized: false,
        wide: avx2::panel8_stored_q4_k,
        narrow: avx2::panel4_stored_q4_k,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q4_K_BLOCK,
        unpack: Some(avx2::unpack_stored_q4_k),
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..scalar(T::Q4_K)
};

const AVX2_Q5_K: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_k,
    vec_dot: avx2::vec_dot_q5_k,
    vec_dot_x4: Some(avx2::vec_dot_x4_q5_k),
    tiles: Some(TileFns {
        x16: Some(avx2::tile16_q5_k),
        x12: Some(avx2::tile12_q5_k),
        x8: avx2::tile8_q5_k,
        x4: avx2::tile4_q5_k,
        sum_shift: 0,
    }),
    ..scalar(T::Q5_K)
};

const AVX2_Q6_K: TypeKernels = TypeKernels {
    isa: Isa::Avx2,
    simd: ALL_SIMD,
    quantize_activation: avx2::quantize_q8_k,
    vec_dot: avx2::vec_dot_q6_k,
    vec_dot_x4: Some(avx2::vec_dot_x4_q6_k),
    tiles: Some(TileFns {
        x16: Some(avx2::tile16_q6_k),
        x12: Some(avx2::tile12_q6_k),
        x8: avx2::tile8_q6_k,
        x4: avx2::tile4_q6_k,
        sum_shift: 0,
    }),
    panel: Some(PanelFns {
        unpack: avx2::unpack_q6_k,
        prepare: panel::prepare_q6_k,
        quantize_prepared: None,
        wide: avx2::panel8_q6_k,
        narrow: avx2::panel4_q6_k,
        pair: None,
        many: None,
        block_bytes: panel::Q6_K_BLOCK,
        act_block_bytes: panel::Q6_K_ACT,
        block_values: 256,
        min_tokens: AVX2_PANEL_MIN_TOKENS,
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q6_k,
        row: panel::stored_row_q6_k,
        dequantize_row: panel::stored_dequantize_row_q6_k,
        single: avx2::stored_single_q6_k,
        single_reads_quantized: true,
        wide: avx2::panel8_stored_q6_k,
        narrow: avx2::panel4_stored_q6_k,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q6_K_BLOCK,
        unpack: Some(avx2::unpack_stored_q6_k),
        unpack_tokens: AVX2_Q6_K_UNPACK_TOKENS,
    }),
    ..scalar(T::Q6_K)
};

pub(crate) static AVX2: [TypeKernels; 13] = [
    AVX2_F32, AVX2_F16, AVX2_BF16, AVX2_Q4_0, AVX2_Q4_1, AVX2_Q5_0, AVX2_Q5_1, AVX2_Q8_0,
    AVX2_Q2_K, AVX2_Q3_K, AVX2_Q4_K, AVX2_Q5_K, AVX2_Q6_K,
];

// ---------------------------------------------------------------- AVX-512

/// The legacy panels (Q8_0, Q4_0, Q5_0) share one kernel: they differ only
/// in how they were unpacked, and all are prepared as Q8_0 with an offset.
const AVX512_LEGACY_PANEL: PanelFns = PanelFns {
    unpack: avx512::unpack_q8_0,
    prepare: panel::prepare_q8_0,
    quantize_prepared: Some(avx2::quantize_prepared_q8_0),
    wide: avx512::panel8_legacy,
    narrow: avx512::panel4_legacy,
    pair: None,
    many: None,
    block_bytes: panel::LEGACY_BLOCK,
    act_block_bytes: panel::LEGACY_ACT,
    block_values: 32,
    min_tokens: AVX512_PANEL_MIN_TOKENS,
};

const AVX512_Q4_0: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    vec_dot_rows8: Some(avx512::vec_dot_rows8_q4_0),
    tiles: Some(TileFns {
        x16: Some(avx512::tile16_q4_0),
        x12: Some(avx512::tile12_q4_0),
        x8: avx512::tile8_q4_0,
        x4: avx512::tile4_q4_0,
        sum_shift: 3,
    }),
    panel: Some(PanelFns {
        unpack: avx512::unpack_q4_0,
        prepare: panel::prepare_q4_0,
        quantize_prepared: Some(avx2::quantize_prepared_q4_0),
        ..AVX512_LEGACY_PANEL
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q4_0,
        row: panel::stored_row_q4_0,
        dequantize_row: panel::stored_dequantize_row_q4_0,
        single: avx512::stored_single_q4_0,
        single_reads_quantized: false,
        wide: avx512::panel8_stored_q4_0,
        narrow: avx512::panel4_stored_q4_0,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q4_0_BLOCK,
        unpack: Some(avx512::unpack_stored_q4_0),
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q4_0
};

/// Q4_1 and Q5_1 keep AVX2's row and 1×4 kernels and add panels with
/// their bits: from fewer tokens than the legacy types' panels, as they
/// have no tiles to pass.
const AVX512_OFFSET_PANEL: PanelFns = PanelFns {
    unpack: avx512::unpack_q4_1,
    prepare: panel::prepare_q8_1,
    quantize_prepared: None,
    wide: avx512::panel8_offset,
    narrow: avx512::panel4_offset,
    block_bytes: panel::OFFSET_BLOCK,
    min_tokens: AVX512_OFFSET_PANEL_MIN_TOKENS,
    ..AVX512_LEGACY_PANEL
};

const AVX512_Q4_1: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    panel: Some(AVX512_OFFSET_PANEL),
    stored: Some(StoredPanelFns {
        store: panel::store_q4_1,
        row: panel::stored_row_q4_1,
        dequantize_row: panel::stored_dequantize_row_q4_1,
        single: avx512::stored_single_q4_1,
        single_reads_quantized: false,
        wide: avx512::panel8_stored_q4_1,
        narrow: avx512::panel4_stored_q4_1,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q4_1_BLOCK,
        unpack: Some(avx512::unpack_stored_q4_1),
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q4_1
};

const AVX512_Q5_1: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    panel: Some(PanelFns {
        unpack: avx512::unpack_q5_1,
        ..AVX512_OFFSET_PANEL
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q5_1,
        row: panel::stored_row_q5_1,
        dequantize_row: panel::stored_dequantize_row_q5_1,
        single: avx512::stored_single_q5_1,
        single_reads_quantized: false,
        wide: avx512::panel8_stored_q5_1,
        narrow: avx512::panel4_stored_q5_1,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q5_1_BLOCK,
        unpack: Some(avx512::unpack_stored_q5_1),
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q5_1
};

/// Q2_K keeps AVX2's row and 1×4 kernels and adds panels with their bits,
/// from as few tokens as Q4_1's (it has no tiles to pass).
const AVX512_Q2_K: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    panel: Some(PanelFns {
        unpack: avx512::unpack_q2_k,
        prepare: panel::prepare_q2_k,
        quantize_prepared: None,
        wide: avx512::panel8_q2_k,
        narrow: avx512::panel4_q2_k,
        pair: None,
        many: None,
        block_bytes: panel::Q2_K_BLOCK,
        act_block_bytes: panel::Q4_K_ACT,
        block_values: 256,
        min_tokens: AVX512_OFFSET_PANEL_MIN_TOKENS,
    }),
    ..AVX2_Q2_K
};

const AVX512_Q5_0: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    vec_dot_rows8: Some(avx512::vec_dot_rows8_q5_0),
    tiles: Some(TileFns {
        x16: Some(avx512::tile16_q5_0),
        x12: Some(avx512::tile12_q5_0),
        x8: avx512::tile8_q5_0,
        x4: avx512::tile4_q5_0,
        sum_shift: 4,
    }),
    panel: Some(PanelFns {
        unpack: avx512::unpack_q5_0,
        prepare: panel::prepare_q5_0,
        quantize_prepared: Some(avx2::quantize_prepared_q5_0),
        ..AVX512_LEGACY_PANEL
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q5_0,
        row: panel::stored_row_q5_0,
        dequantize_row: panel::stored_dequantize_row_q5_0,
        single: avx512::stored_single_q5_0,
        single_reads_quantized: false,
        wide: avx512::panel8_stored_q5_0,
        narrow: avx512::panel4_stored_q5_0,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q5_0_BLOCK,
        unpack: Some(avx512::unpack_stored_q5_0),
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q5_0
};

const AVX512_Q8_0: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    vec_dot_rows8: Some(avx512::vec_dot_rows8_q8_0),
    tiles: Some(TileFns {
        x16: Some(avx512::tile16_q8_0),
        x12: Some(avx512::tile12_q8_0),
        x8: avx512::tile8_q8_0,
        x4: avx512::tile4_q8_0,
        sum_shift: 7,
    }),
    panel: Some(AVX512_LEGACY_PANEL),
    stored: Some(StoredPanelFns {
        store: panel::store_q8_0,
        row: panel::stored_row_q8_0,
        dequantize_row: panel::stored_dequantize_row_q8_0,
        single: avx512::stored_single_q8_0,
        single_reads_quantized: false,
        wide: avx512::panel8_stored_q8_0,
        narrow: avx512::panel4_stored_q8_0,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q8_0_BLOCK,
        // Its stored blocks are the panel's, scales as f16.
        unpack: None,
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q8_0
};

const AVX512_Q4_K: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    vec_dot: avx512::vec_dot_q4_k,
    vec_dot_x4: Some(avx512::vec_dot_x4_q4_k),
    vec_dot_rows8: Some(avx512::vec_dot_rows8_q4_k),
    tiles: Some(TileFns {
        x16: Some(avx512::tile16_q4_k),
        x12: Some(avx512::tile12_q4_k),
        x8: avx512::tile8_q4_k,
        x4: avx512::tile4_q4_k,
        sum_shift: 0,
    }),
    panel: Some(PanelFns {
        unpack: avx512::unpack_q4_k,
        prepare: panel::prepare_q4_k,
        quantize_prepared: None,
        wide: avx512::panel8_q4_k,
        narrow: avx512::panel4_q4_k,
        pair: Some(avx512::panel8_pair_q4_k),
        many: None,
        block_bytes: panel::Q4_K_BLOCK,
        act_block_bytes: panel::Q4_K_ACT,
        block_values: 256,
        min_tokens: AVX512_PANEL_MIN_TOKENS,
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q4_k,
        row: panel::stored_row_q4_k,
        dequantize_row: panel::stored_dequantize_row_q4_k,
        single: avx512::stored_single_q4_k,
        single_reads_quantized: false,
        wide: avx512::panel8_stored_q4_k,
        narrow: avx512::panel4_stored_q4_k,
        pair: Some(avx512::panel8_pair_stored_q4_k),
        many: None,
        block_bytes: panel::STORED_Q4_K_BLOCK,
        // Multiplied where they lie at every batch size: the pair kernel
        // reads half the bytes an unpacked panel has.
        unpack: None,
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q4_K
};

const AVX512_Q6_K: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    vec_dot: avx512::vec_dot_q6_k,
    vec_dot_x4: Some(avx512::vec_dot_x4_q6_k),
    tiles: Some(TileFns {
        x16: Some(avx512::tile16_q6_k),
        x12: Some(avx512::tile12_q6_k),
        x8: avx512::tile8_q6_k,
        x4: avx512::tile4_q6_k,
        sum_shift: 0,
    }),
    panel: Some(PanelFns {
        unpack: avx512::unpack_q6_k,
        prepare: panel::prepare_q6_k,
        quantize_prepared: None,
        wide: avx512::panel8_q6_k,
        narrow: avx512::panel4_q6_k,
        pair: Some(avx512::panel8_pair_q6_k),
        many: None,
        block_bytes: panel::Q6_K_BLOCK,
        act_block_bytes: panel::Q6_K_ACT,
        block_values: 256,
        min_tokens: AVX512_PANEL_MIN_TOKENS,
    }),
    stored: Some(StoredPanelFns {
        store: panel::store_q6_k,
        row: panel::stored_row_q6_k,
        dequantize_row: panel::stored_dequantize_row_q6_k,
        single: avx512::stored_single_q6_k,
        single_reads_quantized: true,
        wide: avx512::panel8_stored_q6_k,
        narrow: avx512::panel4_stored_q6_k,
        pair: None,
        many: None,
        block_bytes: panel::STORED_Q6_K_BLOCK,
        unpack: Some(avx512::unpack_stored_q6_k),
        unpack_tokens: panel::STORED_UNPACK_TOKENS,
    }),
    ..AVX2_Q6_K
};

/// Q3_K on AVX-512's Q6_K panels.
const AVX512_Q3_K: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    panel: match AVX512_Q6_K.panel {
        Some(p) => Some(PanelFns {
            unpack: avx512::unpack_q3_k,
            ..p
        }),
        None => panic!("Q6_K without panels"),
    },
    ..AVX2_Q3_K
};

/// Q5_K on AVX-512's Q4_K panels (`crate::q5_k`).
const AVX512_Q5_K: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    panel: match AVX512_Q4_K.panel {
        Some(p) => Some(PanelFns {
            unpack: crate::q5_k::unpack_panel,
            ..p
        }),
        None => panic!("Q4_K without panels"),
    },
    ..AVX2_Q5_K
};

/// F32 keeps AVX2's kernels and adds the 512-bit tile, with their bits.
const AVX512_F32: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    f32_tiles: Some(F32Tiles {
        narrow: avx2::F32_TILE,
        wide: Some(avx512::F32_TILE),
        widen: None,
    }),
    ..AVX2_F32
};

/// F16 and BF16 likewise, through their widened rows.
const fn with_wide_tile(k: TypeKernels) -> TypeKernels {
    let Some(tiles) = k.f32_tiles else {
        panic!("a float type without tiles")
    };
    TypeKernels {
        isa: Isa::Avx512Vnni,
        f32_tiles: Some(F32Tiles {
            wide: Some(avx512::F32_TILE),
            ..tiles
        }),
        ..k
    }
}

/// BF16 on CPUs with AVX-512 BF16: `vdpbf16ps` over the file's rows and
/// the rounded activations as they are, in every kernel, with their own
/// bits (not the widened F32 chain's).
const AVX512_BF16_PAIRS: TypeKernels = TypeKernels {
    isa: Isa::Avx512Vnni,
    vec_dot: avx512::vec_dot_bf16_pairs,
    vec_dot_rows8: Some(avx512::vec_dot_rows8_bf16_pairs),
    f32_tiles: Some(F32Tiles {
        narrow: avx512::BF16_TILE_NARROW,
        wide: Some(avx512::BF16_TILE_WIDE),
        widen: None,
    }),
    ..AVX2_BF16
};

/// `table` with its BF16 entry replaced by [`AVX512_BF16_PAIRS`], tagged `isa`.
const fn with_bf16_pairs(mut table: [TypeKernels; 13], isa: Isa) -> [TypeKernels; 13] {
    let mut i = 0;
    while i < table.len() {
        if table[i].weight as u32 == T::BF16 as u32 {
            table[i] = TypeKernels {
                isa,
                ..AVX512_BF16_PAIRS
            };
        }
        i += 1;
    }
    table
}

/// The AVX-512 table; [`AVX512_WITH_BF16`] where the CPU has AVX-512 BF16.
pub(crate) static AVX512: [TypeKernels; 13] = AVX512_ENTRIES;

/// The AVX-512 table of CPUs with AVX-512 BF16.
pub(crate) static AVX512_WITH_BF16: [TypeKernels; 13] =
    with_bf16_pairs(AVX512_ENTRIES, Isa::Avx512Vnni);

const AVX512_ENTRIES: [TypeKernels; 13] = [
    AVX512_F32,
    with_wide_tile(AVX2_F16),
    with_wide_tile(AVX2_BF16),
    AVX512_Q4_0,
    AVX512_Q4_1,
    AVX512_Q5_0,
    AVX512_Q5_1,
    AVX512_Q8_0,
    AVX512_Q2_K,
    AVX512_Q3_K,
    AVX512_Q4_K,
    AVX512_Q5_K,
    AVX512_Q6_K,
];

// -------------------------------------------------------------------- AMX

/// An AVX-512 entry's kernels, tagged as the AMX table's.
const fn on_amx(k: TypeKernels) -> TypeKernels {
    TypeKernels { isa: Isa::Amx, ..k }
}

/// Q4_K with stored panels the tile unit multiplies sixteen tokens at a
/// time; the driver takes them in place of the AVX-512 pairs.
const AMX_Q4_K: TypeKernels = {
    let Some(s) = AVX512_Q4_K.stored else {
        panic!("Q4_K without stored panels")
    };
    TypeKernels {
        stored: Some(StoredPanelFns {
            pair: None,
            many: Some(amx::panel_many_stored_q4_k),
            ..s
        }),
        ..on_amx(AVX512_Q4_K)
    }
};

/// Q6_K likewise: its batches no longer unpack the stored panels for
/// AVX-512's pairs.
const AMX_Q6_K: TypeKernels = {
    let Some(s) = AVX512_Q6_K.stored else {
        panic!("Q6_K without stored panels")
    };
    TypeKernels {
        stored: Some(StoredPanelFns {
            unpack: None,
            pair: None,
            many: Some(amx::panel_many_stored_q6_k),
            ..s
        }),
        ..on_amx(AVX512_Q6_K)
    }
};

/// The AMX table of CPUs with AVX-512 BF16 (every AMX CPU so far).
pub(crate) static AMX_WITH_BF16: [TypeKernels; 13] = with_bf16_pairs(AMX_ENTRIES, Isa::Amx);

/// The AMX table; [`AMX_WITH_BF16`] where the CPU has AVX-512 BF16.
pub(crate) static AMX: [TypeKernels; 13] = AMX_ENTRIES;

const AMX_ENTRIES: [TypeKernels; 13] = [
    on_amx(AVX512_F32),
    on_amx(with_wide_tile(AVX2_F16)),
    on_amx(with_wide_tile(AVX2_BF16)),
    on_amx(AVX512_Q4_0),
    on_amx(AVX512_Q4_1),
    on_amx(AVX512_Q5_0),
    on_amx(AVX512_Q5_1),
    on_amx(AVX512_Q8_0),
    on_amx(AVX512_Q2_K),
    on_amx(AVX512_Q3_K),
    AMX_Q4_K,
    on_amx(AVX512_Q5_K),
    AMX_Q6_K,
];
