//! Per weight type, the kernels of one ISA, chosen once and called per row or tile.
//!
//! [`kernels`] looks the weight type up in the table of the selected ISA
//! ([`Isa::selected`]); [`kernels_for`] in that of any ISA this CPU executes.
//! A table entry starts from the scalar kernels and replaces those an ISA
//! module implements, so every type works on every ISA.

use crate::isa::Isa;
use crate::{GgmlType, KernelError, scalar};

/// f32 activations → the activation type's bytes (`dst` is exactly the row).
pub type QuantizeFn = fn(src: &[f32], dst: &mut [u8]);
/// Σ over `n` values of weight row · activation row, both as raw block bytes.
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;
/// One weight row against four activation rows, each weight block unpacked once.
pub type VecDotX4Fn = fn(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4];
/// Eight consecutive weight rows (`w`, whole rows of `n` values) against one
/// activation row, the rows side by side in the lanes: the row kernel's
/// bits for each, with the activation decoded once for all eight (decoding).
pub type VecDotRows8Fn = fn(n: usize, w: &[u8], a: &[u8]) -> [f32; 8];
/// A tile of float rows (F32, or as [`F32Tiles::widen`] says):
/// [`F32Tile::rows`] weight rows of `n` values (`w`,
/// back to back) against [`F32Tile::tokens`] activation rows (`a`, back to
/// back); `out[t · rows + r]` (`out` holds exactly `rows · tokens` values)
/// is row `r` against token `t`, with [`TypeKernels::vec_dot`]'s bits.
/// As it reads its rows the tile hints the lines that [`TileHint`] names
/// into the cache, so a tile streaming its rows from memory overlaps the
/// next rows' fetch with its arithmetic.
pub type F32TileFn = fn(n: usize, w: &[u8], a: &[u8], out: &mut [f32], hint: TileHint);

/// What an [`F32Tile`] hints into the cache as it reads its rows: for each
/// row whose bit is set in `rows` (bit `r`, row `r`), the lines `ahead`
/// bytes further on. A hint never changes a result, only its speed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TileHint {
    pub ahead: usize,
    pub rows: u32,
}

impl TileHint {
    /// No hints.
    pub const NONE: TileHint = TileHint { ahead: 0, rows: 0 };

    /// Whether the tile hints nothing.
    pub fn is_none(self) -> bool {
        self.ahead == 0 || self.rows == 0
    }
}

/// Most outputs of an [`F32Tile`]: a caller's buffer for any ISA's tile.
pub const F32_TILE_MAX: usize = 64;

/// An ISA's F32 tile and its shape, which suits its register file.
#[derive(Clone, Copy, Debug)]
pub struct F32Tile {
    pub tile: F32TileFn,
    /// Weight rows per call.
    pub rows: usize,
    /// Tokens per call.
    pub tokens: usize,
}

/// Elements of a float type other than F32 (a weight row, or activations
/// the type's quantizer rounded), widened to f32 exactly.
pub type WidenFn = fn(src: &[u8], dst: &mut [f32]);

/// An ISA's F32 tiles, all with [`TypeKernels::vec_dot`]'s bits.
#[derive(Clone, Copy, Debug)]
pub struct F32Tiles {
    /// For batches narrower than `wide`.
    pub narrow: F32Tile,
    /// Where the ISA has one, a tile of more tokens, taken from its
    /// `tokens` on: below that its padding costs more than it saves.
    pub wide: Option<F32Tile>,
    /// For F16 and BF16 weights: how their rows and rounded activations
    /// widen to the f32 rows the tiles read (`None` for F32, and for tiles
    /// that read the type's rows and rounded activations as they are, such
    /// as BF16's on AVX-512 BF16). The type's row kernel then has the
    /// tiles' bits over the widened rows.
    pub widen: Option<WidenFn>,
}

impl F32Tiles {
    /// The tile a batch of `tokens` takes.
    pub fn for_tokens(&self, tokens: usize) -> F32Tile {
        match self.wide {
            Some(wide) if tokens >= wide.tokens => wide,
            _ => self.narrow,
        }
    }
}

