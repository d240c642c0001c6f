//! Hyper-parameters read from the architecture-prefixed GGUF keys, with
//! llama.cpp's defaults where a key is absent.

use lamina_gguf::{Gguf, Value};
use lamina_kernels::ops::RopeLayout;

use crate::ModelError;
use crate::family::{self, AttnScale, Cap, Family, Head, InputScale, Windows};

/// How token states become one output per text: llama.cpp's pooling enum,
/// read from `{arch}.pooling_type` (the family's default when absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// No pooling: one vector per token.
    None,
    /// The mean of the text's token states.
    Mean,
    /// The first token's state (`[CLS]`, `<s>`).
    Cls,
    /// The last token's state (causal embedders such as Qwen3-Embedding).
    Last,
    /// The first token through a classification head: relevance logits
    /// (cross-encoder rerankers).
    Rank,
}

impl Pooling {
    /// The value of llama.cpp's `LLAMA_POOLING_TYPE_*` enum in a GGUF.
    pub fn from_gguf_value(v: i128) -> Option<Pooling> {
        Some(match v {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// The name llama.cpp's `--pooling` flag takes.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// The pooling named `name` (as llama.cpp's `--pooling` flag takes it).
    pub fn from_name(name: &str) -> Option<Pooling> {
        [
            Pooling::None,
            Pooling::Mean,
            Pooling::Cls,
            Pooling::Last,
            Pooling::Rank,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a sliding-window layer masks keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Every key the attention type allows.
    None,
    /// Causal: key `j` visible to query `i` when `i - j < n`.
    Trailing(usize),
    /// Bidirectional: visible when `|i - j| ≤ n / 2`.
    Symmetric(usize),
}

/// Everything the forward pass needs to know about the network's shape.
#[derive(Clone, Debug)]
pub struct HParams {
    /// What sets the architecture apart ([`crate::family`]).
    pub family: &'static Family,
    /// The architecture name as written in the file.
    pub arch_name: String,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    /// Training context (`context_length`).
    pub n_ctx_train: usize,
    /// Epsilon of the norms: RMSNorm's (`attention.layer_norm_rms_epsilon`),
    /// or LayerNorm's (`attention.layer_norm_epsilon`) in encoder families.
    pub rms_eps: f32,
    pub rope_base: f32,
    /// RoPE base of sliding-window layers.
    pub rope_base_swa: f32,
    pub rope_dims: usize,
    pub rope_layout: RopeLayout,
    /// Linear RoPE scaling (`1 / rope.scaling.factor`).
    pub rope_freq_scale: f32,
    /// Multiplier of RoPE's cosines and sines (`rope.scaling.attn_factor`).
    pub rope_attn_factor: f32,
    /// The context the model was trained at before RoPE scaling
    /// (`rope.scaling.original_context_length`): LongRoPE's long factors
    /// apply to contexts beyond it.
    pub n_ctx_orig: usize,
    /// Per layer: does it use the sliding window?
    pub swa_layers: Vec<bool>,
    /// The window of sliding-window layers.
    pub window: Window,
    /// Bidirectional attention (embedding models).
    pub causal: bool,
    /// Score multiplier: `1/√head_dim` unless the file says otherwise.
    pub attn_scale: f32,
    /// Multiplier of the token embeddings (Gemma: √n_embd; Granite: its key).
    pub embd_scale: f32,
    /// Granite: multiplier of each block's output before the residual add.
    pub residual_scale: f32,
    /// Granite: logits are divided by this.
    pub logit_scale: f32,
    pub final_logit_softcap: Option<f32>,
    pub attn_logit_softcap: Option<f32>,
    /// What the last hidden state feeds: the family's head, except that a
    /// decoder file with a `pooling_type` key (Qwen3-Embedding) is pooled.
    pub head: Head,
    /// How an embedding model pools (`pooling_type`, else the family's default).
    pub pooling: Pooling,
    /// Rows of `token_types` (segment embeddings) in encoder families; 0 elsewhere.
    pub n_token_types: usize,
}

struct Keys<'g, D> {
    g: &'g Gguf<D>,
    arch: String,
}

impl<D: AsRef<[u8]>> Keys<'_, D> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }
    fn value(&self, k: &str) -> Option<Value<'_>> {
        self.g.get(&self.key(k))
    }
    fn uint(&self, k: &str) -> Result<Option<usize>, ModelError> {
        match self.value(k) {
            None => Ok(None),
            Some(Value::Array(a)) => {
                // Per-layer arrays (feed_forward_length, head_count): all equal here.
                let v = a.to_i64_vec().unwrap_or_default();
                let first = v.first().copied().unwrap_or(0);
                if v.iter().any(|&x| x != first) {
                    return Err(ModelError::Unsupported(format!(
                        "{} varies per layer ({v:?}); only uniform layers are supported",
                        self.key(k)
                    )));
                }
                usize::try_from(first).map(Some).map_err(|_| self.bad(k))
            }
            Some(v) => v
                .as_integer()
                .and_then(|i| usize::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| self.bad(k)),
        }
    }
    fn need_uint(&self, k: &str) -> Result<usize, ModelError> {
        self.uint(k)?
            .ok_or_else(|| ModelError::MissingKey(self.key(k)))
    }
    fn float(&self, k: &str) -> Result<Option<f32>, ModelError> {
        match self.value(k) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|f| Some(f as f32))
                .ok_or_else(|| self.bad(k)),
        }
    }
    fn bad(&self, k: &str) -> ModelError {
        ModelError::BadKey(self.key(k))
    }
}

