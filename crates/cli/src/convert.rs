//! `lamina convert`: Hugging Face checkpoint folder → GGUF.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use lamina_hub::progress::ConvertBar;
use lamina_model::convert::{self, ConvertOptions, OutType};

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
    let bar = ConvertBar::new(true);
    let summary = convert::convert(&opts, &mut |p| bar.report(p));
    bar.finish();
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
