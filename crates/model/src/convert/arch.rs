//! Architectures: which Hugging Face class becomes which GGUF architecture,
//! the hyper-parameter metadata, and the tensor-name mapping, following
//! `conversion/base.py`, `gemma.py` and `llama.py`.

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
    /// `LlamaForCausalLM`.
    Llama,
}

impl Arch {
    /// The `general.architecture` name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::GemmaEmbedding => "gemma-embedding",
            Arch::Gemma3 => "gemma3",
            Arch::Llama => "llama",
        }
    }

    /// The architecture for a `config.json` `architectures[0]` entry.
    pub fn from_hf(name: &str) -> Option<Self> {
        match name {
            "Gemma3TextModel" => Some(Arch::GemmaEmbedding),
            "Gemma3ForCausalLM" => Some(Arch::Gemma3),
            "LlamaForCausalLM" | "LLaMAForCausalLM" => Some(Arch::Llama),
            _ => None,
        }
    }

    fn is_gemma(self) -> bool {
        matches!(self, Arch::GemmaEmbedding | Arch::Gemma3)
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
    pub dir: std::path::PathBuf,
    /// config.json with `text_config` merged in and transformers' defaults filled.
    pub hparams: Map<String, Value>,
    /// config.json exactly as written.
    raw_config: Map<String, Value>,
    pub block_count: u64,
    /// (module folder, tensor prefix) of each sentence-transformers Dense module.
    pub dense_modules: Vec<(String, String)>,
    /// (prefix, in, out) of each Dense module.
    dense_dims: Vec<(String, u64, u64)>,
    rope: Map<String, Value>,
}

fn get_u64(h: &Map<String, Value>, key: &str) -> Option<u64> {
    let v = h.get(key)?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

fn find<'a>(h: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| h.get(*k)).filter(|v| !v.is_null())
}

fn need_u32(v: &Value, what: &str) -> Result<u32> {
    v.as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            Error::Config(format!(
                "config.json: {what} must be a non-negative integer, got {v}"
            ))
        })
}