/// One weight row against eight activation rows in the layout of
/// the internal `act_pack` module (for batches: prompt processing, embedding).
pub type Tile8Fn = fn(n: usize, w: &[u8], packed: &[u8]) -> [f32; 8];
/// The same against a packed group of four rows.
pub type Tile4Fn = fn(n: usize, w: &[u8], packed: &[u8]) -> [f32; 4];
/// The same against a packed group of sixteen rows: each weight block is
/// unpacked once for twice the columns of [`Tile8Fn`].
pub type Tile16Fn = fn(n: usize, w: &[u8], packed: &[u8]) -> [f32; 16];
/// The same against a packed group of twelve rows (a 12-token batch in one
/// pass over the weights instead of an 8- and a 4-row one).
pub type Tile12Fn = fn(n: usize, w: &[u8], packed: &[u8]) -> [f32; 12];

/// The tiles of a weight type over packed activation groups.
#[derive(Clone, Copy, Debug)]
pub struct TileFns {
    /// Where the ISA has registers enough for it.
    pub x16: Option<Tile16Fn>,
    /// Where the ISA has it (taken for 9 to 12 tokens past the 16-wide groups).
    pub x12: Option<Tile12Fn>,
    pub x8: Tile8Fn,
    pub x4: Tile4Fn,
    /// The tiles' weights are unsigned with an offset of `2^sum_shift`: the
    /// packer stores each row's quant sums times `−2^sum_shift`
    /// (the internal `act_pack::pack`'s `sum_shift`).
    pub sum_shift: u32,
}

/// The kernels for one weight type on one ISA.
#[derive(Clone, Copy, Debug)]
pub struct TypeKernels {
    /// The weight type.
    pub weight: GgmlType,
    /// The type activations are converted to (llama.cpp's `vec_dot_type`).
    pub activation: GgmlType,
    /// The ISA the SIMD parts of this entry use (the entry may mix in scalar kernels).
    pub isa: Isa,
    /// Which of `quantize_activation`, `vec_dot`, `vec_dot_x4` are SIMD (for reports and tests).
    pub simd: Simd,
    pub quantize_activation: QuantizeFn,
    pub vec_dot: VecDotFn,
    /// A 1×4 tile; `None` where only the row kernel exists.
    pub vec_dot_x4: Option<VecDotX4Fn>,
    /// Eight rows against one token, each with [`TypeKernels::vec_dot`]'s
    /// bits; `None` where only the row kernel exists.
    pub vec_dot_rows8: Option<VecDotRows8Fn>,
    /// 1×16, 1×12, 1×8 and 1×4 tiles over packed activations; `None` where the ISA has
    /// none (always SIMD: the scalar twin is [`TypeKernels::vec_dot`] per column).
    pub tiles: Option<TileFns>,
    /// Float weights: several rows against several tokens in one pass over
    /// both ([`F32Tiles`]); `None` where the ISA has none.
    pub f32_tiles: Option<F32Tiles>,
    /// Weight panels for large batches ([`crate::panel`]); `None` where the
    /// ISA has none (the tiles or rows then take every batch).
    pub panel: Option<crate::panel::PanelFns>,
    /// Where the ISA multiplies matrices stored as panels
    /// ([`crate::panel::StoredPanelFns`]; then `panel` is `Some` too):
    /// `None` elsewhere, and a caller keeps ggml's rows.
    pub stored: Option<crate::panel::StoredPanelFns>,
}

/// Which kernels of an entry are not the scalar reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Simd {
    pub quantize: bool,
    pub vec_dot: bool,
    pub vec_dot_x4: bool,
}

impl TypeKernels {
    /// Bytes of an activation row of `n` values.
    pub fn activation_row_bytes(&self, n: usize) -> usize {
        n / self.activation.block_size() * self.activation.type_size()
    }
    /// Bytes of a weight row of `n` values.
    pub fn weight_row_bytes(&self, n: usize) -> usize {
        n / self.weight.block_size() * self.weight.type_size()
    }
}