/// A size that must be positive and sane before buffers are sized from it.
fn sane(name: &str, v: usize, max: usize) -> Result<usize, ModelError> {
    if v == 0 || v > max {
        return Err(ModelError::Unsupported(format!(
            "{name} = {v} is outside 1..={max}"
        )));
    }
    Ok(v)
}

impl HParams {
    /// Reads the hyper-parameters; `n_vocab` comes from the token embedding's rows.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<HParams, ModelError> {
        let arch_name = g.architecture()?.to_string();
        let fam =
            family::lookup(&arch_name).ok_or_else(|| ModelError::UnknownArch(arch_name.clone()))?;
        let k = Keys {
            g,
            arch: arch_name.clone(),
        };
        if let Some(n) = k.uint("expert_count")?.filter(|&n| n > 0) {
            return Err(ModelError::Unsupported(format!(
                "{arch_name} with a mixture of {n} experts (expert_count): MoE layers are not \
                 implemented"
            )));
        }
        let n_layer = sane("block_count", k.need_uint("block_count")?, 1024)?;
        let n_embd = sane(
            "embedding_length",
            k.need_uint("embedding_length")?,
            1 << 16,
        )?;
        let n_ff = sane(
            "feed_forward_length",
            k.need_uint("feed_forward_length")?,
            1 << 18,
        )?;
        let n_head = sane(
            "attention.head_count",
            k.need_uint("attention.head_count")?,
            1024,
        )?;
        let n_head_kv = sane(
            "attention.head_count_kv",
            k.uint("attention.head_count_kv")?.unwrap_or(n_head),
            n_head,
        )?;
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::Unsupported(format!(
                "{n_head} heads are not a multiple of {n_head_kv} kv heads"
            )));
        }
        let head_dim = sane(
            "attention.key_length",
            k.uint("attention.key_length")?.unwrap_or(n_embd / n_head),
            lamina_kernels::attention::MAX_HEAD_DIM,
        )?;
        if let Some(vl) = k.uint("attention.value_length")?
            && vl != head_dim
        {
            return Err(ModelError::Unsupported(format!(
                "value_length {vl} differs from key_length {head_dim}"
            )));
        }
        let n_vocab = g
            .tensor("token_embd.weight")
            .map(|t| t.n_rows() as usize)
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        if n_vocab == 0 {
            return Err(ModelError::Input(
                "token_embd.weight has no rows: the model has an empty vocabulary".into(),
            ));
        }
        let n_ctx_train = k.uint("context_length")?.unwrap_or(2048).max(1);
        let eps_key = if fam.encoder.is_some() {
            "attention.layer_norm_epsilon"
        } else {
            "attention.layer_norm_rms_epsilon"
        };
        let rms_eps = k
            .float(eps_key)?
            .ok_or_else(|| ModelError::MissingKey(k.key(eps_key)))?;
        if !(rms_eps.is_finite() && rms_eps >= 0.0) {
            return Err(k.bad(eps_key));
        }
        let pooling_key = match k.value("pooling_type") {
            None => None,
            Some(v) => Some(
                v.as_integer()
                    .and_then(Pooling::from_gguf_value)
                    .ok_or_else(|| k.bad("pooling_type"))?,
            ),
        };
        let head = match (fam.head, pooling_key) {
            (Head::Lm | Head::TiedLm, Some(_)) => Head::Pooled,
            (h, _) => h,
        };
        // A cross-encoder's file has a classification head and, as the
        // pinned converter writes it, no pooling_type: llama.cpp needs
        // `--pooling rank` for it, here the head says it.
        let pooling = match pooling_key {
            Some(p) => p,
            None if fam.encoder.is_some() && g.tensor("cls.output.weight").is_some() => {
                Pooling::Rank
            }
            None => fam.pooling,
        };
        let n_token_types = if fam.encoder.is_some() {
            g.tensor("token_types.weight")
                .map_or(0, |t| t.n_rows() as usize)
        } else {
            0
        };
        let rope_base = k.float("rope.freq_base")?.unwrap_or(10_000.0);
        let rope_base_swa = match k.float("rope.freq_base_swa")? {
            Some(b) => b,
            None if fam.swa_rope_base_is_global => rope_base,
            None => 10_000.0,
        };
        let rope_dims = k.uint("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
            return Err(ModelError::Unsupported(format!(
                "rope.dimension_count {rope_dims} with head_dim {head_dim}"
            )));
        }
        let rope_freq_scale = match g.get(&k.key("rope.scaling.type")).and_then(|v| v.as_str()) {
            None | Some("none") => 1.0,
            Some("linear") => 1.0 / k.float("rope.scaling.factor")?.unwrap_or(1.0),
            Some(other) => {
                return Err(ModelError::Unsupported(format!(
                    "rope scaling {other:?} (only linear, Llama 3's rope_freqs and Phi-3's \
                     LongRoPE factors are supported)"
                )));
            }
        };
        if !(rope_freq_scale.is_finite() && rope_freq_scale > 0.0) {
            return Err(k.bad("rope.scaling.factor"));
        }
        let rope_attn_factor = k.float("rope.scaling.attn_factor")?.unwrap_or(1.0);
        if !(rope_attn_factor.is_finite() && rope_attn_factor > 0.0) {
            return Err(k.bad("rope.scaling.attn_factor"));
        }
        let n_ctx_orig = k
            .uint("rope.scaling.original_context_length")?
            .unwrap_or(n_ctx_train);

        let (swa_layers, window) = windows(&k, fam.windows, n_layer)?;
        let causal = !fam.bidirectional
            && g.get(&k.key("attention.causal"))
                .and_then(|v| match v {
                    Value::Bool(b) => Some(b),
                    _ => None,
                })
                .unwrap_or(true);
        let default_scale = 1.0 / (head_dim as f32).sqrt();
        let attn_scale = match fam.attn_scale {
            AttnScale::HeadDim => default_scale,
            AttnScale::Key => k
                .float("attention.scale")?
                .filter(|&s| s != 0.0)
                .unwrap_or(default_scale),
            AttnScale::Gemma { large_n_layer } if n_layer == large_n_layer => {
                1.0 / ((n_embd / n_head) as f32).sqrt()
            }
            AttnScale::Gemma { .. } => default_scale,
        };
        let embd_scale = match fam.input_scale {
            InputScale::One => 1.0,
            InputScale::SqrtWidth => (n_embd as f32).sqrt(),
            InputScale::Key => k.float("embedding_scale")?.unwrap_or(1.0),
        };
        let cap = |c: Cap, key: &str| -> Result<Option<f32>, ModelError> {
            Ok(match c {
                Cap::Never => None,
                Cap::Key { default } => Some(k.float(key)?.unwrap_or(default)).filter(|&c| c > 0.0),
            })
        };
        let (residual_scale, logit_scale) = if fam.multipliers {
            let logit = k.float("logit_scale")?.filter(|&c| c > 0.0);
            (
                k.float("residual_scale")?.unwrap_or(1.0),
                logit.unwrap_or(1.0),
            )
        } else {
            (1.0, 1.0)
        };
        Ok(HParams {
            family: fam,
            arch_name,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            n_vocab,
            n_ctx_train,
            rms_eps,
            rope_base,
            rope_base_swa,
            rope_dims,
            rope_layout: fam.rope,
            rope_freq_scale,
            rope_attn_factor,
            n_ctx_orig,
            swa_layers,
            window,
            causal,
            attn_scale,
            embd_scale,
            residual_scale,
            logit_scale,
            final_logit_softcap: cap(fam.final_softcap, "final_logit_softcapping")?,
            attn_logit_softcap: cap(fam.attn_softcap, "attn_logit_softcapping")?,
            head,
            pooling,
            n_token_types,
        })
    }

    /// Width of the query projection.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    /// Width of the key and value projections.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    /// An embedding model: pooled, no LM head.
    pub fn is_embedding(&self) -> bool {
        self.head == Head::Pooled
    }
    /// The window of layer `il`, or `Window::None` for a global layer.
    pub fn layer_window(&self, il: usize) -> Window {
        if self.swa_layers[il] {
            self.window
        } else {
            Window::None
        }
    }
}

