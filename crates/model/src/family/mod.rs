//! Model families as data: what sets one architecture's forward pass apart
//! (norms, biases, RoPE layout, activation, soft-caps, sliding windows,
//! multipliers), read by the one decoder stack in [`crate::transformer`] or,
//! for BERT-style encoders ([`Family::encoder`]), by [`crate::encoder`].
//!
//! Adding a family is one small file here with one [`Family`] value, plus
//! its line in [`FAMILIES`]. Tensors every family may have (fused or
//! separate Q/K/V, their biases, an output bias, Llama 3's `rope_freqs`) are
//! found by name, as llama.cpp finds them; a family's file says only what
//! the file cannot tell.

mod bert;
mod gemma2;
mod gemma3;
mod gemma_embedding;
mod granite;
mod llama;
mod nomic_bert;
mod phi3;
mod qwen2;
mod qwen3;

use lamina_kernels::ops::RopeLayout;

use crate::hparams::Pooling;

/// One architecture's traits.
#[derive(Debug, PartialEq)]
pub struct Family {
    /// The `general.architecture` names this family reads.
    pub names: &'static [&'static str],
    /// How RoPE pairs dimensions.
    pub rope: RopeLayout,
    /// The gate's activation in the gated feed-forward.
    pub activation: Activation,
    /// The multiplier of the token embeddings.
    pub input_scale: InputScale,
    /// Per-head RMSNorm of Q and K before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// RMSNorm of each block's attention and feed-forward outputs before the
    /// residual add (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// Gate and up projections stored as one `ffn_up` of twice the width,
    /// gate first.
    pub fused_gate_up: bool,
    /// Which layers attend through a sliding window, and how.
    pub windows: Windows,
    /// Sliding-window layers take RoPE's global base unless the file names
    /// one (`rope.freq_base_swa`); otherwise their default base is 10,000.
    pub swa_rope_base_is_global: bool,
    /// The attention score multiplier.
    pub attn_scale: AttnScale,
    /// Soft-capping of attention scores (`attn_logit_softcapping`).
    pub attn_softcap: Cap,
    /// Soft-capping of the final logits (`final_logit_softcapping`).
    pub final_softcap: Cap,
    /// Granite's `residual_scale` and `logit_scale` keys apply.
    pub multipliers: bool,
    /// What the last hidden state feeds.
    pub head: Head,
    /// Bidirectional attention (embedding models).
    pub bidirectional: bool,
    /// Phi-3's LongRoPE: `rope_factors_long` / `rope_factors_short` by context.
    pub long_rope: bool,
    /// A post-norm encoder (BERT, nomic-bert): LayerNorms with biases, read
    /// by [`crate::encoder`] instead of the decoder stack; how it encodes
    /// positions.
    pub encoder: Option<Positions>,
    /// How an embedding model pools when its file has no `pooling_type`.
    pub pooling: Pooling,
}

/// The feed-forward gate's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU with the tanh approximation: `gelu(gate) · up`.
    Gelu,
    /// No gate: `gelu(up)` with the exact, erf-based GELU (BERT).
    GeluErf,
}

/// How an encoder tells positions apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// A learned row per position (`position_embd`), added to the input.
    Absolute,
    /// RoPE on Q and K in every block.
    Rotary,
}

/// The multiplier of the token embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputScale {
    /// None.
    One,
    /// √n_embd (Gemma).
    SqrtWidth,
    /// The file's `embedding_scale` key, 1 if absent (Granite).
    Key,
}

/// Which layers use a sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Windows {
    /// Every layer attends globally.
    None,
    /// Layers slide when the file gives a window (`attention.sliding_window`,
    /// else `default_window`; 0 means none): every `every`-th layer is
    /// global, the others slide (`every` 0: all slide), unless the file
    /// lists the layers (`attention.sliding_window_pattern` as an array).
    Pattern {
        every: usize,
        default_window: usize,
        /// Bidirectional window centred on the query (EmbeddingGemma).
        symmetric: bool,
    },
}