macro_rules! scalar_entry {
    ($w:ident, $a:ident, $q:ident, $dot:ident, $x4:expr) => {
        TypeKernels {
            weight: GgmlType::$w,
            activation: GgmlType::$a,
            isa: Isa::Scalar,
            simd: Simd {
                quantize: false,
                vec_dot: false,
                vec_dot_x4: false,
            },
            quantize_activation: scalar::$q,
            vec_dot: scalar::$dot,
            vec_dot_x4: $x4,
            vec_dot_rows8: None,
            tiles: None,
            f32_tiles: None,
            panel: None,
            stored: None,
        }
    };
}

/// The scalar kernels of every supported weight type.
pub static SCALAR: [TypeKernels; 13] = [
    scalar_entry!(F32, F32, quantize_f32, vec_dot_f32, None),
    scalar_entry!(F16, F16, quantize_f16, vec_dot_f16, None),
    scalar_entry!(BF16, BF16, quantize_bf16, vec_dot_bf16, None),
    scalar_entry!(
        Q4_0,
        Q8_0,
        quantize_q8_0,
        vec_dot_q4_0,
        Some(scalar::vec_dot_x4_q4_0)
    ),
    scalar_entry!(Q4_1, Q8_1, quantize_q8_1, vec_dot_q4_1, None),
    scalar_entry!(
        Q5_0,
        Q8_0,
        quantize_q8_0,
        vec_dot_q5_0,
        Some(scalar::vec_dot_x4_q5_0)
    ),
    scalar_entry!(Q5_1, Q8_1, quantize_q8_1, vec_dot_q5_1, None),
    scalar_entry!(
        Q8_0,
        Q8_0,
        quantize_q8_0,
        vec_dot_q8_0,
        Some(scalar::vec_dot_x4_q8_0)
    ),
    scalar_entry!(
        Q2_K,
        Q8_K,
        quantize_q8_k,
        vec_dot_q2_k,
        Some(scalar::vec_dot_x4_q2_k)
    ),
    scalar_entry!(
        Q3_K,
        Q8_K,
        quantize_q8_k,
        vec_dot_q3_k,
        Some(scalar::vec_dot_x4_q3_k)
    ),
    scalar_entry!(
        Q4_K,
        Q8_K,
        quantize_q8_k,
        vec_dot_q4_k,
        Some(scalar::vec_dot_x4_q4_k)
    ),
    scalar_entry!(
        Q5_K,
        Q8_K,
        quantize_q8_k,
        vec_dot_q5_k,
        Some(scalar::vec_dot_x4_q5_k)
    ),
    scalar_entry!(
        Q6_K,
        Q8_K,
        quantize_q8_k,
        vec_dot_q6_k,
        Some(scalar::vec_dot_x4_q6_k)
    ),
];

/// The scalar entry of `ty` (a `const`-usable base for the ISA tables).
pub(crate) const fn scalar(ty: GgmlType) -> TypeKernels {
    let mut i = 0;
    while i < SCALAR.len() {
        if SCALAR[i].weight as u32 == ty as u32 {
            return SCALAR[i];
        }
        i += 1;
    }
    panic!("no scalar kernel")
}

/// The table of `isa` (without checking that the CPU executes it).
fn table(isa: Isa) -> &'static [TypeKernels] {
    match isa {
        Isa::Scalar => &SCALAR,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => &crate::x86_64::AVX2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni if Isa::has_avx512_bf16() => &crate::x86_64::AVX512_WITH_BF16,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => &crate::x86_64::AVX512,
        #[cfg(target_arch = "x86_64")]
        Isa::Amx if Isa::has_avx512_bf16() => &crate::x86_64::AMX_WITH_BF16,
        #[cfg(target_arch = "x86_64")]
        Isa::Amx => &crate::x86_64::AMX,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => &crate::aarch64::NEON,
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => &crate::aarch64::DOTPROD,
        #[allow(unreachable_patterns)]
        _ => &SCALAR,
    }
}

/// The kernels of weight type `ty` on the selected ISA (refused, like a
/// bad `LAMINA_ISA`, where `LAMINA_PREFETCH` is bad).
pub fn kernels(ty: GgmlType) -> Result<&'static TypeKernels, KernelError> {
    crate::prefetch::selected()?;
    kernels_for(ty, Isa::selected()?)
}

