//! Phi-3, 3.5 and 4-mini: Q, K and V in one `attn_qkv` (found by name), gate
//! and up in one `ffn_up`, NeoX RoPE, and the 128k variants' LongRoPE
//! factors. llama.cpp disables Phi's sliding window, and so does this.

use lamina_kernels::ops::RopeLayout;

use super::{BASE, Family};

pub(super) const FAMILY: Family = Family {
    names: &["phi3"],
    rope: RopeLayout::Neox,
    fused_gate_up: true,
    long_rope: true,
    ..BASE
};
