//! `lamina quantize`: rewrite a GGUF with its weights in another type, making
//! the choices `llama-quantize` makes so the output is the same file.
//!
//! What matches llama.cpp (`src/llama-quant.cpp` at the pinned commit):
//! * which tensors are converted (`tensor_allows_quantization`): 2-D and
//!   larger tensors whose name ends in `weight`, except norms and a list of
//!   small special tensors; every other tensor is copied unchanged;
//! * the type of each (`llama_tensor_get_type_impl`): the mixes' per-tensor
//!   rules (the output and tied token embedding get Q6_K, `attn_v` and
//!   `ffn_down` get more bits in some layers of the `_M` mixes, ...) and the
//!   fallbacks for rows that are not a whole number of blocks (Q4_K → Q5_0,
//!   Q6_K → Q8_0, ..., then F16);
//! * metadata: the input's keys in order, then `general.quantization_version`
//!   and `general.file_type` removed and appended, in that order;
//! * tensor order: non-layer tensors first, then by layer number, each group
//!   by name (llama.cpp's `weight_name_comparer`).
//!
//! Quantization uses the reference quantizers of `lamina-quant`, which are
//! bit-identical to ggml's `quantize_row_*_ref` (what `llama-quantize` runs
//! without an importance matrix).

use std::io::{BufWriter, Write};
use std::path::Path;

use lamina_gguf::{GgmlType, Gguf, GgufBuilder, OwnedValue, StagedFile, TensorInfo};

use crate::ModelError;

/// A `llama-quantize` target (`LLAMA_FTYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum Target {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

/// Every target, in `llama-quantize --help` order.
pub const ALL_TARGETS: [Target; 17] = [
    Target::F32,
    Target::F16,
    Target::BF16,
    Target::Q8_0,
    Target::Q4_0,
    Target::Q4_1,
    Target::Q5_0,
    Target::Q5_1,
    Target::Q2_K,
    Target::Q3_K_S,
    Target::Q3_K_M,
    Target::Q3_K_L,
    Target::Q4_K_S,
    Target::Q4_K_M,
    Target::Q5_K_S,
    Target::Q5_K_M,
    Target::Q6_K,
];

impl Target {
    /// Parses a target name (case-insensitive).
    pub fn parse(name: &str) -> Result<Target, ModelError> {
        let upper = name.to_ascii_uppercase();
        ALL_TARGETS
            .into_iter()
            .find(|t| t.name() == upper)
            .ok_or_else(|| {
                let names: Vec<&str> = ALL_TARGETS.iter().map(|t| t.name()).collect();
                ModelError::Input(format!(
                    "unknown quantize target {name:?}; targets: {}",
                    names.join(", ")
                ))
            })
    }