/// The kernels of weight type `ty` on `isa`, which this CPU must execute.
pub fn kernels_for(ty: GgmlType, isa: Isa) -> Result<&'static TypeKernels, KernelError> {
    if !isa.is_available() {
        return Err(KernelError::IsaUnavailable {
            requested: isa.name(),
            missing: isa.features(),
            best: Isa::best_available().name(),
        });
    }
    table(isa)
        .iter()
        .find(|k| k.weight == ty)
        .ok_or(KernelError::UnsupportedType(ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_table_covers_every_scalar_type() {
        for isa in Isa::ALL {
            for k in table(isa) {
                assert_eq!(k.activation, scalar(k.weight).activation);
                if let Some(p) = k.panel {
                    assert_eq!(p.block_values, k.weight.block_size(), "{isa} {}", k.weight);
                }
            }
            let types: Vec<_> = table(isa).iter().map(|k| k.weight).collect();
            let want: Vec<_> = SCALAR.iter().map(|k| k.weight).collect();
            assert_eq!(types, want, "{isa}");
        }
    }

    #[test]
    fn unsupported_weight_types_are_refused_by_name() {
        let e = kernels_for(GgmlType::IQ2_XS, Isa::Scalar).unwrap_err();
        assert_eq!(e, KernelError::UnsupportedType(GgmlType::IQ2_XS));
        assert_eq!(
            e.to_string(),
            "no dot-product kernel for weight type IQ2_XS"
        );
        assert!(kernels(GgmlType::Q8_K).is_err());
    }

    #[test]
    fn unavailable_isa_tables_are_refused() {
        for isa in Isa::ALL {
            assert_eq!(
                kernels_for(GgmlType::Q8_0, isa).is_ok(),
                isa.is_available(),
                "{isa}"
            );
        }
    }

    /// Each entry's `simd` flags say truly which kernels are not the scalar
    /// reference, the extra kernels come only with a SIMD row kernel, and
    /// every SIMD ISA this CPU runs has SIMD row kernels for the types the
    /// project's models use.
    #[test]
    fn dispatch_table_flags_are_true() {
        let addr = |f: VecDotFn| f as usize;
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for k in table(isa) {
                let base = scalar(k.weight);
                let what = format!("{isa} {}", k.weight);
                assert_eq!(
                    k.simd.vec_dot,
                    addr(k.vec_dot) != addr(base.vec_dot),
                    "{what}: vec_dot"
                );
                assert_eq!(
                    k.simd.quantize,
                    k.quantize_activation as usize != base.quantize_activation as usize,
                    "{what}: quantize"
                );
                assert_eq!(
                    k.simd.vec_dot_x4,
                    k.vec_dot_x4.map(|f| f as usize) != base.vec_dot_x4.map(|f| f as usize)
                        && k.vec_dot_x4.is_some(),
                    "{what}: vec_dot_x4"
                );
                // A SIMD row kernel never meets the scalar 1x4 one (other
                // bits for a token in a group of four than alone).
                assert!(
                    !(k.simd.vec_dot && k.vec_dot_x4.is_some() && !k.simd.vec_dot_x4),
                    "{what}: SIMD row kernel with the scalar x4"
                );
                if !k.simd.vec_dot {
                    assert!(
                        k.vec_dot_rows8.is_none()
                            && k.tiles.is_none()
                            && k.panel.is_none()
                            && k.stored.is_none(),
                        "{what}: extra kernels beside the scalar row kernel"
                    );
                }
                if k.stored.is_some() {
                    assert!(k.panel.is_some(), "{what}: stored panels without panels");
                }
                if isa == Isa::Scalar {
                    assert_eq!(k.simd, Simd::default(), "{what}");
                    assert_eq!(k.isa, Isa::Scalar, "{what}");
                } else if matches!(
                    k.weight,
                    GgmlType::F32
                        | GgmlType::Q4_0
                        | GgmlType::Q4_1
                        | GgmlType::Q8_0
                        | GgmlType::Q4_K
                        | GgmlType::Q5_K
                        | GgmlType::Q6_K
                ) {
                    assert!(k.simd.vec_dot, "{what}: no SIMD row kernel");
                }
            }
        }
    }
}
