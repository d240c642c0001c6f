//! Gemma 3, causal: Gemma 2's layers with a per-head Q/K RMSNorm instead of
//! attention soft-capping, five sliding-window layers to each global one
//! and a separate RoPE base for them.

use lamina_kernels::ops::RopeLayout;

use super::{Activation, AttnScale, BASE, Cap, Family, InputScale, Windows};

pub(super) const FAMILY: Family = Family {
    names: &["gemma3"],
    rope: RopeLayout::Neox,
    activation: Activation::Gelu,
    input_scale: InputScale::SqrtWidth,
    qk_norm: true,
    post_norms: true,
    windows: Windows::Pattern {
        every: 6,
        default_window: 0,
        symmetric: false,
    },
    attn_scale: AttnScale::Gemma { large_n_layer: 62 },
    final_softcap: Cap::Key { default: 0.0 },
    ..BASE
};
