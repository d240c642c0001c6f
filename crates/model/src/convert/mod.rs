//! Hugging Face checkpoint → GGUF conversion: a port of llama.cpp's
//! `convert_hf_to_gguf.py` for the architectures Lamina runs.
//!
//! [`convert`] reads `config.json`, picks the architecture, plans every
//! output tensor (name, shape, type) from the safetensors headers, builds the
//! metadata (general.*, hyper-parameters, tokenizer) and then streams each
//! tensor from the memory-mapped safetensors files through the element
//! conversion into a [`lamina_gguf::TensorWriter`], a bounded chunk at a time.
//! The output is written to a temporary beside `OUT` ([`lamina_gguf::StagedFile`])
//! and renamed at the end, so a failed run never leaves a half-written file behind.

mod arch;
pub mod floats;
mod meta;
mod source;
pub mod spm_proto;
mod vocab;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use lamina_gguf::{GgmlType, GgufBuilder, OwnedValue};

use crate::requantize::Target;

pub use arch::Arch;
use source::{Sources, TensorRef};

/// Errors from [`convert`]; each names what was wrong and, where it can,
/// what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error(
        "unsupported architecture {0:?}: lamina convert handles LlamaForCausalLM, \
         MistralForCausalLM, GraniteForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, \
         Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextModel (EmbeddingGemma), \
         BertModel, BertForMaskedLM, BertForSequenceClassification, XLMRobertaModel, \
         XLMRobertaForSequenceClassification and NomicBertModel"
    )]
    UnknownArch(String),
    #[error("{0}")]
    Tensor(String),
    #[error("{0}")]
    Tokenizer(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("writing GGUF: {0}")]
    Gguf(#[from] lamina_gguf::Error),
    #[error("quantizing the converted model: {0}")]
    Quantize(Box<crate::ModelError>),
}

/// Result alias for conversion.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The tensor type requested for the file (`--type`); 1-D tensors and norms
/// stay f32 whatever is asked, as in the Python converter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    F32,
    F16,
    Bf16,
    /// A `llama-quantize` target (q8_0, q4_k_m, ...): the model is converted
    /// to f32 beside the output, then quantized exactly as `lamina quantize`
    /// (and so `llama-quantize`) would.
    Quantized(Target),
}

impl OutType {
    /// Parses a `--type` name: f32, f16, bf16 or a quantize target (q8_0, q4_k_m, ...).
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "f32" => Ok(OutType::F32),
            "f16" => Ok(OutType::F16),
            "bf16" => Ok(OutType::Bf16),
            _ => Target::parse(name).map(OutType::Quantized).map_err(|_| {
                Error::Unsupported(format!(
                    "unknown output type {name:?}: use f32, f16, bf16 or a quantize target \
                     (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, \
                     q4_k_m, q5_k_s, q5_k_m, q6_k)"
                ))
            }),
        }
    }

    /// The type 2-D weights are written in by the conversion itself.
    fn ggml_type(self) -> GgmlType {
        match self {
            OutType::F32 | OutType::Quantized(_) => GgmlType::F32,
            OutType::F16 => GgmlType::F16,
            OutType::Bf16 => GgmlType::BF16,
        }
    }

    /// `general.file_type` of the converted file (llama.cpp's `LlamaFileType`).
    fn file_type(self) -> u32 {
        match self {
            OutType::F32 | OutType::Quantized(_) => 0,
            OutType::F16 => 1,
            OutType::Bf16 => 32,
        }
    }
}

/// What to convert and where to.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    /// The Hugging Face model folder (config.json, *.safetensors, tokenizer files).
    pub input: PathBuf,
    /// The GGUF file to write.
    pub output: PathBuf,
    pub out_type: OutType,
    /// Include sentence-transformers Dense modules (`2_Dense/`, `3_Dense/`)
    /// for EmbeddingGemma, like `--sentence-transformers-dense-modules`.
    pub dense_modules: bool,
    /// Write `BertForSequenceClassification`'s pooler (dense + tanh) as the
    /// `cls` tensor, so scores match PyTorch. The Python converter drops it,
    /// so its files score without the pooler (the CLI's `--no-bert-pooler`
    /// turns this off).
    pub bert_pooler: bool,
    /// The model's Hugging Face id (`ORG/REPO`), which names the model in
    /// `general.*` when the card does not. `None`: the folder's name, as
    /// the Python converter uses it; a hub snapshot's folder is named by
    /// its commit, so conversions of one pass the repo's id here.
    pub model_id: Option<String>,
}

