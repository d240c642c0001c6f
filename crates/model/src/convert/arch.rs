//! Architectures: which Hugging Face class becomes which GGUF architecture,
//! the hyper-parameter metadata, and the tensor-name mapping, following
//! `conversion/base.py`; the per-family parts (`gemma.py`, `llama.py`,
//! `granite.py`, `qwen.py`, `phi.py`, `bert.py`) live in the submodules.

mod bert;
mod gemma;
mod llama;
mod names;
mod phi3;
mod qwen;

use std::path::Path;

use lamina_gguf::{GgmlType, GgufBuilder, OwnedValue};
use serde_json::{Map, Value};

use super::source::{SourceTensor, Sources};
use super::vocab::Vocab;
use super::{ConvertOptions, Error, Job, OutType, Result, io_err};

/// The GGUF architectures the converter writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `Gemma3TextModel` (EmbeddingGemma).
    GemmaEmbedding,
    /// `Gemma3ForCausalLM`.
    Gemma3,
    /// `Gemma2ForCausalLM`.
    Gemma2,
    /// `LlamaForCausalLM` and `MistralForCausalLM`.
    Llama,
    /// `GraniteForCausalLM`.
    Granite,
    /// `Qwen2ForCausalLM`.
    Qwen2,
    /// `Qwen3ForCausalLM`.
    Qwen3,
    /// `Phi3ForCausalLM`.
    Phi3,
    /// `BertModel`, `BertForMaskedLM`, `BertForSequenceClassification`,
    /// `XLMRobertaModel` and `XLMRobertaForSequenceClassification`.
    Bert,
    /// `NomicBertModel`.
    NomicBert,
}

impl Arch {
    /// The `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::GemmaEmbedding => "gemma-embedding",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma2 => "gemma2",
            Arch::Llama => "llama",
            Arch::Granite => "granite",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Phi3 => "phi3",
            Arch::Bert => "bert",
            Arch::NomicBert => "nomic-bert",
        }
    }

    /// The architecture for a `config.json` `architectures[0]` entry.
    pub fn from_hf(name: &str) -> Option<Self> {
        match name {
            "Gemma3TextModel" => Some(Arch::GemmaEmbedding),
            "Gemma3ForCausalLM" => Some(Arch::Gemma3),
            "Gemma2ForCausalLM" => Some(Arch::Gemma2),
            "LlamaForCausalLM" | "LLaMAForCausalLM" | "MistralForCausalLM" => Some(Arch::Llama),
            "GraniteForCausalLM" => Some(Arch::Granite),
            "Qwen2ForCausalLM" => Some(Arch::Qwen2),
            "Qwen3ForCausalLM" => Some(Arch::Qwen3),
            "Phi3ForCausalLM" => Some(Arch::Phi3),
            "BertModel"
            | "BertForMaskedLM"
            | "BertForSequenceClassification"
            | "XLMRobertaModel"
            | "XLMRobertaForSequenceClassification" => Some(Arch::Bert),
            "NomicBertModel" => Some(Arch::NomicBert),
            _ => None,
        }
    }

    fn is_gemma(self) -> bool {
        matches!(self, Arch::GemmaEmbedding | Arch::Gemma3 | Arch::Gemma2)
    }

    /// The classes converted by `LlamaModel` or a subclass of it (Q/K rotary permutation).
    fn is_llama(self) -> bool {
        matches!(self, Arch::Llama | Arch::Granite)
    }

    /// The encoder architectures of `conversion/bert.py`.
    fn is_bert(self) -> bool {
        matches!(self, Arch::Bert | Arch::NomicBert)
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read(path).map_err(io_err(path))?;
    serde_json::from_slice(&text).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// A loaded model description.
pub struct Model {
    pub arch: Arch,
    /// `architectures[0]` of config.json (the Hugging Face class).
    pub hf_arch: String,
    pub dir: std::path::PathBuf,
    /// config.json with `text_config` merged in and transformers' defaults filled.
    pub hparams: Map<String, Value>,
    /// config.json exactly as written.
    pub(super) raw_config: Map<String, Value>,
    pub block_count: u64,
    /// (module folder, tensor prefix) of each sentence-transformers Dense module.
    pub dense_modules: Vec<(String, String)>,
    /// (prefix, in, out) of each Dense module.
    pub(super) dense_dims: Vec<(String, u64, u64)>,
    pub(super) rope: Map<String, Value>,
    /// Leading rows of the position embeddings to drop (XLM-R: pad_token_id + 1).
    pub(super) position_offset: u64,
    /// A classifier's output labels (`{arch}.classifier.output_labels`).
    pub(super) cls_labels: Option<Vec<String>>,
    /// Write BertForSequenceClassification's pooler as `cls` (the CLI's default).
    pub(super) keep_pooler: bool,
}

pub(super) fn get_u64(h: &Map<String, Value>, key: &str) -> Option<u64> {
    let v = h.get(key)?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

pub(super) fn find<'a>(h: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| h.get(*k)).filter(|v| !v.is_null())
}

pub(super) fn need_u32(v: &Value, what: &str) -> Result<u32> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            Error::Config(format!(
                "config.json: {what} must be a non-negative integer, got {v}"
            ))
        })
}