fn need_f32(v: &Value, what: &str) -> Result<f32> {
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
        let arch = Arch::from_hf(&hf_arch).ok_or(Error::UnknownArch(hf_arch))?;
        fill_defaults(arch, &mut hparams);

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
                rope.contains_key("original_max_position_embeddings"),
                find(&hparams, &["original_max_position_embeddings"]).cloned(),
            ) {
                rope.insert("original_max_position_embeddings".into(), v);
            }
        }

        let mut dense_modules = Vec::new();
        let mut dense_dims = Vec::new();
        if arch == Arch::GemmaEmbedding && opts.dense_modules {
            let modules_file = dir.join("modules.json");
            if modules_file.is_file() {
                let mods = read_json(&modules_file)?;
                for m in mods.as_array().into_iter().flatten() {
                    let (Some(ty), Some(path)) = (
                        m.get("type").and_then(Value::as_str),
                        m.get("path").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    if !ty.ends_with("Dense") || !dir.join(path).join("model.safetensors").is_file()
                    {
                        continue;
                    }
                    let prefix = if path == "2_Dense" {
                        "dense_2"
                    } else {
                        "dense_3"
                    };
                    dense_modules.push((path.to_string(), prefix.to_string()));
                    let conf = dir.join(path).join("config.json");
                    if conf.is_file() {
                        let c = read_json(&conf)?;
                        if let (Some(i), Some(o)) = (
                            c.get("in_features").and_then(Value::as_u64),
                            c.get("out_features").and_then(Value::as_u64),
                        ) {
                            dense_dims.retain(|(p, _, _): &(String, u64, u64)| p != prefix);
                            dense_dims.push((prefix.to_string(), i, o));
                        }
                    }
                }
            }
        }
        Ok(Model {
            arch,
            dir: dir.to_path_buf(),
            hparams,
            raw_config,
            block_count,
            dense_modules,
            dense_dims,
            rope,
        })
    }

    fn full_rope(&self) -> &Map<String, Value> {
        self.rope
            .get("full_attention")
            .and_then(Value::as_object)
            .unwrap_or(&self.rope)
    }

    /// The renames of `filter_tensors` (None: skip the tensor).
    pub fn filter_name(&self, name: &str) -> Option<String> {
        const SKIP_PREFIX: [&str; 10] = [
            "mlp",
            "vit.",
            "vpm.",
            "siglip2.",
            "conformer.",
            "merger.",
            "resampler.",
            "sound_encoder.",
            "sound_projection.",
            "speech_embeddings.",
        ];
        const SKIP_SUB: [&str; 16] = [
            "visual.",
            "vision.",
            "audio.",
            "talker.",
            "vision_",
            "audio_",
            "token2wav.",
            "code2wav.",
            "projector.",
            "pre_mm_projector_norm",
            "image_newline",
            "view_seperator",
            "patch_embed",
            "patch_merger.",
            "patch_merge_mlp.",
            "model.connector.",
        ];
        let mut name = name.to_string();
        if self.arch == Arch::Llama && name.contains("text_model.") {
            name = name.replace("text_model.", "");
        }
        if SKIP_PREFIX.iter().any(|p| name.starts_with(p))
            || SKIP_SUB.iter().any(|s| name.contains(s))
        {
            return None;
        }
        if name.ends_with("e_score_correction_bias") {
            name = name.replace("e_score_correction_bias", "e_score_correction.bias");
        }
        if name.contains("language_model.") {
            name = name.replace("language_model.", "");
        }
        Some(name)
    }

    /// Maps a Hugging Face tensor name to its GGUF name (gguf-py's TensorNameMap
    /// restricted to the tensors these architectures have).
    fn map_name(&self, name: &str) -> Result<String> {
        let fail = || {
            Error::Tensor(format!(
                "cannot map tensor {name:?} to a {} GGUF tensor: the checkpoint has a tensor \
                 this architecture does not use",
                self.arch.name()
            ))
        };
        let (base, suffix) = if let Some(b) = name.strip_suffix(".weight") {
            (b, ".weight")
        } else if let Some(b) = name.strip_suffix(".bias") {
            (b, ".bias")
        } else {
            return Err(fail());
        };
        let stripped = base.strip_prefix("model.").unwrap_or(base);
        let mapped: String = match stripped {
            "embed_tokens" => "token_embd".into(),
            "norm" => "output_norm".into(),
            _ if base == "lm_head" => "output".into(),
            "dense_2" | "dense_3" if self.arch == Arch::GemmaEmbedding => stripped.into(),
            "rope_freqs" if self.arch == Arch::Llama => "rope_freqs".into(),
            _ => {
                let rest = stripped.strip_prefix("layers.").ok_or_else(fail)?;
                let (bid, leaf) = rest.split_once('.').ok_or_else(fail)?;
                let bid: u64 = bid.parse().map_err(|_| fail())?;
                if bid >= self.block_count {
                    return Err(fail());
                }
                let gemma = self.arch.is_gemma();
                let leaf = match leaf {
                    "input_layernorm" => "attn_norm",
                    "self_attn.q_proj" => "attn_q",
                    "self_attn.k_proj" => "attn_k",
                    "self_attn.v_proj" => "attn_v",
                    "self_attn.o_proj" => "attn_output",
                    "self_attn.q_norm" if gemma => "attn_q_norm",
                    "self_attn.k_norm" if gemma => "attn_k_norm",
                    "post_attention_layernorm" if gemma => "post_attention_norm",
                    "post_attention_layernorm" => "ffn_norm",
                    "pre_feedforward_layernorm" if gemma => "ffn_norm",
                    "post_feedforward_layernorm" if gemma => "post_ffw_norm",
                    "mlp.gate_proj" => "ffn_gate",
                    "mlp.up_proj" => "ffn_up",
                    "mlp.down_proj" => "ffn_down",
                    _ => return Err(fail()),
                };
                format!("blk.{bid}.{leaf}")
            }
        };
        Ok(format!("{mapped}{suffix}"))
    }

    /// Every output tensor, in the order the Python converter writes them.
    pub(crate) fn plan(&self, sources: &Sources, vocab: &Vocab, out: OutType) -> Result<Vec<Job>> {
        let mut jobs = Vec::new();
        if self.arch == Arch::Llama
            && self
                .full_rope()
                .get("rope_type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.eq_ignore_ascii_case("llama3"))
        {
            return Err(Error::Unsupported(
                "Llama 3 rope scaling (rope_type \"llama3\", the rope_freqs tensor) is not supported yet".into(),
            ));
        }
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
        let mut shift = 0.0;
        let mut permute_heads = None;
        if self.arch.is_gemma() {
            if hf.contains("embed_tokens.weight") {
                rows = rows.min(vocab.len());
            }
            if hf.ends_with("norm.weight") {
                shift = 1.0;
            }
        }
        if self.arch == Arch::Llama {
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
        shape[last] = rows as u64;
        let n_dims = shape.len();
        let ggml_type =
            if n_dims <= 1 || name.ends_with("_norm.weight") || !name.ends_with(".weight") {
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
            shift,
            permute_heads,
        })
    }

    /// The architecture's hyper-parameter metadata (set_gguf_parameters).
    pub fn write_params(&self, b: &mut GgufBuilder, file_type: u32) -> Result<()> {
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
        if let Some(v) = h.get("head_dim").filter(|v| !v.is_null()) {
            let d = need_u32(v, "head_dim")?;
            b.set(k("attention.key_length"), OwnedValue::U32(d))?;
            b.set(k("attention.value_length"), OwnedValue::U32(d))?;
        }
        b.set("general.file_type", OwnedValue::U32(file_type))?;

        match self.arch {
            Arch::Gemma3 | Arch::GemmaEmbedding => {
                let get = |key: &str| h.get(key).filter(|v| !v.is_null());
                b.set(
                    k("context_length"),
                    OwnedValue::U32(
                        get("max_position_embeddings")
                            .map_or(Ok(131072), |v| need_u32(v, "max_position_embeddings"))?,
                    ),
                )?;
                b.set(
                    k("attention.head_count"),
                    OwnedValue::U32(
                        get("num_attention_heads")
                            .map_or(Ok(8), |v| need_u32(v, "num_attention_heads"))?,
                    ),
                )?;
                b.set(
                    k("attention.layer_norm_rms_epsilon"),
                    OwnedValue::F32(
                        get("rms_norm_eps").map_or(Ok(1e-6), |v| need_f32(v, "rms_norm_eps"))?,
                    ),
                )?;
                let hd = get("head_dim").map_or(Ok(256), |v| need_u32(v, "head_dim"))?;
                b.set(k("attention.key_length"), OwnedValue::U32(hd))?;
                b.set(k("attention.value_length"), OwnedValue::U32(hd))?;
                let theta = rope
                    .get("rope_theta")
                    .filter(|v| !v.is_null())
                    .map_or(Ok(1_000_000.0), |v| need_f32(v, "rope_theta"))?;
                b.set(k("rope.freq_base"), OwnedValue::F32(theta))?;
                if get("attn_logit_softcapping").is_some() {
                    return Err(Error::Config(
                        "config.json: Gemma 3 has no attn_logit_softcapping".into(),
                    ));
                }
                if let Some(v) =
                    get("final_logit_softcapping").filter(|v| v.as_f64().is_some_and(|f| f != 0.0))
                {
                    b.set(
                        k("final_logit_softcapping"),
                        OwnedValue::F32(need_f32(v, "final_logit_softcapping")?),
                    )?;
                }
                if get("sliding_window_pattern").and_then(Value::as_u64) != Some(1) {
                    let sw = get("sliding_window")
                        .ok_or_else(|| Error::Config("config.json: no sliding_window".into()))?;
                    b.set(
                        k("attention.sliding_window"),
                        OwnedValue::U32(need_u32(sw, "sliding_window")?),
                    )?;
                }
                b.set(
                    k("attention.head_count_kv"),
                    OwnedValue::U32(
                        get("num_key_value_heads")
                            .map_or(Ok(4), |v| need_u32(v, "num_key_value_heads"))?,
                    ),
                )?;
                if self.arch == Arch::GemmaEmbedding {
                    let sw = self
                        .raw_config
                        .get("sliding_window")
                        .filter(|v| !v.is_null())
                        .ok_or_else(|| {
                            Error::Config(
                                "config.json: sliding_window not found; EmbeddingGemma needs it"
                                    .into(),
                            )
                        })?;
                    b.set(
                        k("attention.sliding_window"),
                        OwnedValue::U32(need_u32(sw, "sliding_window")?),
                    )?;
                    for (prefix, i, o) in &self.dense_dims {
                        let conv = |n: u64| {
                            u32::try_from(n).map_err(|_| {
                                Error::Config(format!("{prefix}: feature count {n} too large"))
                            })
                        };
                        b.set(k(&format!("{prefix}_feat_in")), OwnedValue::U32(conv(*i)?))?;
                        b.set(k(&format!("{prefix}_feat_out")), OwnedValue::U32(conv(*o)?))?;
                    }
                    self.write_pooling(b)?;
                }
            }
            Arch::Llama => {
                let vs = h
                    .get("vocab_size")
                    .ok_or_else(|| Error::Config("config.json: no vocab_size".into()))?;
                b.set(
                    k("vocab_size"),
                    OwnedValue::U32(need_u32(vs, "vocab_size")?),
                )?;
                let rope_dim = match h.get("head_dim").filter(|v| !v.is_null()) {
                    Some(v) => need_u32(v, "head_dim")?,
                    None => {
                        let hidden = get_u64(h, "hidden_size")
                            .ok_or_else(|| Error::Config("config.json: no hidden_size".into()))?;
                        let heads = get_u64(h, "num_attention_heads")
                            .filter(|&n| n > 0)
                            .ok_or_else(|| {
                                Error::Config("config.json: no num_attention_heads".into())
                            })?;
                        u32::try_from(hidden / heads)
                            .map_err(|_| Error::Config("head size too large".into()))?
                    }
                };
                b.set(k("rope.dimension_count"), OwnedValue::U32(rope_dim))?;
            }
        }
        Ok(())
    }

    fn write_pooling(&self, b: &mut GgufBuilder) -> Result<()> {
        let modules_file = self.dir.join("modules.json");
        if !modules_file.is_file() {
            return Ok(());
        }
        let mods = read_json(&modules_file)?;
        let Some(path) = mods
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| {
                m.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("Pooling"))
            })
            .and_then(|m| m.get("path").and_then(Value::as_str))
        else {
            return Ok(());
        };
        let p = read_json(&self.dir.join(path).join("config.json"))?;
        let on = |key: &str| p.get(key).and_then(Value::as_bool).unwrap_or(false);
        let ty = if on("pooling_mode_mean_tokens") {
            1
        } else if on("pooling_mode_cls_token") {
            2
        } else if on("pooling_mode_lasttoken") {
            3
        } else {
            match p.get("pooling_mode").and_then(Value::as_str) {
                Some("mean") => 1,
                Some("cls") => 2,
                Some("lasttoken") => 3,
                _ => {
                    return Err(Error::Unsupported(format!(
                        "{path}/config.json: only mean, CLS and last-token pooling are supported"
                    )));
                }
            }
        };
        b.set(
            format!("{}.pooling_type", self.arch.name()),
            OwnedValue::U32(ty),
        )?;
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
fn fill_defaults(arch: Arch, h: &mut Map<String, Value>) {
    let mut default = |key: &str, v: Value| {
        if !h.contains_key(key) {
            h.insert(key.to_string(), v);
        }
    };
    match arch {
        Arch::Llama => {
            default("max_position_embeddings", Value::from(2048));
            default("rms_norm_eps", Value::from(1e-6));
            default("rope_theta", Value::from(10000.0));
            default("rope_scaling", Value::Null);
        }
        Arch::Gemma3 | Arch::GemmaEmbedding => {
            default("max_position_embeddings", Value::from(131072));
            default("rms_norm_eps", Value::from(1e-6));
            default("rope_theta", Value::from(1_000_000.0));
            default("rope_local_base_freq", Value::from(10000.0));
            default("head_dim", Value::from(256));
            default("sliding_window", Value::from(4096));
            default("rope_scaling", Value::Null);
        }
    }
    if arch == Arch::Llama
        && !h.contains_key("num_key_value_heads")
        && let Some(n) = h.get("num_attention_heads").cloned()
    {
        h.insert("num_key_value_heads".into(), n);
    }
    if arch == Arch::Llama
        && !h.contains_key("head_dim")
        && let (Some(hid), Some(n)) = (get_u64(h, "hidden_size"), get_u64(h, "num_attention_heads"))
        && n > 0
    {
        h.insert("head_dim".into(), Value::from(hid / n));
    }
    // Gemma3TextConfig halves the sliding window of bidirectional models
    // (transformers#40700); the EmbeddingGemma path writes the original back.
    if arch.is_gemma()
        && h.get("use_bidirectional_attention") == Some(&Value::Bool(true))
        && let Some(sw) = get_u64(h, "sliding_window")
    {
        h.insert("sliding_window".into(), Value::from(sw / 2 + 1));
    }
}