/// Progress reports from [`convert`].
#[derive(Clone, Debug)]
pub enum Progress<'a> {
    /// The plan is made: this many tensors and data bytes will be written.
    Start { n_tensors: usize, total_bytes: u64 },
    /// A tensor is about to be written.
    Tensor {
        name: &'a str,
        ggml_type: GgmlType,
        shape: &'a [u64],
    },
    /// This many more data bytes were written.
    Bytes(u64),
    /// Quantizing (a quantize target only): tensor `index` of `total` is next.
    Quantize {
        index: usize,
        total: usize,
        name: &'a str,
    },
}

/// What [`convert`] wrote.
#[derive(Clone, Debug)]
pub struct Summary {
    pub arch: &'static str,
    pub n_tensors: usize,
    pub n_metadata: usize,
    pub data_bytes: u64,
    pub total_params: u64,
}

/// How one output tensor is made from a source tensor.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub src: TensorRef,
    pub name: String,
    /// GGUF shape (ne0 first).
    pub shape: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Keep only the first `rows` rows of the source (vocabulary trimming).
    pub rows: usize,
    /// Drop this many leading rows of those (XLM-R's position offset).
    pub skip_rows: usize,
    /// Added to every element (Gemma's `1 + w` norms).
    pub shift: f32,
    /// Llama's rotary permutation: the number of heads to regroup rows by.
    pub permute_heads: Option<usize>,
    /// The values of a tensor computed from the configuration (rope factors),
    /// written instead of reading `src`.
    pub values: Option<Vec<f32>>,
}

impl Job {
    /// A 1-D f32 tensor of computed values.
    pub(crate) fn generated(name: String, values: Vec<f32>) -> Self {
        Job {
            src: TensorRef::default(),
            name,
            shape: vec![values.len() as u64],
            ggml_type: GgmlType::F32,
            rows: 1,
            skip_rows: 0,
            shift: 0.0,
            permute_heads: None,
            values: Some(values),
        }
    }
}

