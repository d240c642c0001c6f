//! EmbeddingGemma: Gemma 3's layers with bidirectional attention, windows
//! centred on the query, pooling and a sentence-transformers dense head.

use super::{AttnScale, Family, Head, Windows, gemma3};

pub(super) const FAMILY: Family = Family {
    names: &["gemma-embedding"],
    windows: Windows::Pattern {
        every: 6,
        default_window: 0,
        symmetric: true,
    },
    attn_scale: AttnScale::HeadDim,
    head: Head::Pooled,
    bidirectional: true,
    ..gemma3::FAMILY
};
