//! Tokenizers, forward passes and sampling.
//!
//! * [`tokenizer`]: llama.cpp-exact SentencePiece and byte-level BPE.
//! * [`hparams`], [`weights`], [`transformer`]: loading a GGUF model and the
//!   shared decoder stack (Llama, Gemma 3, EmbeddingGemma).
//! * [`embed`]: sentence embeddings (pooling, dense head, batching).
//! * [`generate`], [`sampling`], [`chat`]: text generation sessions,
//!   llama.cpp's sampler chain, chat templates.
//! * [`convert`]: Hugging Face checkpoints → GGUF; [`quantize`]: GGUF → GGUF in another type.
#![forbid(unsafe_code)]

pub mod chat;
pub mod convert;
pub mod embed;
pub mod generate;
pub mod hparams;
pub mod mem;
pub mod quantize;
pub mod sampling;
pub mod tokenizer;
pub mod transformer;
pub mod weights;

pub use hparams::{Arch, HParams};
pub use transformer::{KvCache, KvType, Load, Model, Workspace};

/// A model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] lamina_gguf::Error),
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokenizerError),
    #[error("unknown architecture {0:?}: this build runs {known}", known = Arch::KNOWN)]
    UnknownArch(String),
    #[error("missing metadata key {0}")]
    MissingKey(String),
    #[error("metadata key {0} has the wrong type or an impossible value")]
    BadKey(String),
    #[error("missing tensor {0}")]
    MissingTensor(String),
    #[error("tensor {tensor} has shape {got:?}, expected {want:?}")]
    Shape {
        tensor: String,
        got: Vec<u64>,
        want: Vec<u64>,
    },
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The kernel error's text is in the message, not a `source`: error
    /// reports print each source's message after the error's own, and
    /// printed it twice.
    #[error("{tensor}: {error}")]
    Kernel {
        tensor: String,
        error: lamina_kernels::KernelError,
    },
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    BadToken { id: u32, n_vocab: usize },
    /// `at_least`: encoding stopped early, `n_tokens` is a lower bound.
    #[error(
        "input of {}{n_tokens} tokens exceeds the context of {n_ctx} (shorten it, or pass --truncate where offered)",
        if *at_least { "at least " } else { "" }
    )]
    ContextExceeded {
        n_tokens: usize,
        n_ctx: usize,
        at_least: bool,
    },
    #[error("{0}")]
    Input(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_error_is_reported_once() {
        let e = ModelError::Kernel {
            tensor: "blk.0.attn_q.weight".into(),
            error: lamina_kernels::KernelError::UnknownIsa("sse9".into()),
        };
        let text = e.to_string();
        assert_eq!(text.matches("sse9").count(), 1, "{text}");
        assert!(std::error::Error::source(&e).is_none());
    }
}