pub(super) fn need_f32(v: &Value, what: &str) -> Result<f32> {
    v.as_f64()
        .map(|f| f as f32)
        .ok_or_else(|| Error::Config(format!("config.json: {what} must be a number, got {v}")))
}

impl Model {
    pub fn load(dir: &Path, opts: &ConvertOptions) -> Result<Self> {
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            return Err(Error::Config(format!(
                "no config.json in {}: pass a Hugging Face model folder (with config.json, \
                 model*.safetensors and the tokenizer files)",
                dir.display()
            )));
        }
        let raw = read_json(&cfg_path)?;
        let raw_config = raw
            .as_object()
            .cloned()
            .ok_or_else(|| Error::Config(format!("{}: not a JSON object", cfg_path.display())))?;
        let mut hparams = raw_config.clone();
        let mut hf_arch = hparams
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(|a| a.as_str())
            .map(str::to_string);
        if let Some(Value::Object(text)) = hparams.get("text_config").cloned() {
            if let Some(a) = text
                .get("architectures")
                .and_then(|a| a.get(0))
                .and_then(|a| a.as_str())
            {
                hf_arch = Some(a.to_string());
            }
            hparams.extend(text);
        }
        let hf_arch = hf_arch.ok_or_else(|| {
            Error::Config(format!(
                "{}: no \"architectures\" entry, so the model type is unknown",
                cfg_path.display()
            ))
        })?;
        let arch = Arch::from_hf(&hf_arch).ok_or_else(|| Error::UnknownArch(hf_arch.clone()))?;
        fill_defaults(arch, &hf_arch, &mut hparams);

        let block_count = find(
            &hparams,
            &["n_layers", "num_hidden_layers", "n_layer", "num_layers"],
        )
        .and_then(Value::as_u64)
        .ok_or_else(|| Error::Config("config.json: no num_hidden_layers".into()))?;

