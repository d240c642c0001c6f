//! `lamina quantize`: rewrite a GGUF with its weights in another type, making
//! the choices `llama-quantize` makes so the output is the same file.
//!
//! What matches llama.cpp (`src/llama-quant.cpp`):
//! * which tensors are converted (`tensor_allows_quantization`): 2-D and
//!   larger tensors whose name ends in `weight`, except norms and a short list
//!   of small special tensors; every other tensor is copied unchanged;
//! * the type of each (for the targets implemented here every convertible
//!   tensor gets the target type; a row length that is not a whole number of
//!   blocks falls back to F16);
//! * metadata: the input's keys in order, then `general.quantization_version`
//!   and `general.file_type` removed and appended, in that order;
//! * tensor order: non-layer tensors first, then by layer number, each group
//!   by name (llama.cpp's `weight_name_comparer`).
//!
//! Implemented targets: F32, F16, BF16, Q8_0. The K-quant mixes (`Q4_K_M` …)
//! need llama.cpp's per-layer rules and are refused with a clear error for now.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use lamina_gguf::{GgmlType, Gguf, GgufBuilder, OwnedValue, TensorInfo};

use crate::ModelError;

/// A `llama-quantize` target (`LLAMA_FTYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    F32,
    F16,
    BF16,
    Q8_0,
}

/// Every target name `llama-quantize` knows, for error messages.
pub const ALL_TARGET_NAMES: &str = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K";

impl Target {
    /// Parses a target name (case-insensitive).
    pub fn parse(name: &str) -> Result<Target, ModelError> {
        Ok(match name.to_ascii_uppercase().as_str() {
            "F32" => Target::F32,
            "F16" => Target::F16,
            "BF16" => Target::BF16,
            "Q8_0" => Target::Q8_0,
            "Q4_0" | "Q4_1" | "Q5_0" | "Q5_1" | "Q2_K" | "Q3_K_S" | "Q3_K_M" | "Q3_K_L"
            | "Q4_K_S" | "Q4_K_M" | "Q5_K_S" | "Q5_K_M" | "Q6_K" => {
                return Err(ModelError::Unsupported(format!(
                    "quantize target {name} is not implemented yet (implemented: F32, F16, BF16, Q8_0)"
                )));
            }
            _ => {
                return Err(ModelError::Input(format!(
                    "unknown quantize target {name:?}; targets: {ALL_TARGET_NAMES}"
                )));
            }
        })
    }

    /// The tensor type the target gives convertible tensors.
    pub fn tensor_type(self) -> GgmlType {
        match self {
            Target::F32 => GgmlType::F32,
            Target::F16 => GgmlType::F16,
            Target::BF16 => GgmlType::BF16,
            Target::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`).
    pub fn file_type(self) -> u32 {
        match self {
            Target::F32 => 0,
            Target::F16 => 1,
            Target::BF16 => 32,
            Target::Q8_0 => 7,
        }
    }
}

/// llama.cpp's `tensor_allows_quantization` for the tensors of the
/// architectures this build knows (the model-specific exclusions included).
pub fn allows_quantization(t: &TensorInfo) -> bool {
    let name = t.name.as_str();
    let excluded = [
        "_norm.weight",
        "ffn_gate_inp.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "attn_rel_b.weight",
        ".position_embd",
        ".rel_pos",
        ".patch_embd",
    ];
    t.shape.len() >= 2
        && name.ends_with("weight")
        && !excluded.iter().any(|e| name.contains(e))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// The type a tensor gets for `target`.
pub fn tensor_type(t: &TensorInfo, target: Target) -> GgmlType {
    if !allows_quantization(t) {
        return t.ggml_type;
    }
    let ty = target.tensor_type();
    if !t.row_len().is_multiple_of(ty.block_size() as u64) {
        GgmlType::F16
    } else {
        ty
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
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Quantizes `input` into `output` (written to a temporary file beside it,
/// renamed at the end; removed on failure). `progress(i, n, name)` is called
/// before each tensor.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: Target,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Report, ModelError> {
    let src = Gguf::open(input)?;
    let tmp = temp_path(output);
    let result = write(&src, &tmp, target, progress);
    match result {
        Ok(report) => {
            std::fs::rename(&tmp, output).map_err(|e| io_err(output, e))?;
            Ok(report)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn temp_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    output.with_file_name(name)
}

fn io_err(path: &Path, e: std::io::Error) -> ModelError {
    ModelError::Gguf(lamina_gguf::Error::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

fn write(
    src: &Gguf,
    tmp: &Path,
    target: Target,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Report, ModelError> {
    let mut tensors: Vec<&TensorInfo> = src.tensors().iter().collect();
    tensors.sort_by(|a, b| order_key(&a.name).cmp(&order_key(&b.name)));

    let mut b = GgufBuilder::new();
    b.set_version(src.version())?;
    for (key, value) in src.metadata() {
        if key != "general.quantization_version" && key != "general.file_type" {
            b.set(key, value.to_owned_value())?;
        }
    }
    b.set("general.quantization_version", OwnedValue::U32(2))?;
    b.set("general.file_type", OwnedValue::U32(target.file_type()))?;
    let mut report = Report::default();
    let mut types = Vec::with_capacity(tensors.len());
    for t in &tensors {
        let ty = tensor_type(t, target);
        if ty != t.ggml_type {
            lamina_quant::check_supported(t.ggml_type, &t.name)
                .map_err(|e| ModelError::Unsupported(e.to_string()))?;
            report.converted += 1;
            if t.ggml_type.is_quantized() && ty.is_quantized() {
                report.requantized += 1;
            }
        }
        b.add_tensor(t.name.clone(), ty, &t.shape)?;
        types.push(ty);
    }
    if report.requantized > 0 {
        tracing::warn!(
            "requantizing {} tensors that are already quantized: quality will be worse than quantizing the original weights",
            report.requantized
        );
    }
    let file = std::fs::File::create(tmp).map_err(|e| io_err(tmp, e))?;
    let mut w = b.write_header(BufWriter::with_capacity(1 << 20, file))?;
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
    inner
        .into_inner()
        .map_err(|e| io_err(tmp, e.into_error()))?
        .sync_all()
        .map_err(|e| io_err(tmp, e))?;
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
    if data.len() != rows * in_row {
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
