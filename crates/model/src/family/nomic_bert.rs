//! nomic-bert: BERT's post-norm encoder with rotary positions (NeoX pairs)
//! instead of position embeddings, fused Q/K/V and a SwiGLU feed-forward.

use lamina_kernels::ops::RopeLayout;

use super::{BASE, Family, Head, Positions};

pub(super) const FAMILY: Family = Family {
    names: &["nomic-bert"],
    rope: RopeLayout::Neox,
    head: Head::Pooled,
    bidirectional: true,
    encoder: Some(Positions::Rotary),
    ..BASE
};
