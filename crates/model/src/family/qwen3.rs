//! Qwen 3: Qwen 2's layers without biases, with a per-head RMSNorm of Q and
//! K before RoPE; its head width (`attention.key_length`) is not
//! `n_embd / n_head`.

use lamina_kernels::ops::RopeLayout;

use super::{BASE, Family};

pub(super) const FAMILY: Family = Family {
    names: &["qwen3"],
    rope: RopeLayout::Neox,
    qk_norm: true,
    ..BASE
};