    /// The name `llama-quantize` uses.
    pub fn name(self) -> &'static str {
        match self {
            Target::F32 => "F32",
            Target::F16 => "F16",
            Target::BF16 => "BF16",
            Target::Q8_0 => "Q8_0",
            Target::Q4_0 => "Q4_0",
            Target::Q4_1 => "Q4_1",
            Target::Q5_0 => "Q5_0",
            Target::Q5_1 => "Q5_1",
            Target::Q2_K => "Q2_K",
            Target::Q3_K_S => "Q3_K_S",
            Target::Q3_K_M => "Q3_K_M",
            Target::Q3_K_L => "Q3_K_L",
            Target::Q4_K_S => "Q4_K_S",
            Target::Q4_K_M => "Q4_K_M",
            Target::Q5_K_S => "Q5_K_S",
            Target::Q5_K_M => "Q5_K_M",
            Target::Q6_K => "Q6_K",
        }
    }

    /// The type most convertible tensors get (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        use Target::*;
        match self {
            F32 => GgmlType::F32,
            F16 => GgmlType::F16,
            BF16 => GgmlType::BF16,
            Q8_0 => GgmlType::Q8_0,
            Q4_0 => GgmlType::Q4_0,
            Q4_1 => GgmlType::Q4_1,
            Q5_0 => GgmlType::Q5_0,
            Q5_1 => GgmlType::Q5_1,
            Q2_K => GgmlType::Q2_K,
            Q3_K_S | Q3_K_M | Q3_K_L => GgmlType::Q3_K,
            Q4_K_S | Q4_K_M => GgmlType::Q4_K,
            Q5_K_S | Q5_K_M => GgmlType::Q5_K,
            Q6_K => GgmlType::Q6_K,
        }
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`).
    pub fn file_type(self) -> u32 {
        use Target::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q8_0 => 7,
            Q5_0 => 8,
            Q5_1 => 9,
            Q2_K => 10,
            Q3_K_S => 11,
            Q3_K_M => 12,
            Q3_K_L => 13,
            Q4_K_S => 14,
            Q4_K_M => 15,
            Q5_K_S => 16,
            Q5_K_M => 17,
            Q6_K => 18,
            BF16 => 32,
        }
    }
}

/// llama.cpp's `tensor_allows_quantization` (the architecture-independent
/// rules plus the name-based exclusions of every architecture).
pub fn allows_quantization(t: &TensorInfo) -> bool {
    let name = t.name.as_str();
    const EXCLUDED: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    // ggml_n_dims: trailing dimensions of 1 do not count (a 1-label
    // classifier's `[n_embd, 1]` output is a vector to llama.cpp).
    let n_dims = t.shape.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
    n_dims >= 2
        && name.ends_with("weight")
        && !EXCLUDED.iter().any(|e| name.contains(e))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// The broad role of a tensor (llama.cpp's `tensor_category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttentionQkv,
    AttentionKvB,
    AttentionV,
    AttentionK,
    AttentionQ,
    AttentionOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
}

impl Category {
    fn of(name: &str) -> Category {
        if name == "output.weight" {
            return Category::Output;
        }
        if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            return Category::TokenEmbd;
        }
        let by_part = [
            ("attn_qkv.weight", Category::AttentionQkv),
            ("attn_kv_b.weight", Category::AttentionKvB),
            ("attn_v.weight", Category::AttentionV),
            ("attn_k.weight", Category::AttentionK),
            ("attn_q.weight", Category::AttentionQ),
            ("attn_output.weight", Category::AttentionOutput),
            ("ffn_up", Category::FfnUp),
            ("ffn_gate", Category::FfnGate),
            ("ffn_down", Category::FfnDown),
        ];
        by_part
            .into_iter()
            .find(|(part, _)| name.contains(part))
            .map_or(Category::Other, |(_, c)| c)
    }

    /// The value-projection-like tensors that are most sensitive to quantization.
    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttentionV | Category::AttentionQkv | Category::AttentionKvB
        )
    }
}

/// What the type rules read from the model (llama.cpp's `quantize_state_impl`
/// and the hyper-parameters it consults), with the running layer counters.
#[derive(Debug)]
pub struct TypePlanner {
    target: Target,
    falcon: bool,
    /// A 70B Llama (80 layers, grouped KV heads): `attn_v` gets Q5_K over Q3_K/Q4_K.
    llama_70b: bool,
    n_gqa: u64,
    n_expert: u64,
    has_tied_embeddings: bool,
    n_attention_wv: u64,
    n_layer: u64,
    i_attention_wv: u64,
    i_ffn_down: u64,
}

