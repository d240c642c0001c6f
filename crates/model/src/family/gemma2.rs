//! Gemma 2: √n_embd input scale, GeGLU, NeoX RoPE, post-attention and
//! post-FFN norms, soft-capped attention scores and logits, and a sliding
//! window in every other layer (the first included). The LM head is always
//! the token embedding.

use lamina_kernels::ops::RopeLayout;

use super::{Activation, AttnScale, BASE, Cap, Family, Head, InputScale, Windows};

pub(super) const FAMILY: Family = Family {
    names: &["gemma2"],
    rope: RopeLayout::Neox,
    activation: Activation::Gelu,
    input_scale: InputScale::SqrtWidth,
    post_norms: true,
    windows: Windows::Pattern {
        every: 2,
        default_window: 4096,
        symmetric: false,
    },
    swa_rope_base_is_global: true,
    // `query_pre_attn_scalar` is not in the file: llama.cpp derives it.
    attn_scale: AttnScale::Gemma { large_n_layer: 46 },
    attn_softcap: Cap::Key { default: 50.0 },
    final_softcap: Cap::Key { default: 30.0 },
    head: Head::TiedLm,
    ..BASE
};
