//! Llama 2/3.x, SmolLM2, TinyLlama and Mistral: pre-norm, SwiGLU, normal RoPE.
//! Llama 3's `rope_freqs` and biases, where a file has them, are found by name.
//! A file that names a sliding window (Mistral v0.1) slides in every layer.

use super::{BASE, Family, Windows};

pub(super) const FAMILY: Family = Family {
    names: &["llama", "mistral"],
    windows: Windows::Pattern {
        every: 0,
        default_window: 0,
        symmetric: false,
    },
    ..BASE
};