impl TypePlanner {
    /// Reads what the rules need from `src` (all tensors, in file order).
    pub fn new(src: &Gguf, target: Target) -> TypePlanner {
        let arch = src
            .get_str("general.architecture")
            .unwrap_or("")
            .to_string();
        // A scalar, or the first layer's value of a per-layer array.
        let first_u64 = |key: &str| -> Option<u64> {
            let first = match src.get(&format!("{arch}.{key}"))? {
                lamina_gguf::Value::Array(a) => a.to_i64_vec()?.first().copied()?.into(),
                v => v.as_integer()?,
            };
            u64::try_from(first).ok()
        };
        let n_layer = first_u64("block_count").unwrap_or(0);
        let n_head = first_u64("attention.head_count").unwrap_or(0);
        let n_head_kv = first_u64("attention.head_count_kv").unwrap_or(n_head);
        let names = src.tensors().iter().map(|t| Category::of(&t.name));
        TypePlanner {
            target,
            falcon: arch == "falcon",
            llama_70b: arch == "llama" && n_layer == 80 && n_head != n_head_kv,
            n_gqa: n_head.checked_div(n_head_kv).unwrap_or(0),
            n_expert: first_u64("expert_count").unwrap_or(0),
            has_tied_embeddings: !src.tensors().iter().any(|t| t.name == "output.weight"),
            n_attention_wv: names.filter(|c| c.is_attn_v()).count() as u64,
            n_layer,
            i_attention_wv: 0,
            i_ffn_down: 0,
        }
    }

    /// The type `t` gets (`llama_tensor_get_type`). Call once per tensor, in
    /// llama.cpp's tensor order: the `attn_v`/`ffn_down` rules count layers.
    pub fn tensor_type(&mut self, t: &TensorInfo) -> GgmlType {
        if !allows_quantization(t) {
            return t.ggml_type;
        }
        let default = self.target.default_type();
        if !default.is_quantized() {
            return default;
        }
        let ty = self.mix_type(t, default);
        fallback(t.row_len(), ty)
    }