/// Converts a Hugging Face checkpoint folder to a GGUF file.
pub fn convert(opts: &ConvertOptions, progress: &mut dyn FnMut(Progress<'_>)) -> Result<Summary> {
    let dir = &opts.input;
    if !dir.is_dir() {
        return Err(Error::Config(format!(
            "{} is not a folder: pass the Hugging Face model folder (the one holding config.json)",
            dir.display()
        )));
    }
    let model = arch::Model::load(dir, opts)?;
    let sources = Sources::open(dir, &model, opts)?;
    let vocab = vocab::build(dir, &model)?;
    let jobs = model.plan(&sources, &vocab, opts.out_type)?;

    let mut builder = GgufBuilder::new();
    builder.set(
        "general.architecture",
        OwnedValue::string(model.arch.name()),
    )?;
    model.write_early_params(&mut builder)?;
    builder.set("general.type", OwnedValue::string("model"))?;
    let total_params: u64 = jobs.iter().map(|j| j.shape.iter().product::<u64>()).sum();
    meta::write_general(&mut builder, dir, opts.model_id.as_deref(), total_params)?;
    model.write_params(&mut builder, opts.out_type.file_type())?;
    builder.set("general.quantization_version", OwnedValue::U32(2))?;
    vocab.write(&mut builder, &model)?;

    for job in &jobs {
        builder.add_tensor(job.name.clone(), job.ggml_type, &job.shape)?;
    }
    let n_metadata = builder.metadata().len();
    let total_bytes: u64 = builder.tensors().iter().map(|t| t.n_bytes).sum();
    progress(Progress::Start {
        n_tensors: jobs.len(),
        total_bytes,
    });

    let staged = lamina_gguf::StagedFile::create(&opts.output).map_err(io_err(&opts.output))?;
    write_file(&staged, builder, &jobs, &sources, progress)?;
    if let OutType::Quantized(target) = opts.out_type {
        // The staged f32 file is the quantizer's input; it is removed when dropped.
        crate::requantize::quantize_file(staged.path(), &opts.output, target, &mut |i, n, name| {
            progress(Progress::Quantize {
                index: i,
                total: n,
                name,
            })
        })
        .map_err(|e| Error::Quantize(Box::new(e)))?;
    } else {
        staged.commit().map_err(io_err(&opts.output))?;
    }
    Ok(Summary {
        arch: model.arch.name(),
        n_tensors: jobs.len(),
        n_metadata,
        data_bytes: total_bytes,
        total_params,
    })
}

fn write_file(
    staged: &lamina_gguf::StagedFile,
    builder: GgufBuilder,
    jobs: &[Job],
    sources: &Sources,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<()> {
    let tmp = staged.path();
    let mut w = builder.write_header(BufWriter::with_capacity(1 << 20, staged.file()))?;
    let mut out = Vec::new();
    let mut vals = Vec::new();
    for job in jobs {
        progress(Progress::Tensor {
            name: &job.name,
            ggml_type: job.ggml_type,
            shape: &job.shape,
        });
        if let Some(values) = &job.values {
            encode(job, values, &mut out)?;
            w.write_chunk(&out)?;
            progress(Progress::Bytes(out.len() as u64));
            continue;
        }
        let src = sources.get(&job.src);
        let row_len = src.row_len();
        // Whole rows at a time, about 4 M elements per chunk.
        let rows_per_chunk = (4usize << 20).div_ceil(row_len.max(1)).max(1);
        let mut row = job.skip_rows;
        while row < job.rows {
            let n = rows_per_chunk.min(job.rows - row);
            vals.clear();
            for r in row..row + n {
                src.read_row(source_row(job, r), &mut vals)?;
            }
            if job.shift != 0.0 {
                let through_f16 = src.is_f16();
                for v in &mut vals {
                    *v += job.shift;
                    if through_f16 {
                        *v = floats::round_through_f16(*v);
                    }
                }
            }
            encode(job, &vals, &mut out)?;
            w.write_chunk(&out)?;
            progress(Progress::Bytes(out.len() as u64));
            row += n;
        }
    }
    // The data reaches the disk in `StagedFile::commit`, or is read back by the quantizer.
    w.finish()?.flush().map_err(io_err(tmp))?;
    Ok(())
}

/// The source row that output row `r` comes from: the inverse of
/// `w.reshape(n_head, 2, rows/n_head/2, ...).swapaxes(1, 2)`.
fn source_row(job: &Job, r: usize) -> usize {
    match job.permute_heads {
        None => r,
        Some(n_head) => {
            let per_head = job.rows / n_head;
            let half = per_head / 2;
            let (h, within) = (r / per_head, r % per_head);
            let (j, i) = (within / 2, within % 2);
            h * per_head + i * half + j
        }
    }
}

fn encode(job: &Job, vals: &[f32], out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    match job.ggml_type {
        GgmlType::F32 => {
            out.reserve(vals.len() * 4);
            for v in vals {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            out.reserve(vals.len() * 2);
            for &v in vals {
                out.extend_from_slice(&floats::f32_to_f16_bits(v).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            out.reserve(vals.len() * 2);
            for &v in vals {
                out.extend_from_slice(&floats::f32_to_bf16_bits(v).to_le_bytes());
            }
        }
        t => {
            return Err(Error::Unsupported(format!(
                "{}: the converter writes f32, f16 or bf16, not {t}",
                job.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_matches_numpy() {
        // n_head = 2, 8 rows: reshape(2, 2, 2).swapaxes(1, 2) per head.
        let job = Job {
            src: TensorRef::default(),
            name: String::new(),
            shape: vec![1, 8],
            ggml_type: GgmlType::F32,
            rows: 8,
            skip_rows: 0,
            shift: 0.0,
            permute_heads: Some(2),
            values: None,
        };
        let rows: Vec<usize> = (0..8).map(|r| source_row(&job, r)).collect();
        assert_eq!(rows, [0, 2, 1, 3, 4, 6, 5, 7]);
    }

    #[test]
    fn out_type_names() {
        assert_eq!(OutType::parse("f32").unwrap(), OutType::F32);
        assert_eq!(OutType::parse("BF16").unwrap(), OutType::Bf16);
        assert_eq!(
            OutType::parse("q8_0").unwrap(),
            OutType::Quantized(Target::Q8_0)
        );
        assert_eq!(
            OutType::parse("Q4_K_M").unwrap(),
            OutType::Quantized(Target::Q4_K_M)
        );
        assert!(OutType::parse("f64").is_err());
    }
}
