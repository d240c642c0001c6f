//! GGML block formats: `#[repr(C)]` blocks, dequantization and reference quantization.
//!
//! * [`blocks`]: one Pod struct per block type, laid out as in `ggml-common.h`.
//! * [`cast_blocks`]: borrows tensor bytes as blocks without copying; a
//!   misaligned or ragged slice is an error.
//! * [`QuantBlock`]: ties each weight block to the activation block its dot
//!   product consumes (llama.cpp's `vec_dot_type`) and to its (de)quantizer.
//! * [`dequantize_row`] / [`quantize_row`]: type-erased entry points over raw bytes.
//!
//! Dequantization is bit-identical to ggml's `dequantize_row_*`, and
//! quantization byte-identical to its `quantize_row_*_ref` (which is also
//! what llama-quantize runs without an importance matrix).
//!
//! # Round-trip error bounds
//!
//! For a block whose absolute maximum `a` lies in `[1e-3, 1e4]` (so that the
//! f16 scales neither underflow nor overflow), quantize-then-dequantize stays
//! within these bounds, which the property tests assert. Legacy types get a
//! worst-case bound on the error of every element; the K-quants fit their
//! scales by search, so they get a bound on the block RMSE, measured on
//! Gaussian, uniform, outlier-laden and constant rows with a margin.
//!
//! | type | max abs error / a | RMSE / a |
//! |------|-------------------|----------|
//! | Q8_0, Q8_1 | 0.0045 | 0.0045 |
//! | Q8_K | 0.004 | 0.004 |
//! | Q5_0 | 0.0626 | 0.0626 |
//! | Q5_1 | 0.0335 | 0.0335 |
//! | Q4_0 | 0.1251 | 0.1251 |
//! | Q4_1 | 0.0680 | 0.0680 |
//! | Q6_K | - | 0.012 |
//! | Q5_K | - | 0.025 |
//! | Q4_K | - | 0.05 |
//! | Q3_K | - | 0.12 |
//! | Q2_K | - | 0.30 |
//!
//! Q4_0's bound is a whole step because a value of the opposite sign to the
//! block maximum clips at +7 while the maximum maps to -8.
#![deny(unsafe_code)]

pub mod blocks;
pub mod dequant;
pub mod quantize;

use blocks::*;
use bytemuck::Pod;
use half::{bf16, f16};
pub use lamina_gguf::GgmlType;

/// A failure to decode or encode tensor data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// A type this crate does not compute (IQ*, TQ*, MXFP4, integer types), in a named tensor.
    #[error("unsupported tensor type {ty} in {tensor}")]
    UnsupportedType { ty: GgmlType, tensor: String },
    /// The same, where no tensor name is known (use [`QuantError::in_tensor`] to add it).
    #[error("unsupported tensor type {0}")]
    UnsupportedRowType(GgmlType),
    /// A byte slice that is not a whole number of blocks.
    #[error("{ty}: {len} bytes is not a whole number of {block_bytes}-byte blocks")]
    RaggedBytes {
        ty: GgmlType,
        len: usize,
        block_bytes: usize,
    },
    /// A value count that is not a whole number of blocks.
    #[error("{ty}: {len} values is not a whole number of {block_size}-value blocks")]
    RaggedValues {
        ty: GgmlType,
        len: usize,
        block_size: usize,
    },
    /// Input and output sizes that disagree.
    #[error("{ty}: {n_blocks} blocks hold {expected} values, but the buffer has {actual}")]
    LengthMismatch {
        ty: GgmlType,
        n_blocks: usize,
        expected: usize,
        actual: usize,
    },
    /// Bytes whose address does not suit the block's alignment.
    #[error("{len} bytes at address {addr:#x} are not aligned to {align} for {what}")]
    Misaligned {
        what: &'static str,
        len: usize,
        addr: usize,
        align: usize,
    },
}

