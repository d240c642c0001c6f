//! Tokenizers, forward passes and sampling.
#![forbid(unsafe_code)]

pub mod convert;
pub mod tokenizer;
