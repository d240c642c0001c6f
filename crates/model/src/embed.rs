//! Sentence embeddings: tokenize (with an optional task prefix), run many
//! texts per forward with each attending only to itself, mean-pool, apply the
//! sentence-transformers dense head, L2-normalise, optionally truncate to a
//! Matryoshka dimension (re-normalised).

use std::ops::Range;

use lamina_kernels::ops;
use lamina_kernels::pool::ThreadPool;

use crate::ModelError;
use crate::tokenizer::Tokenizer;
use crate::transformer::{Model, Workspace};

/// Task prefixes EmbeddingGemma was trained with.
pub const QUERY_PREFIX: &str = "task: search result | query: ";
pub const DOCUMENT_PREFIX: &str = "title: none | text: ";

/// How texts become vectors.
#[derive(Clone, Debug)]
pub struct EmbedOptions {
    /// Prepended to every text (`--task`).
    pub prefix: String,
    /// Keep the first `dim` values, re-normalised (Matryoshka); `None` keeps all.
    pub dim: Option<usize>,
    /// Cut texts longer than the context instead of refusing them.
    pub truncate: bool,
    /// Tokens per forward: texts are packed whole into batches up to this size.
    pub batch_tokens: usize,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            prefix: String::new(),
            dim: None,
            truncate: false,
            batch_tokens: 512,
        }
    }
}

/// One text's vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    pub n_tokens: usize,
    pub vector: Vec<f32>,
}

/// An embedding model with its tokenizer and reusable buffers.
pub struct Embedder {
    pub model: Model,
    pub tokenizer: Tokenizer,
    ws: Workspace,
    pooled: Vec<f32>,
    dense_buf: Vec<f32>,
    dense_scratch: lamina_kernels::matmul::Scratch,
}

impl Embedder {
    pub fn new(model: Model) -> Result<Embedder, ModelError> {
        if model.has_lm_head() {
            return Err(ModelError::NotEmbedding {
                arch: model.hp.arch_name.clone(),
            });
        }
        let tokenizer = Tokenizer::from_gguf(&model.file)?;
        model.check_tokenizer(&tokenizer)?;
        let ws = Workspace::new(&model.hp, 64);
        Ok(Embedder {
            model,
            tokenizer,
            ws,
            pooled: Vec::new(),
            dense_buf: Vec::new(),
            dense_scratch: Default::default(),
        })
    }

    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Embedder, ModelError> {
        Embedder::new(Model::open(path)?)
    }

    /// Width of the vectors before Matryoshka truncation.
    pub fn dim(&self) -> usize {
        self.model.hp.n_embd
    }

    /// The ids a text becomes (prefix included, BOS/EOS as the vocabulary says),
    /// checked or truncated against the context.
    pub fn tokenize(&self, text: &str, opts: &EmbedOptions) -> Result<Vec<u32>, ModelError> {
        let full;
        let text = if opts.prefix.is_empty() {
            text
        } else {
            full = format!("{}{text}", opts.prefix);
            &full
        };
        let n_ctx = self.model.hp.n_ctx_train;
        let mut ids = if opts.truncate {
            self.tokenizer.encode(text, true, true)
        } else {
            self.tokenizer.encode_within(text, true, true, n_ctx)?
        };
        if ids.len() > n_ctx {
            // Keep the end-of-sequence token, as Hugging Face truncation does.
            let eos = self
                .tokenizer
                .add_eos()
                .then(|| ids.last().copied())
                .flatten();
            ids.truncate(n_ctx - usize::from(eos.is_some()));
            ids.extend(eos);
        }
        if ids.is_empty() {
            return Err(ModelError::Input("text gives no tokens".into()));
        }
        Ok(ids)
    }

    /// Embeds texts, many per forward.
    pub fn embed(
        &mut self,
        texts: &[&str],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<Embedding>, ModelError> {
        let ids = texts
            .iter()
            .map(|t| self.tokenize(t, opts))
            .collect::<Result<Vec<_>, _>>()?;
        self.embed_ids(&ids, opts, pool)
    }

    /// Embeds pre-tokenized sequences, packing them whole into batches of up to
    /// `opts.batch_tokens` tokens (a longer sequence runs alone).
    pub fn embed_ids(
        &mut self,
        seqs: &[Vec<u32>],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<Embedding>, ModelError> {
        if let Some(dim) = opts.dim
            && (dim == 0 || dim > self.dim())
        {
            return Err(ModelError::BadDim {
                dim,
                max: self.dim(),
            });
        }
        let mut out = Vec::with_capacity(seqs.len());
        let mut result = Ok(());
        // Enter the pool once for all the forwards (see `ThreadPool::install`).
        pool.install(&mut || result = self.embed_batches(seqs, opts, pool, &mut out));
        result.map(|()| out)
    }

    fn embed_batches(
        &mut self,
        seqs: &[Vec<u32>],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
        out: &mut Vec<Embedding>,
    ) -> Result<(), ModelError> {
        let mut tokens = Vec::new();
        let mut ranges: Vec<Range<usize>> = Vec::new();
        let mut i = 0;
        while i < seqs.len() {
            tokens.clear();
            ranges.clear();
            while i < seqs.len()
                && (ranges.is_empty() || tokens.len() + seqs[i].len() <= opts.batch_tokens)
            {
                let s = tokens.len();
                tokens.extend_from_slice(&seqs[i]);
                ranges.push(s..tokens.len());
                i += 1;
            }
            self.model
                .forward_sequences(&mut self.ws, &tokens, &ranges, pool)?;
            for r in &ranges {
                let v = self.pool_and_project(r.clone(), pool)?;
                out.push(Embedding {
                    n_tokens: r.len(),
                    vector: finish(v, opts.dim),
                });
            }
        }
        Ok(())
    }

    /// Mean of the sequence's hidden states through the dense head, L2-normalised.
    fn pool_and_project(
        &mut self,
        r: Range<usize>,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<f32>, ModelError> {
        let d = self.model.hp.n_embd;
        let h = self.ws.hidden();
        self.pooled.clear();
        self.pooled.resize(d, 0.0);
        for row in h[r.start * d..r.end * d].chunks_exact(d) {
            ops::add_in_place(&mut self.pooled, row);
        }
        ops::scale(&mut self.pooled, 1.0 / r.len() as f32);
        let mut cur = std::mem::take(&mut self.pooled);
        for lin in &self.model.dense {
            self.dense_buf.clear();
            self.dense_buf.resize(lin.rows, 0.0);
            lin.forward(
                self.model.store(),
                &cur,
                1,
                &mut self.dense_buf,
                &mut self.dense_scratch,
                pool,
            )?;
            std::mem::swap(&mut cur, &mut self.dense_buf);
        }
        let v = cur.clone();
        self.pooled = cur;
        Ok(v)
    }
}

/// Matryoshka truncation then L2 normalisation.
fn finish(mut v: Vec<f32>, dim: Option<usize>) -> Vec<f32> {
    if let Some(d) = dim {
        v.truncate(d);
    }
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    if norm > 0.0 {
        let s = (1.0 / norm) as f32;
        v.iter_mut().for_each(|x| *x *= s);
    }
    v
}

/// Cosine similarity (for tests and tools).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (na * nb)
}