impl QuantError {
    /// Names the tensor in an [`QuantError::UnsupportedRowType`] error.
    pub fn in_tensor(self, tensor: &str) -> Self {
        match self {
            QuantError::UnsupportedRowType(ty) => QuantError::UnsupportedType {
                ty,
                tensor: tensor.to_string(),
            },
            e => e,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = QuantError> = std::result::Result<T, E>;

/// Borrows `bytes` as a slice of `B` without copying.
///
/// Fails, never panics or reads out of bounds, when the length is not a
/// multiple of `size_of::<B>()` or the address is not aligned for `B`.
pub fn cast_blocks<B: Pod>(bytes: &[u8]) -> Result<&[B]> {
    let size = std::mem::size_of::<B>();
    if size != 0 && !bytes.len().is_multiple_of(size) {
        return Err(QuantError::RaggedBytes {
            ty: type_of::<B>().unwrap_or(GgmlType::I8),
            len: bytes.len(),
            block_bytes: size,
        });
    }
    bytemuck::try_cast_slice(bytes).map_err(|_| QuantError::Misaligned {
        what: std::any::type_name::<B>(),
        len: bytes.len(),
        addr: bytes.as_ptr() as usize,
        align: std::mem::align_of::<B>(),
    })
}

/// Mutable counterpart of [`cast_blocks`].
pub fn cast_blocks_mut<B: Pod>(bytes: &mut [u8]) -> Result<&mut [B]> {
    let size = std::mem::size_of::<B>();
    if size != 0 && !bytes.len().is_multiple_of(size) {
        return Err(QuantError::RaggedBytes {
            ty: type_of::<B>().unwrap_or(GgmlType::I8),
            len: bytes.len(),
            block_bytes: size,
        });
    }
    let (len, addr) = (bytes.len(), bytes.as_ptr() as usize);
    bytemuck::try_cast_slice_mut(bytes).map_err(|_| QuantError::Misaligned {
        what: std::any::type_name::<B>(),
        len,
        addr,
        align: std::mem::align_of::<B>(),
    })
}

fn type_of<B: 'static>() -> Option<GgmlType> {
    use std::any::TypeId;
    let id = TypeId::of::<B>();
    macro_rules! find {
        ($($b:ty),*) => {{ $( if id == TypeId::of::<$b>() { return Some(<$b as QuantBlock>::TYPE); } )* }};
    }
    find!(
        BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, BlockQ2K, BlockQ3K,
        BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K
    );
    if id == TypeId::of::<f32>() {
        Some(GgmlType::F32)
    } else if id == TypeId::of::<f16>() {
        Some(GgmlType::F16)
    } else if id == TypeId::of::<bf16>() {
        Some(GgmlType::BF16)
    } else {
        None
    }
}

/// A ggml weight block: its type, its size, the activation block its dot
/// product is computed against (llama.cpp's `vec_dot_type`), and its scalar
/// (de)quantizer.
pub trait QuantBlock: Pod + 'static {
    /// The ggml type of this block.
    const TYPE: GgmlType;
    /// Elements per block.
    const BLOCK_SIZE: usize;
    /// The block the other operand of a dot product is quantized to.
    type Activation: QuantBlock;

    /// Decodes `blocks` into `out`, which must hold `blocks.len() * BLOCK_SIZE` values.
    ///
    /// # Panics
    /// When `out` has another length.
    fn dequantize(blocks: &[Self], out: &mut [f32]);

    /// Encodes `src` (`out.len() * BLOCK_SIZE` values) as llama.cpp's reference quantizer does.
    ///
    /// # Panics
    /// When `src` has another length.
    fn quantize(src: &[f32], out: &mut [Self]);
}

macro_rules! quant_block {
    ($($block:ty => $ty:ident, $bs:expr, $act:ty, $deq:ident, $q:ident;)*) => {$(
        impl QuantBlock for $block {
            const TYPE: GgmlType = GgmlType::$ty;
            const BLOCK_SIZE: usize = $bs;
            type Activation = $act;
            fn dequantize(blocks: &[Self], out: &mut [f32]) {
                dequant::$deq(blocks, out)
            }
            fn quantize(src: &[f32], out: &mut [Self]) {
                quantize::$q(src, out)
            }
        }
    )*};
}

quant_block! {
    BlockQ4_0 => Q4_0, QK, BlockQ8_0, dequantize_q4_0, quantize_q4_0;
    BlockQ4_1 => Q4_1, QK, BlockQ8_1, dequantize_q4_1, quantize_q4_1;
    BlockQ5_0 => Q5_0, QK, BlockQ8_0, dequantize_q5_0, quantize_q5_0;
    BlockQ5_1 => Q5_1, QK, BlockQ8_1, dequantize_q5_1, quantize_q5_1;
    BlockQ8_0 => Q8_0, QK, BlockQ8_0, dequantize_q8_0, quantize_q8_0;
    BlockQ8_1 => Q8_1, QK, BlockQ8_1, dequantize_q8_1, quantize_q8_1;
    BlockQ2K => Q2_K, QK_K, BlockQ8K, dequantize_q2_k, quantize_q2_k;
    BlockQ3K => Q3_K, QK_K, BlockQ8K, dequantize_q3_k, quantize_q3_k;
    BlockQ4K => Q4_K, QK_K, BlockQ8K, dequantize_q4_k, quantize_q4_k;
    BlockQ5K => Q5_K, QK_K, BlockQ8K, dequantize_q5_k, quantize_q5_k;
    BlockQ6K => Q6_K, QK_K, BlockQ8K, dequantize_q6_k, quantize_q6_k;
    BlockQ8K => Q8_K, QK_K, BlockQ8K, dequantize_q8_k, quantize_q8_k;
}

/// Whether this crate can (de)quantize `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
    )
}

