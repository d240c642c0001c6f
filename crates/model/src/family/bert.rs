//! BERT (and XLM-RoBERTa, which llama.cpp files as `bert` too): a
//! post-norm encoder with absolute position and token-type embeddings,
//! biases everywhere and an ungated GELU (erf) feed-forward. Without a
//! `pooling_type` key it pools by the mean (sentence-transformers' default),
//! or ranks where the file has a classification head (`cls.output`).

use super::{Activation, BASE, Family, Head, Positions};

pub(super) const FAMILY: Family = Family {
    names: &["bert"],
    activation: Activation::GeluErf,
    head: Head::Pooled,
    bidirectional: true,
    encoder: Some(Positions::Absolute),
    ..BASE
};