    /// `llama_tensor_get_type_impl` for the targets lamina supports.
    fn mix_type(&mut self, t: &TensorInfo, default: GgmlType) -> GgmlType {
        use Target::*;
        let ftype = self.target;
        let category = Category::of(&t.name);
        // `use_more_bits`: the first and last eighth of the layers and every third between.
        // In u128: a hostile layer count must not overflow `7 * n`.
        let more_bits = |i: u64, n: u64| {
            let (i, n) = (u128::from(i), u128::from(n));
            i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
        };
        let mut ty = default;
        if category == Category::Output
            || (self.has_tied_embeddings && category == Category::TokenEmbd)
        {
            if self.falcon || !t.row_len().is_multiple_of(ty.block_size() as u64) {
                ty = GgmlType::Q8_0;
            } else if ty != GgmlType::Q8_0 {
                ty = GgmlType::Q6_K;
            }
        } else if category == Category::TokenEmbd {
            // The untied token embedding keeps the default type for these targets.
        } else if category.is_attn_v() {
            match ftype {
                Q2_K => {
                    ty = if self.n_gqa >= 4 {
                        GgmlType::Q4_K
                    } else {
                        GgmlType::Q3_K
                    };
                }
                Q3_K_M => {
                    ty = if self.i_attention_wv < 2 {
                        GgmlType::Q5_K
                    } else {
                        GgmlType::Q4_K
                    };
                }
                Q3_K_L => ty = GgmlType::Q5_K,
                Q4_K_M | Q5_K_M if more_bits(self.i_attention_wv, self.n_attention_wv) => {
                    ty = GgmlType::Q6_K;
                }
                Q4_K_S if self.i_attention_wv < 4 => ty = GgmlType::Q5_K,
                _ => {}
            }
            if self.llama_70b && matches!(ty, GgmlType::Q3_K | GgmlType::Q4_K) {
                ty = GgmlType::Q5_K;
            }
            if self.n_expert == 8 {
                ty = GgmlType::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if category == Category::AttentionK {
            if self.n_expert == 8 {
                ty = GgmlType::Q8_0;
            }
        } else if category == Category::FfnDown {
            let (i, n) = (self.i_ffn_down, self.n_layer);
            match ftype {
                Q2_K => ty = GgmlType::Q3_K,
                Q3_K_M => {
                    ty = if i < n / 16 {
                        GgmlType::Q5_K
                    } else if !self.falcon || more_bits(i, n) {
                        GgmlType::Q4_K
                    } else {
                        GgmlType::Q3_K
                    };
                }
                Q3_K_L => {
                    ty = if self.falcon {
                        GgmlType::Q4_K
                    } else {
                        GgmlType::Q5_K
                    };
                }
                Q4_K_M => {
                    if self.falcon {
                        ty = if i < n / 16 {
                            GgmlType::Q6_K
                        } else if more_bits(i, n) {
                            GgmlType::Q5_K
                        } else {
                            GgmlType::Q4_K
                        };
                    } else if more_bits(i, n) {
                        ty = GgmlType::Q6_K;
                    }
                }
                Q5_K_M if more_bits(i, n) => ty = GgmlType::Q6_K,
                Q4_K_S if !self.falcon && i < n / 8 => ty = GgmlType::Q5_K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if category == Category::AttentionOutput {
            if !self.falcon {
                if self.n_expert == 8 {
                    if matches!(ftype, Q2_K | Q3_K_S | Q3_K_M | Q4_K_S | Q4_K_M) {
                        ty = GgmlType::Q5_K;
                    }
                } else {
                    match ftype {
                        Q2_K => ty = GgmlType::Q3_K,
                        Q3_K_M => ty = GgmlType::Q4_K,
                        Q3_K_L => ty = GgmlType::Q5_K,
                        _ => {}
                    }
                }
            } else if ftype == Q3_K_L {
                ty = GgmlType::Q4_K;
            }
        } else if category == Category::AttentionQkv {
            match ftype {
                Q3_K_M | Q3_K_L => ty = GgmlType::Q4_K,
                Q4_K_M => ty = GgmlType::Q5_K,
                Q5_K_M => ty = GgmlType::Q6_K,
                _ => {}
            }
        }
        ty
    }
}

/// `tensor_type_fallback`: a type whose block does not divide the row
/// length falls back to a 32-wide type, and to F16 if that does not fit either.
fn fallback(row_len: u64, ty: GgmlType) -> GgmlType {
    if row_len.is_multiple_of(ty.block_size() as u64) {
        return ty;
    }
    let smaller = match ty {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if row_len.is_multiple_of(smaller.block_size() as u64) {
        smaller
    } else {
        GgmlType::F16
    }
}

/// llama.cpp's tensor order: non-layer tensors, then layer by layer, names sorted.
fn order_key(name: &str) -> (i64, &str) {
    let layer = name
        .strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse::<i64>().ok())
        .unwrap_or(-1);
    (layer, name)
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    pub tensors: usize,
    pub converted: usize,
    /// Tensors that were already quantized and were quantized again.
    pub requantized: usize,
    /// How many tensors of each type the output holds.
    pub types: std::collections::BTreeMap<&'static str, usize>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Quantizes `input` into `output` (written to a temporary file beside it,
/// created exclusively and renamed at the end; removed on failure or panic,
/// and by [`lamina_gguf::remove_all_staged`] on Ctrl-C).
/// `progress(i, n, name)` is called before each tensor.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: Target,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Report, ModelError> {
    let src = Gguf::open(input)?;
    let staged = StagedFile::create(output).map_err(|e| io_err(output, e))?;
    let report = write(&src, &staged, target, progress)?;
    staged.commit().map_err(|e| io_err(output, e))?;
    Ok(report)
}

fn io_err(path: &Path, e: std::io::Error) -> ModelError {
    ModelError::Gguf(lamina_gguf::Error::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

fn write(
    src: &Gguf,
    staged: &StagedFile,
    target: Target,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Report, ModelError> {
    let mut tensors: Vec<&TensorInfo> = src.tensors().iter().collect();
    tensors.sort_by(|a, b| order_key(&a.name).cmp(&order_key(&b.name)));

    let mut b = GgufBuilder::new();
    b.set_version(src.version())?;
    let mut budget = lamina_gguf::MAX_COPIED_ELEMENTS;
    for (key, value) in src.metadata() {
        if key != "general.quantization_version" && key != "general.file_type" {
            b.set(key, value.try_to_owned_value(key, &mut budget)?)?;
        }
    }
    b.set("general.quantization_version", OwnedValue::U32(2))?;
    b.set("general.file_type", OwnedValue::U32(target.file_type()))?;
    let mut report = Report::default();
    let mut types = Vec::with_capacity(tensors.len());
    let mut planner = TypePlanner::new(src, target);
    for t in &tensors {
        let mut ty = planner.tensor_type(t);
        if t.n_elements() == 0 {
            // Nothing to quantize: copied through as it is, like any tensor
            // llama-quantize leaves alone.
            ty = t.ggml_type;
        }
        if ty != t.ggml_type {
            lamina_quant::check_supported(t.ggml_type, &t.name)
                .map_err(|e| ModelError::Unsupported(e.to_string()))?;
            report.converted += 1;
            if t.ggml_type.is_quantized() && ty.is_quantized() {
                report.requantized += 1;
            }
        }
        // llama-quantize writes ggml's dimensions, without trailing 1s.
        let dims = t.shape.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
        b.add_tensor(t.name.clone(), ty, &t.shape[..dims.min(t.shape.len())])?;
        *report.types.entry(ty.name()).or_default() += 1;
        types.push(ty);
    }
    if report.requantized > 0 {
        tracing::warn!(
            "requantizing {} tensors that are already quantized: quality will be worse than quantizing the original weights",
            report.requantized
        );
    }
    let tmp = staged.path();
    let mut w = b.write_header(BufWriter::with_capacity(1 << 20, staged.file()))?;
    let n = tensors.len();
    for (i, (t, &ty)) in tensors.iter().zip(&types).enumerate() {
        progress(i, n, &t.name);
        let data = src.tensor_data(t);
        report.bytes_in += data.len() as u64;
        if ty == t.ggml_type {
            w.write_tensor(data)?;
            report.bytes_out += data.len() as u64;
            continue;
        }
        let out = convert_tensor(t, data, ty)?;
        report.bytes_out += out.len() as u64;
        w.write_tensor(&out)?;
    }
    let mut inner = w.finish()?;
    inner.flush().map_err(|e| io_err(tmp, e))?;
    report.tensors = n;
    Ok(report)
}

/// Dequantizes a tensor row by row and quantizes it to `ty`, rows in parallel.
fn convert_tensor(t: &TensorInfo, data: &[u8], ty: GgmlType) -> Result<Vec<u8>, ModelError> {
    use rayon::prelude::*;
    let cols = t.row_len() as usize;
    let rows = t.n_rows() as usize;
    let in_row = t
        .ggml_type
        .row_bytes(cols as u64)
        .ok_or_else(|| ModelError::Unsupported(format!("{}: bad row length", t.name)))?
        as usize;
    let out_row = ty.row_bytes(cols as u64).ok_or_else(|| {
        ModelError::Unsupported(format!("{}: {cols} values per row do not fit {ty}", t.name))
    })? as usize;
    if in_row == 0 || out_row == 0 || data.len() != rows * in_row {
        return Err(ModelError::Unsupported(format!(
            "{}: data size does not match its shape",
            t.name
        )));
    }
    let mut out = vec![0u8; rows * out_row];
    out.par_chunks_mut(out_row)
        .zip(data.par_chunks(in_row))
        .try_for_each_init(
            || vec![0f32; cols],
            |buf, (o, i)| -> Result<(), ModelError> {
                let e = |e: lamina_quant::QuantError| {
                    ModelError::Unsupported(format!("{}: {e}", t.name))
                };
                lamina_quant::dequantize_row(t.ggml_type, i, buf).map_err(e)?;
                lamina_quant::quantize_row(ty, buf, o).map_err(e)?;
                Ok(())
            },
        )?;
    Ok(out)
}