/// Refuses, by name, a tensor whose type this crate does not compute.
pub fn check_supported(ty: GgmlType, tensor: &str) -> Result<()> {
    if is_supported(ty) {
        Ok(())
    } else {
        Err(QuantError::UnsupportedType {
            ty,
            tensor: tensor.to_string(),
        })
    }
}

fn deq<B: Pod>(
    ty: GgmlType,
    bs: usize,
    bytes: &[u8],
    out: &mut [f32],
    f: fn(&[B], &mut [f32]),
) -> Result<()> {
    let blocks: &[B] = cast_blocks(bytes)?;
    if out.len() != blocks.len() * bs {
        return Err(QuantError::LengthMismatch {
            ty,
            n_blocks: blocks.len(),
            expected: blocks.len() * bs,
            actual: out.len(),
        });
    }
    f(blocks, out);
    Ok(())
}

/// Decodes `bytes` of type `ty` into `out`, which must hold exactly the
/// number of values the bytes encode.
pub fn dequantize_row(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    use GgmlType as T;
    match ty {
        T::F32 => deq::<f32>(ty, 1, bytes, out, |s, o| o.copy_from_slice(s)),
        T::F16 => deq::<f16>(ty, 1, bytes, out, dequant::dequantize_f16),
        T::BF16 => deq::<bf16>(ty, 1, bytes, out, dequant::dequantize_bf16),
        T::Q4_0 => deq::<BlockQ4_0>(ty, QK, bytes, out, dequant::dequantize_q4_0),
        T::Q4_1 => deq::<BlockQ4_1>(ty, QK, bytes, out, dequant::dequantize_q4_1),
        T::Q5_0 => deq::<BlockQ5_0>(ty, QK, bytes, out, dequant::dequantize_q5_0),
        T::Q5_1 => deq::<BlockQ5_1>(ty, QK, bytes, out, dequant::dequantize_q5_1),
        T::Q8_0 => deq::<BlockQ8_0>(ty, QK, bytes, out, dequant::dequantize_q8_0),
        T::Q8_1 => deq::<BlockQ8_1>(ty, QK, bytes, out, dequant::dequantize_q8_1),
        T::Q2_K => deq::<BlockQ2K>(ty, QK_K, bytes, out, dequant::dequantize_q2_k),
        T::Q3_K => deq::<BlockQ3K>(ty, QK_K, bytes, out, dequant::dequantize_q3_k),
        T::Q4_K => deq::<BlockQ4K>(ty, QK_K, bytes, out, dequant::dequantize_q4_k),
        T::Q5_K => deq::<BlockQ5K>(ty, QK_K, bytes, out, dequant::dequantize_q5_k),
        T::Q6_K => deq::<BlockQ6K>(ty, QK_K, bytes, out, dequant::dequantize_q6_k),
        T::Q8_K => deq::<BlockQ8K>(ty, QK_K, bytes, out, dequant::dequantize_q8_k),
        _ => Err(QuantError::UnsupportedRowType(ty)),
    }
}

