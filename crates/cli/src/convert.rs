//! `lamina convert`: Hugging Face checkpoint folder → GGUF.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lamina_model::convert::{self, ConvertOptions, OutType, Progress};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Hugging Face model folder (config.json, model*.safetensors, tokenizer files).
    /// Architectures: LlamaForCausalLM (incl. Llama 3 rope scaling), MistralForCausalLM,
    /// GraniteForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM (incl.
    /// LongRoPE), Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextModel (EmbeddingGemma),
    /// BertModel, BertForMaskedLM, BertForSequenceClassification, XLMRobertaModel,
    /// XLMRobertaForSequenceClassification and NomicBertModel.
    pub input: PathBuf,
    /// The GGUF file to write (written to a temporary beside it, renamed when complete).
    pub output: PathBuf,
    /// Tensor type: f32, f16, bf16, or a quantize target (q8_0, q4_k_m, q6_k,
    /// ...: converted to f32, then quantized as `lamina quantize` does).
    /// 1-D tensors and norms are always f32.
    #[arg(long = "type", default_value = "f16")]
    pub out_type: String,
    /// Leave out EmbeddingGemma's sentence-transformers Dense modules.
    #[arg(long)]
    pub no_dense_modules: bool,
    /// Drop BertForSequenceClassification's pooler (dense + tanh), as
    /// convert_hf_to_gguf.py does: the file is then byte-identical to
    /// Python's, but its scores are llama.cpp's rather than PyTorch's.
    #[arg(long)]
    pub no_bert_pooler: bool,
}

pub fn run(args: Args) -> Result<()> {
    let out_type = OutType::parse(&args.out_type)?;
    let opts = ConvertOptions {
        input: args.input.clone(),
        output: args.output.clone(),
        out_type,
        dense_modules: !args.no_dense_modules,
        bert_pooler: !args.no_bert_pooler,
        model_id: None,
    };
    let start = Instant::now();
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        )
        .expect("valid progress template"),
    );
    let summary = convert::convert(&opts, &mut |p| match p {
        Progress::Start { total_bytes, .. } => bar.set_length(total_bytes),
        Progress::Tensor { name, .. } => bar.set_message(name.to_string()),
        Progress::Bytes(n) => bar.inc(n),
        Progress::Quantize { index, total, name } => {
            if index == 0 {
                bar.set_style(
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} tensors quantized {msg}")
                        .expect("valid progress template"),
                );
                bar.set_length(total as u64);
            }
            bar.set_position(index as u64);
            bar.set_message(name.to_string());
        }
    });
    bar.finish_and_clear();
    let summary = summary.with_context(|| format!("converting {}", args.input.display()))?;
    eprintln!(
        "wrote {} ({}, {} tensors, {} metadata keys, {} parameters) in {:.1} s",
        args.output.display(),
        summary.arch,
        summary.n_tensors,
        summary.n_metadata,
        summary.total_params,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