/// The attention score multiplier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnScale {
    /// `1/√head_dim`.
    HeadDim,
    /// The file's `attention.scale`, else `1/√head_dim` (Granite).
    Key,
    /// `1/√head_dim`, but `1/√(n_embd/n_head)` for the model with
    /// `n_layer` layers (Gemma's 27B, as llama.cpp decides).
    Gemma { large_n_layer: usize },
}

/// A soft-cap `c · tanh(x / c)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cap {
    /// The family never caps.
    Never,
    /// The file's key, else `default`; 0 means no cap.
    Key { default: f32 },
}

/// What the last hidden state feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// An LM head: `output.weight`, or the token embedding when absent.
    Lm,
    /// An LM head that is always the token embedding (Gemma 2).
    TiedLm,
    /// Pooling for sentence embeddings, and an optional dense head.
    Pooled,
}

/// Every family this build runs, in the order error messages list them.
pub const FAMILIES: &[&Family] = &[
    &llama::FAMILY,
    &granite::FAMILY,
    &qwen2::FAMILY,
    &qwen3::FAMILY,
    &phi3::FAMILY,
    &gemma2::FAMILY,
    &gemma3::FAMILY,
    &gemma_embedding::FAMILY,
    &bert::FAMILY,
    &nomic_bert::FAMILY,
];

/// The family that reads architecture `name`.
pub fn lookup(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().copied().find(|f| f.names.contains(&name))
}

/// The architecture names this build runs, comma-separated.
pub fn known_names() -> String {
    let names: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|f| f.names.iter().copied())
        .collect();
    names.join(", ")
}

impl Family {
    /// The first of its names: how reports call it.
    pub fn name(&self) -> &'static str {
        self.names[0]
    }

    /// Gemma's chat conventions (its built-in template when a file has none).
    pub fn is_gemma(&self) -> bool {
        self.input_scale == InputScale::SqrtWidth
    }

    /// An embedding model by its family: pooled, no LM head (a decoder file
    /// with a `pooling_type` key is one too: see [`crate::HParams::is_embedding`]).
    pub fn is_embedding(&self) -> bool {
        self.head == Head::Pooled
    }
}

/// Llama's traits: the base every other family departs from.
const BASE: Family = Family {
    names: &[],
    rope: RopeLayout::Normal,
    activation: Activation::Silu,
    input_scale: InputScale::One,
    qk_norm: false,
    post_norms: false,
    fused_gate_up: false,
    windows: Windows::None,
    swa_rope_base_is_global: false,
    attn_scale: AttnScale::HeadDim,
    attn_softcap: Cap::Never,
    final_softcap: Cap::Never,
    multipliers: false,
    head: Head::Lm,
    bidirectional: false,
    long_rope: false,
    encoder: None,
    pooling: Pooling::Mean,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_maps_to_one_family() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            assert!(!f.names.is_empty());
            for n in f.names {
                assert!(seen.insert(*n), "{n} named twice");
                assert_eq!(lookup(n), Some(*f));
            }
        }
        assert_eq!(lookup("qwen2moe"), None);
    }

    #[test]
    fn families_differ_where_llama_cpp_says() {
        let q3 = lookup("qwen3").unwrap();
        assert!(q3.qk_norm && q3.rope == RopeLayout::Neox && !q3.post_norms);
        let g2 = lookup("gemma2").unwrap();
        assert!(g2.post_norms && g2.swa_rope_base_is_global && g2.head == Head::TiedLm);
        assert_eq!(g2.final_softcap, Cap::Key { default: 30.0 });
        assert!(lookup("phi3").unwrap().fused_gate_up);
        assert!(lookup("gemma-embedding").unwrap().is_embedding());
        assert!(known_names().contains("qwen2"));
        let bert = lookup("bert").unwrap();
        assert!(
            bert.encoder == Some(Positions::Absolute)
                && bert.bidirectional
                && bert.activation == Activation::GeluErf
        );
        let nomic = lookup("nomic-bert").unwrap();
        assert!(
            nomic.encoder == Some(Positions::Rotary)
                && nomic.rope == RopeLayout::Neox
                && nomic.activation == Activation::Silu
        );
    }
}