/// Which layers slide, and the window they slide with (llama.cpp's rules:
/// an explicit per-layer array wins, else every `every`-th layer is global).
fn windows<D: AsRef<[u8]>>(
    k: &Keys<'_, D>,
    windows: Windows,
    n_layer: usize,
) -> Result<(Vec<bool>, Window), ModelError> {
    let none = (vec![false; n_layer], Window::None);
    let Windows::Pattern {
        every,
        default_window,
        symmetric,
    } = windows
    else {
        return Ok(none);
    };
    let n_swa = k
        .uint("attention.sliding_window")?
        .unwrap_or(default_window);
    if n_swa == 0 {
        return Ok(none);
    }
    let swa_layers = match k.value("attention.sliding_window_pattern") {
        Some(Value::Array(a)) => {
            let v = a.to_i64_vec().unwrap_or_default();
            if v.len() != n_layer {
                return Err(k.bad("attention.sliding_window_pattern"));
            }
            v.iter().map(|&x| x != 0).collect()
        }
        other => {
            let p = match other {
                Some(v) => v
                    .as_integer()
                    .and_then(|p| usize::try_from(p).ok())
                    .ok_or_else(|| k.bad("attention.sliding_window_pattern"))?,
                None => every,
            };
            (0..n_layer).map(|il| p == 0 || il % p < p - 1).collect()
        }
    };
    let window = if symmetric {
        Window::Symmetric(n_swa)
    } else {
        Window::Trailing(n_swa)
    };
    Ok((swa_layers, window))
}
