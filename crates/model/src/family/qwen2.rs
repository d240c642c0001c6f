//! Qwen 2 and 2.5: Llama's layers with biases on Q, K and V (found by name)
//! and NeoX RoPE.

use lamina_kernels::ops::RopeLayout;

use super::{BASE, Family};

pub(super) const FAMILY: Family = Family {
    names: &["qwen2"],
    rope: RopeLayout::Neox,
    ..BASE
};