/// Decodes a whole tensor into a new vector; errors name the tensor.
pub fn dequantize_tensor(info: &lamina_gguf::TensorInfo, bytes: &[u8]) -> Result<Vec<f32>> {
    check_supported(info.ggml_type, &info.name)?;
    let mut out = vec![0f32; info.n_elements() as usize];
    dequantize_row(info.ggml_type, bytes, &mut out).map_err(|e| e.in_tensor(&info.name))?;
    Ok(out)
}

fn quant<B: Pod>(
    ty: GgmlType,
    bs: usize,
    src: &[f32],
    out: &mut [u8],
    f: fn(&[f32], &mut [B]),
) -> Result<()> {
    if !src.len().is_multiple_of(bs) {
        return Err(QuantError::RaggedValues {
            ty,
            len: src.len(),
            block_size: bs,
        });
    }
    let blocks: &mut [B] = cast_blocks_mut(out)?;
    if src.len() != blocks.len() * bs {
        return Err(QuantError::LengthMismatch {
            ty,
            n_blocks: blocks.len(),
            expected: blocks.len() * bs,
            actual: src.len(),
        });
    }
    f(src, blocks);
    Ok(())
}

/// Encodes `src` as type `ty` into `out`, which must be exactly
/// `ty.row_bytes(src.len())` bytes long; byte-identical to llama.cpp's
/// `ggml_quantize_chunk` without an importance matrix.
pub fn quantize_row(ty: GgmlType, src: &[f32], out: &mut [u8]) -> Result<()> {
    use GgmlType as T;
    match ty {
        T::F32 => quant::<f32>(ty, 1, src, out, |s, o| o.copy_from_slice(s)),
        T::F16 => quant::<f16>(ty, 1, src, out, quantize::quantize_f16),
        T::BF16 => quant::<bf16>(ty, 1, src, out, quantize::quantize_bf16),
        T::Q4_0 => quant::<BlockQ4_0>(ty, QK, src, out, quantize::quantize_q4_0),
        T::Q4_1 => quant::<BlockQ4_1>(ty, QK, src, out, quantize::quantize_q4_1),
        T::Q5_0 => quant::<BlockQ5_0>(ty, QK, src, out, quantize::quantize_q5_0),
        T::Q5_1 => quant::<BlockQ5_1>(ty, QK, src, out, quantize::quantize_q5_1),
        T::Q8_0 => quant::<BlockQ8_0>(ty, QK, src, out, quantize::quantize_q8_0),
        T::Q8_1 => quant::<BlockQ8_1>(ty, QK, src, out, quantize::quantize_q8_1),
        T::Q2_K => quant::<BlockQ2K>(ty, QK_K, src, out, quantize::quantize_q2_k),
        T::Q3_K => quant::<BlockQ3K>(ty, QK_K, src, out, quantize::quantize_q3_k),
        T::Q4_K => quant::<BlockQ4K>(ty, QK_K, src, out, quantize::quantize_q4_k),
        T::Q5_K => quant::<BlockQ5K>(ty, QK_K, src, out, quantize::quantize_q5_k),
        T::Q6_K => quant::<BlockQ6K>(ty, QK_K, src, out, quantize::quantize_q6_k),
        T::Q8_K => quant::<BlockQ8K>(ty, QK_K, src, out, quantize::quantize_q8_k),
        _ => Err(QuantError::UnsupportedRowType(ty)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry<B: QuantBlock>() {
        assert_eq!(std::mem::size_of::<B>(), B::TYPE.type_size(), "{}", B::TYPE);
        assert_eq!(B::BLOCK_SIZE, B::TYPE.block_size(), "{}", B::TYPE);
    }

    #[test]
    fn block_geometry_matches_gguf_type_table() {
        geometry::<BlockQ4_0>();
        geometry::<BlockQ4_1>();
        geometry::<BlockQ5_0>();
        geometry::<BlockQ5_1>();
        geometry::<BlockQ8_0>();
        geometry::<BlockQ8_1>();
        geometry::<BlockQ2K>();
        geometry::<BlockQ3K>();
        geometry::<BlockQ4K>();
        geometry::<BlockQ5K>();
        geometry::<BlockQ6K>();
        geometry::<BlockQ8K>();
    }

    #[test]
    fn activation_types_follow_vec_dot_type() {
        fn act<B: QuantBlock>() -> GgmlType {
            <B::Activation as QuantBlock>::TYPE
        }
        assert_eq!(act::<BlockQ4_0>(), GgmlType::Q8_0);
        assert_eq!(act::<BlockQ5_0>(), GgmlType::Q8_0);
        assert_eq!(act::<BlockQ8_0>(), GgmlType::Q8_0);
        assert_eq!(act::<BlockQ4_1>(), GgmlType::Q8_1);
        assert_eq!(act::<BlockQ5_1>(), GgmlType::Q8_1);
        for t in [
            act::<BlockQ2K>(),
            act::<BlockQ3K>(),
            act::<BlockQ4K>(),
            act::<BlockQ5K>(),
            act::<BlockQ6K>(),
            act::<BlockQ8K>(),
        ] {
            assert_eq!(t, GgmlType::Q8_K);
        }
    }

    #[test]
    fn unsupported_types_are_refused_by_name() {
        let e = check_supported(GgmlType::IQ2_XS, "blk.3.ffn_up.weight").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported tensor type IQ2_XS in blk.3.ffn_up.weight"
        );
        let mut out = [0f32; 256];
        let e = dequantize_row(GgmlType::IQ4_XS, &[0u8; 136], &mut out).unwrap_err();
        assert_eq!(e, QuantError::UnsupportedRowType(GgmlType::IQ4_XS));
        assert_eq!(
            e.in_tensor("output.weight").to_string(),
            "unsupported tensor type IQ4_XS in output.weight"
        );
        for &t in GgmlType::ALL {
            let computed = !t.name().starts_with("IQ")
                && !t.name().starts_with("TQ")
                && !matches!(
                    t,
                    GgmlType::MXFP4
                        | GgmlType::I8
                        | GgmlType::I16
                        | GgmlType::I32
                        | GgmlType::I64
                        | GgmlType::F64
                );
            assert_eq!(is_supported(t), computed, "{t}");
            let r = quantize_row(
                t,
                &[0.0; 256],
                &mut vec![0u8; t.type_size() * 256 / t.block_size()],
            );
            assert_eq!(r.is_ok(), computed, "{t}: {r:?}");
        }
    }

    #[test]
    fn casts_check_length_and_alignment() {
        // A u32 buffer gives a 4-aligned base to offset from.
        let words = [0u32; 200];
        let bytes: &[u8] = bytemuck::cast_slice(&words);
        assert_eq!(cast_blocks::<BlockQ8K>(&bytes[..292 * 2]).unwrap().len(), 2);
        assert!(matches!(
            cast_blocks::<BlockQ8K>(&bytes[..291]),
            Err(QuantError::RaggedBytes {
                ty: GgmlType::Q8_K,
                len: 291,
                block_bytes: 292
            })
        ));
        assert!(matches!(
            cast_blocks::<BlockQ8K>(&bytes[2..294]),
            Err(QuantError::Misaligned { align: 4, .. })
        ));
        assert!(matches!(
            cast_blocks::<BlockQ4_0>(&bytes[1..19]),
            Err(QuantError::Misaligned { align: 2, .. })
        ));
        assert_eq!(cast_blocks::<BlockQ4_0>(&bytes[2..38]).unwrap().len(), 2);
        let mut out = [0f32; 31];
        assert!(matches!(
            dequantize_row(GgmlType::Q8_0, &bytes[..34], &mut out),
            Err(QuantError::LengthMismatch {
                expected: 32,
                actual: 31,
                ..
            })
        ));
        let mut q = [0u8; 34];
        assert!(matches!(
            quantize_row(GgmlType::Q8_0, &[0.0; 33], &mut q),
            Err(QuantError::RaggedValues { len: 33, .. })
        ));
    }

    #[test]
    fn nearest_int_rounds_half_to_even() {
        use quantize::nearest_int;
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.4999), -2);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
    }

    #[test]
    fn bf16_rounding_matches_ggml() {
        use quantize::fp32_to_bf16;
        assert_eq!(fp32_to_bf16(1.0).to_bits(), 0x3f80);
        // Ties go to even: 0x3f808000 -> 0x3f80, 0x3f818000 -> 0x3f82.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)).to_bits(), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)).to_bits(), 0x3f82);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x7f80_0001)).to_bits(), 0x7fc0);
    }
}