        // rope_parameters, mirrored from the flat keys as TextModel.__init__ does.
        let mut rope = hparams
            .get("rope_parameters")
            .or_else(|| hparams.get("rope_scaling"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if !rope.contains_key("full_attention") && !rope.contains_key("sliding_attention") {
            let theta = find(
                &hparams,
                &[
                    "global_rope_theta",
                    "rope_global_theta",
                    "rope_theta_global",
                    "rope_theta",
                    "rotary_emb_base",
                ],
            )
            .cloned();
            let local = find(
                &hparams,
                &[
                    "local_rope_theta",
                    "rope_local_theta",
                    "rope_theta_local",
                    "swa_rope_theta",
                    "rope_local_base_freq",
                ],
            )
            .cloned();
            if let Some(local) = local {
                let mut m = Map::new();
                m.insert("rope_theta".into(), local);
                rope.insert("sliding_attention".into(), Value::Object(m));
            }
            if let (false, Some(t)) = (rope.contains_key("rope_theta"), theta) {
                rope.insert("rope_theta".into(), t);
            }
            if let (false, Some(t)) = (rope.contains_key("rope_type"), rope.get("type").cloned()) {
                rope.insert("rope_type".into(), t);
            }
            if let (false, Some(v)) = (
                rope.contains_key("partial_rotary_factor"),
                find(
                    &hparams,
                    &["partial_rotary_factor", "rope_pct", "rope_percent"],
                )
                .cloned(),
            ) {
                rope.insert("partial_rotary_factor".into(), v);
            }
            if let (false, Some(v)) = (
                rope.contains_key("original_max_position_embeddings"),
                find(&hparams, &["original_max_position_embeddings"]).cloned(),
            ) {
                rope.insert("original_max_position_embeddings".into(), v);
            }
        }

        let (dense_modules, dense_dims) = if arch == Arch::GemmaEmbedding && opts.dense_modules {
            gemma::dense_modules(dir)?
        } else {
            (Vec::new(), Vec::new())
        };
        let keep_pooler = opts.bert_pooler && hf_arch == "BertForSequenceClassification";
        let mut model = Model {
            arch,
            hf_arch,
            dir: dir.to_path_buf(),
            hparams,
            raw_config,
            block_count,
            dense_modules,
            dense_dims,
            rope,
            position_offset: 0,
            cls_labels: None,
            keep_pooler,
        };
        if arch.is_bert() {
            bert::prepare(&mut model)?;
        }
        model.check_supported()?;
        Ok(model)
    }

    /// Refuses family features the converted file could not express (or
    /// Lamina could not run), naming them.
    fn check_supported(&self) -> Result<()> {
        match self.arch {
            Arch::Qwen2 | Arch::Qwen3 => qwen::check_supported(self),
            Arch::Gemma2 => gemma::check_gemma2(self),
            Arch::Phi3 => phi3::check_supported(self),
            Arch::Bert | Arch::NomicBert => bert::check_supported(self),
            _ => Ok(()),
        }
    }

    pub(super) fn full_rope(&self) -> &Map<String, Value> {
        self.rope
            .get("full_attention")
            .and_then(Value::as_object)
            .unwrap_or(&self.rope)
    }

    /// Every output tensor, in the order the Python converter writes them.
    pub(crate) fn plan(&self, sources: &Sources, vocab: &Vocab, out: OutType) -> Result<Vec<Job>> {
        // generate_extra_tensors() comes first in the Python converter's tensor order.
        let mut jobs: Vec<Job> = self
            .generated_tensors()?
            .into_iter()
            .map(|(name, values)| Job::generated(name, values))
            .collect();
        let n_head =
            find(&self.hparams, &["n_heads", "num_attention_heads"]).and_then(Value::as_u64);
        let n_kv_head =
            find(&self.hparams, &["n_kv_heads", "num_key_value_heads"]).and_then(Value::as_u64);
        for t in sources.extra.iter().chain(&sources.model) {
            let name = &t.name;
            if name.ends_with(".attention.masked_bias")
                || name.ends_with(".attention.bias")
                || name.ends_with(".rotary_emb.inv_freq")
            {
                continue;
            }
            jobs.push(self.job(t, vocab, out, n_head, n_kv_head)?);
        }
        for needed in ["token_embd.weight"] {
            if !jobs.iter().any(|j| j.name == needed) {
                return Err(Error::Tensor(format!(
                    "the checkpoint has no embedding tensor (embed_tokens.weight), so {needed} cannot be written"
                )));
            }
        }
        Ok(jobs)
    }

    fn job(
        &self,
        t: &SourceTensor,
        vocab: &Vocab,
        out: OutType,
        n_head: Option<u64>,
        n_kv_head: Option<u64>,
    ) -> Result<Job> {
        let hf = &t.name;
        let name = self.map_name(hf)?;
        if t.shape.is_empty() || t.shape.len() > 4 || t.shape.contains(&0) {
            return Err(Error::Tensor(format!(
                "tensor {hf} has an unsupported shape {:?}",
                t.shape
            )));
        }
        let mut rows = t.shape[0];
        let mut skip_rows = 0;
        if name == "position_embd.weight" && self.position_offset > 0 {
            skip_rows = usize::try_from(self.position_offset)
                .ok()
                .filter(|&o| o < rows)
                .ok_or_else(|| {
                    Error::Tensor(format!(
                        "tensor {hf} has {rows} rows, too few to drop the first {} \
                         (pad_token_id + 1)",
                        self.position_offset
                    ))
                })?;
        }
        let mut shift = 0.0;
        let mut permute_heads = None;
        if self.arch.is_gemma() {
            if hf.contains("embed_tokens.weight") && self.arch != Arch::Gemma2 {
                rows = rows.min(vocab.len());
            }
            if hf.ends_with("norm.weight") {
                shift = 1.0;
            }
        }
        if self.arch.is_llama() {
            let heads = if hf.ends_with("q_proj.weight") || hf.ends_with("q_proj.bias") {
                n_head
            } else if hf.ends_with("k_proj.weight") || hf.ends_with("k_proj.bias") {
                match (n_head, n_kv_head) {
                    (Some(h), Some(kv)) if h != kv => Some(kv),
                    (h, _) => h,
                }
            } else {
                None
            };
            if let Some(h) = heads {
                let h = h as usize;
                if h == 0 || !rows.is_multiple_of(2 * h) {
                    return Err(Error::Tensor(format!(
                        "tensor {hf} has {rows} rows, which do not split into {h} heads of rotary pairs: \
                         check num_attention_heads / num_key_value_heads in config.json"
                    )));
                }
                permute_heads = Some(h);
            }
        }
        let mut shape: Vec<u64> = t.shape.iter().rev().map(|&d| d as u64).collect();
        let last = shape.len() - 1;
        shape[last] = (rows - skip_rows) as u64;
        let n_dims = shape.len();
        // gguf-py keeps position and token-type embeddings in f32 whatever is asked.
        let always_f32 = matches!(name.as_str(), "position_embd.weight" | "token_types.weight");
        let ggml_type = if n_dims <= 1
            || always_f32
            || name.ends_with("_norm.weight")
            || !name.ends_with(".weight")
        {
            GgmlType::F32
        } else {
            out.ggml_type()
        };
        Ok(Job {
            src: t.at.clone(),
            name,
            shape,
            ggml_type,
            rows,
            skip_rows,
            shift,
            permute_heads,
            values: None,
        })
    }

    /// Tensors computed from the configuration (`generate_extra_tensors`).
    fn generated_tensors(&self) -> Result<Vec<(String, Vec<f32>)>> {
        match self.arch {
            Arch::Llama | Arch::Granite => llama::generated_tensors(self),
            Arch::Phi3 => phi3::generated_tensors(self),
            _ => Ok(Vec::new()),
        }
    }

    /// Metadata the Python converter writes while it prepares the tensors,
    /// that is before `general.type` and the rest of `general.*`.
    pub fn write_early_params(&self, b: &mut GgufBuilder) -> Result<()> {
        match self.arch {
            Arch::Phi3 => phi3::write_early_params(self, b),
            _ => Ok(()),
        }
    }

    /// The architecture's hyper-parameter metadata (set_gguf_parameters).
    pub fn write_params(&self, b: &mut GgufBuilder, file_type: u32) -> Result<()> {
        match self.arch {
            Arch::Gemma2 => return gemma::write_gemma2_params(self, b, file_type),
            Arch::Phi3 => return phi3::write_params(self, b, file_type),
            _ => {}
        }
        self.write_base_params(b, file_type)?;
        match self.arch {
            Arch::Gemma3 | Arch::GemmaEmbedding => gemma::write_gemma3_params(self, b),
            Arch::Llama | Arch::Granite => llama::write_params(self, b),
            Arch::Qwen2 | Arch::Qwen3 => qwen::write_params(self, b),
            Arch::Bert | Arch::NomicBert => bert::write_params(self, b),
            Arch::Gemma2 | Arch::Phi3 => Ok(()),
        }
    }

    /// `TextModel.set_gguf_parameters`, which most families extend.
    fn write_base_params(&self, b: &mut GgufBuilder, file_type: u32) -> Result<()> {
        let a = self.arch.name();
        let h = &self.hparams;
        let k = |s: &str| format!("{a}.{s}");
        b.set(
            k("block_count"),
            OwnedValue::U32(
                u32::try_from(self.block_count)
                    .map_err(|_| Error::Config("num_hidden_layers is too large".into()))?,
            ),
        )?;
        if let Some(v) = find(
            h,
            &[
                "max_position_embeddings",
                "n_ctx",
                "n_positions",
                "max_length",
                "max_sequence_length",
                "model_max_length",
            ],
        ) {
            b.set(
                k("context_length"),
                OwnedValue::U32(need_u32(v, "max_position_embeddings")?),
            )?;
        }
        if let Some(v) = find(h, &["hidden_size", "n_embd", "dim"]) {
            b.set(
                k("embedding_length"),
                OwnedValue::U32(need_u32(v, "hidden_size")?),
            )?;
        }
        if let Some(v) = find(
            h,
            &[
                "prefix_dense_intermediate_size",
                "dense_intermediate_size",
                "intermediate_size",
                "n_inner",
                "hidden_dim",
            ],
        ) {
            b.set(
                k("feed_forward_length"),
                OwnedValue::U32(need_u32(v, "intermediate_size")?),
            )?;
        }
        if let Some(v) = find(h, &["num_attention_heads", "n_head", "n_heads"]) {
            b.set(
                k("attention.head_count"),
                OwnedValue::U32(need_u32(v, "num_attention_heads")?),
            )?;
        }
        if let Some(v) = find(h, &["num_key_value_heads", "n_kv_heads"]) {
            b.set(
                k("attention.head_count_kv"),
                OwnedValue::U32(need_u32(v, "num_key_value_heads")?),
            )?;
        }
        if h.get("is_causal") == Some(&Value::Bool(false)) {
            b.set(k("attention.causal"), OwnedValue::Bool(false))?;
        }
        let rope = self.full_rope();
        if let Some(rope_type) = rope.get("rope_type").and_then(Value::as_str) {
            let factor = rope.get("factor").and_then(Value::as_f64);
            match (rope_type, factor) {
                ("linear", Some(f)) => {
                    b.set(k("rope.scaling.type"), OwnedValue::string("linear"))?;
                    b.set(k("rope.scaling.factor"), OwnedValue::F32(f as f32))?;
                }
                ("default", _) | ("llama3", _) | ("dynamic", _) => {}
                (t, _) => {
                    return Err(Error::Unsupported(format!(
                        "rope scaling type {t:?} is not supported by lamina convert yet"
                    )));
                }
            }
        }
        if let Some(v) = rope.get("rope_theta").filter(|v| !v.is_null()) {
            b.set(
                k("rope.freq_base"),
                OwnedValue::F32(need_f32(v, "rope_theta")?),
            )?;
        }
        if let Some(v) = self
            .rope
            .get("sliding_attention")
            .and_then(|s| s.get("rope_theta"))
            .filter(|v| !v.is_null())
        {
            b.set(
                k("rope.freq_base_swa"),
                OwnedValue::F32(need_f32(v, "rope_local_base_freq")?),
            )?;
        }
        if let Some(v) = find(h, &["rms_norm_eps", "norm_eps"]) {
            b.set(
                k("attention.layer_norm_rms_epsilon"),
                OwnedValue::F32(need_f32(v, "rms_norm_eps")?),
            )?;
        }
        if let Some(v) = find(h, &["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"]) {
            b.set(
                k("attention.layer_norm_epsilon"),
                OwnedValue::F32(need_f32(v, "layer_norm_eps")?),
            )?;
        }
        if find(h, &["num_local_experts", "num_experts", "n_routed_experts"]).is_some() {
            return Err(Error::Unsupported(
                "mixture-of-experts checkpoints are not supported".into(),
            ));
        }
        // GraniteModel drops head_dim from the hyper-parameters before this runs.
        if let Some(v) = h
            .get("head_dim")
            .filter(|v| !v.is_null() && self.arch != Arch::Granite)
        {
            let d = need_u32(v, "head_dim")?;
            b.set(k("attention.key_length"), OwnedValue::U32(d))?;
            b.set(k("attention.value_length"), OwnedValue::U32(d))?;
        }
        b.set("general.file_type", OwnedValue::U32(file_type))?;

        Ok(())
    }

    /// `vocab_size` from the (merged) config, if any.
    pub fn vocab_size(&self, keys: &[&str]) -> Option<usize> {
        find(&self.hparams, keys)
            .and_then(Value::as_u64)
            .map(|v| v as usize)
    }
}

/// Values transformers' config classes supply when config.json omits them
/// (the Python converter reads `AutoConfig.from_pretrained(...).to_dict()`).
fn fill_defaults(arch: Arch, hf_arch: &str, h: &mut Map<String, Value>) {
    match arch {
        Arch::Llama | Arch::Granite => llama::fill_defaults(hf_arch, h),
        Arch::Gemma3 | Arch::GemmaEmbedding | Arch::Gemma2 => gemma::fill_defaults(arch, h),
        Arch::Qwen2 | Arch::Qwen3 => qwen::fill_defaults(arch, h),
        Arch::Phi3 => phi3::fill_defaults(h),
        Arch::Bert | Arch::NomicBert => bert::fill_defaults(arch, hf_arch, h),
    }
}

/// Sets `key` to `v` unless config.json gave it.
pub(super) fn default(h: &mut Map<String, Value>, key: &str, v: Value) {
    if !h.contains_key(key) {
        h.insert(key.to_string(), v);
    }
}

/// An absent (or null) `num_key_value_heads` becomes `num_attention_heads`.
pub(super) fn default_kv_heads(h: &mut Map<String, Value>) {
    if h.get("num_key_value_heads").is_none_or(Value::is_null)
        && let Some(n) = h.get("num_attention_heads").cloned()
    {
        h.insert("num_key_value_heads".into(), n);
    }
}

/// A [`Model`] loaded from a folder holding only `config`, for unit tests.
#[cfg(test)]
pub(super) fn test_model(config: Value) -> Result<(tempfile::TempDir, Model)> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("config.json"), config.to_string()).expect("write config");
    let opts = ConvertOptions {
        input: dir.path().to_path_buf(),
        output: dir.path().join("out.gguf"),
        out_type: OutType::F32,
        dense_modules: false,
        bert_pooler: false,
        model_id: None,
    };
    let model = Model::load(dir.path(), &opts)?;
    Ok((dir, model))
}

/// The metadata keys and values `write` sets, for unit tests.
#[cfg(test)]
pub(super) fn written(
    write: impl FnOnce(&mut GgufBuilder) -> Result<()>,
) -> Vec<(String, OwnedValue)> {
    let mut b = GgufBuilder::new();
    write(&mut b).expect("metadata written");
    b.metadata().to_vec()
}
