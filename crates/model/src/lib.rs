//! Tokenizers, forward passes and sampling.
//!
//! * [`tokenizer`]: llama.cpp-exact SentencePiece and byte-level BPE.
//! * [`family`], [`hparams`], [`weights`], [`transformer`]: what sets each
//!   architecture apart (as data), loading a GGUF model, and the one decoder
//!   stack every generative family runs on; [`encoder`]: the post-norm
//!   encoder stack of BERT-style families on the same machinery.
//! * [`embed`]: sentence embeddings and reranking (pooling, dense head,
//!   classification head, task prompts, batching).
//! * [`generate`], [`sampling`], [`chat`]: text generation sessions,
//!   llama.cpp's sampler chain, chat templates.
//! * [`convert`]: Hugging Face checkpoints → GGUF; [`requantize`]: a whole
//!   GGUF → GGUF with its weights in another type.
//! * [`LoadOptions`]: how a file becomes a [`Model`]; [`ThreadPool`] and
//!   [`default_pool`]: the threads a forward pass runs on.
//!
//! ```no_run
//! use lamina_model::embed::{EmbedOptions, Embedder};
//!
//! let pool = lamina_model::default_pool();
//! let mut embedder = Embedder::open("embeddinggemma-300m-Q8_0.gguf")?;
//! let vectors = embedder.embed(&["hello"], &EmbedOptions::default(), &pool)?;
//! println!("{} dimensions", vectors[0].vector.len());
//! # Ok::<(), lamina_model::ModelError>(())
//! ```
#![forbid(unsafe_code)]

pub mod chat;
pub mod convert;
pub mod embed;
pub mod encoder;
pub mod family;
pub mod generate;
pub mod grammar;
pub mod hparams;
pub mod load;
pub mod mem;
pub mod requantize;
pub mod sampling;
pub mod scheduler;
pub mod tokenizer;
pub mod transformer;
pub mod weights;

pub use family::Family;
pub use hparams::{HParams, Pooling};
pub use lamina_kernels::pool::{Rayon, Serial, ThreadPool};
pub use lamina_kernels::spin_pool::SpinPool;
pub use load::{Load, LoadOptions};
pub use transformer::{Chunk, KvCache, KvElement, KvType, Model, Workspace};

/// A compute pool with one thread per core: the spinning pool the CLI uses
/// by default ([`SpinPool`]), whose workers spin briefly between a forward
/// pass's short parallel regions and then park, so an idle pool costs no CPU.
/// [`Rayon`] degrades less on an oversubscribed machine.
pub fn default_pool() -> SpinPool {
    SpinPool::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// A model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] lamina_gguf::Error),
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokenizerError),
    #[error("unknown architecture {0:?}: this build runs {known}", known = family::known_names())]
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
    /// [`embed::Embedder`] was given a model with an LM head.
    #[error(
        "{arch} is a text-generation model; embeddings need an embedding model such as gemma-embedding"
    )]
    NotEmbedding { arch: String },
    /// A generation [`generate::Session`] was given a model without an LM head.
    #[error("{arch} is an embedding model: it has no LM head to generate with")]
    NoLmHead { arch: String },
    /// A Matryoshka dimension outside `1..=max`.
    #[error("--dim {dim} must be between 1 and {max}")]
    BadDim { dim: usize, max: usize },
    /// A tokenizer with ids the embedding matrix has no row for.
    #[error("the tokenizer has {tokens} tokens but the model's embedding matrix only {rows} rows")]
    VocabMismatch { tokens: usize, rows: usize },
    /// A session whose KV cache and buffers need more memory than there is.
    #[error(
        "a context of {n_ctx} tokens needs {:.1} GiB for its KV cache and buffers, more than the {:.1} GiB \
         this machine has: lower --ctx (or --parallel, whose sequences share the cache)",
        gib(*need),
        gib(*limit)
    )]
    ContextTooLarge {
        n_ctx: usize,
        /// Bytes the session needs.
        need: u128,
        /// Bytes this machine can give it.
        limit: u128,
    },
    /// A dense head whose last layer does not map back to `n_embd`.
    #[error("unsupported: dense head ends at width {width}, not n_embd {n_embd}")]
    DenseHead { width: usize, n_embd: usize },
    /// Bad input not covered above (chat messages, templates, prompts).
    #[error("{0}")]
    Input(String),
    /// A grammar or JSON Schema the grammar engine refused.
    #[error("the grammar does not compile: {0}")]
    Grammar(String),
}

impl ModelError {
    /// Whether the caller's input is at fault (rather than the model file or
    /// this library): a server answers these with 400.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ModelError::Input(_)
                | ModelError::BadToken { .. }
                | ModelError::ContextExceeded { .. }
                | ModelError::NotEmbedding { .. }
                | ModelError::NoLmHead { .. }
                | ModelError::BadDim { .. }
                | ModelError::VocabMismatch { .. }
                | ModelError::ContextTooLarge { .. }
                | ModelError::Grammar(_)
        )
    }
}

fn gib(bytes: u128) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
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
