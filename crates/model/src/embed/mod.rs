//! Sentence embeddings and reranking.
//!
//! Embedding: tokenize (with an optional task prefix, [`Embedder::tasks`]),
//! run many texts per forward with each attending only to itself, pool
//! ([`Pooling`]: mean, first token, last token, or none for one vector per
//! token), apply the sentence-transformers dense head where the model has
//! one, L2-normalise, optionally truncate to a Matryoshka dimension
//! (re-normalised).
//!
//! Reranking (cross-encoders, `rank` pooling; a BERT-family file with a
//! classification head and no `pooling_type` is one): a query and a
//! document become one [`Pair`] in the model's own format (`[CLS] q [SEP] d
//! [SEP]`, `<s> q </s></s> d </s>`), many pairs per forward; the first
//! token's state goes through the classification head and the first label's
//! raw logit is the pair's score (not normalised, not squashed). Which
//! token-type row the document's tokens take is the encoder's rule
//! ([`crate::encoder`]): PyTorch's where the file keeps BERT's pooler,
//! llama.cpp's (row 0) where it does not.
//!
//! The context ([`Embedder::n_ctx`]) is the file's `context_length`; a
//! sentence-transformers `max_seq_length` below it (all-MiniLM-L6-v2's 256)
//! is not in the GGUF (the pinned converter drops it), so texts between the
//! two are embedded whole, as llama.cpp embeds them, where
//! sentence-transformers would cut them.

mod head;
mod tasks;

use std::ops::Range;

use lamina_kernels::pool::ThreadPool;

pub use crate::hparams::Pooling;
pub(crate) use head::RankHead;

use crate::ModelError;
use crate::tokenizer::Tokenizer;
use crate::transformer::{Model, Workspace};

/// Task prefixes EmbeddingGemma was trained with.
pub const QUERY_PREFIX: &str = "task: search result | query: ";
pub const DOCUMENT_PREFIX: &str = "title: none | text: ";

/// How texts become vectors.
#[derive(Clone, Debug)]
pub struct EmbedOptions {
    /// Prepended to every text (`--task`); for pairs, to the query.
    pub prefix: String,
    /// Keep the first `dim` values, re-normalised (Matryoshka); `None` keeps all.
    pub dim: Option<usize>,
    /// Cut texts longer than the context instead of refusing them (pairs:
    /// cut the document's tokens).
    pub truncate: bool,
    /// Tokens per forward: texts are packed whole into batches up to this size.
    pub batch_tokens: usize,
    /// Pool this way instead of as the model says (llama.cpp's `--pooling`).
    pub pooling: Option<Pooling>,
    /// Scale each vector to length 1 (the default, as sentence-transformers'
    /// Normalize step and llama.cpp do); off gives the pooled vectors as
    /// they are.
    pub normalize: bool,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            prefix: String::new(),
            dim: None,
            truncate: false,
            batch_tokens: 512,
            pooling: None,
            normalize: true,
        }
    }
}

/// One text's vector; with [`Pooling::None`], `n_tokens` vectors back to back.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    pub n_tokens: usize,
    pub vector: Vec<f32>,
}

/// A query-document pair as ids, with where the second segment (token type 1) starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub ids: Vec<u32>,
    pub segment_b: usize,
}

/// What [`Embedder::batches`] does after each forward, given its sequence ranges.
type BatchFn<'a> = dyn FnMut(&mut Embedder, &[Range<usize>]) -> Result<(), ModelError> + 'a;

/// An embedding model (or a cross-encoder) with its tokenizer and reusable buffers.
pub struct Embedder {
    pub model: Model,
    pub tokenizer: Tokenizer,
    ws: Workspace,
    /// Pooled rows of a batch, `n × width`.
    pooled: Vec<f32>,
    buf: Vec<f32>,
    logits: Vec<f32>,
    scratch: lamina_kernels::matmul::Scratch,
}

impl Embedder {
    pub fn new(model: Model) -> Result<Embedder, ModelError> {
        if !model.hp.is_embedding() {
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
            buf: Vec::new(),
            logits: Vec::new(),
            scratch: Default::default(),
        })
    }

    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Embedder, ModelError> {
        Embedder::new(Model::open(path)?)
    }

    /// Width of the vectors before Matryoshka truncation.
    pub fn dim(&self) -> usize {
        self.model.hp.n_embd
    }

    /// How the model pools (its file's `pooling_type`, else its family's default).
    pub fn pooling(&self) -> Pooling {
        self.model.hp.pooling
    }

    /// A cross-encoder: scores pairs ([`Embedder::rerank`]) instead of embedding texts.
    pub fn is_reranker(&self) -> bool {
        self.pooling() == Pooling::Rank
    }

    /// The most tokens one text (or pair) may have.
    pub fn n_ctx(&self) -> usize {
        self.model.n_ctx()
    }

    /// The model's known task prompts, `(name, prefix)`, as its
    /// sentence-transformers configuration names them.
    pub fn tasks(&self) -> &'static [(&'static str, &'static str)] {
        tasks::tasks(&self.model.hp)
    }

    /// The prefix of task `name` ([`Embedder::tasks`]).
    pub fn task_prefix(&self, task: &str) -> Option<&'static str> {
        self.tasks()
            .iter()
            .find(|(n, _)| *n == task)
            .map(|(_, p)| *p)
    }

    /// The ids a text becomes (prefix included, BOS/EOS as the vocabulary says),
    /// checked or truncated against the context ([`tokenize_text`]).
    pub fn tokenize(&self, text: &str, opts: &EmbedOptions) -> Result<Vec<u32>, ModelError> {
        tokenize_text(&self.tokenizer, self.n_ctx(), text, opts)
    }

    /// A query and a document as one sequence in the model's pair format
    /// ([`tokenize_pair_text`]).
    pub fn tokenize_pair(
        &self,
        query: &str,
        doc: &str,
        opts: &EmbedOptions,
    ) -> Result<Pair, ModelError> {
        tokenize_pair_text(&self.tokenizer, self.n_ctx(), query, doc, opts)
    }

    /// Embeds texts, many per forward.
    pub fn embed(
        &mut self,
        texts: &[&str],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<Embedding>, ModelError> {
        self.check_embedding(opts)?;
        let ids = texts
            .iter()
            .map(|t| self.tokenize(t, opts))
            .collect::<Result<Vec<_>, _>>()?;
        self.embed_ids(&ids, opts, pool)
    }

    fn check_embedding(&self, opts: &EmbedOptions) -> Result<(), ModelError> {
        if self.is_reranker() || opts.pooling == Some(Pooling::Rank) {
            return Err(ModelError::Input(format!(
                "{} is a reranker (pooling rank): it scores query-document pairs (rerank), \
                 it does not embed texts",
                self.model.hp.arch_name
            )));
        }
        if opts.pooling.unwrap_or(self.pooling()) == Pooling::None && !self.model.dense.is_empty() {
            return Err(ModelError::Input(
                "pooling none gives one vector per token, but this model's dense head maps \
                 pooled vectors: choose a pooling"
                    .into(),
            ));
        }
        if let Some(dim) = opts.dim
            && (dim == 0 || dim > self.dim())
        {
            return Err(ModelError::BadDim {
                dim,
                max: self.dim(),
            });
        }
        Ok(())
    }

    /// Embeds pre-tokenized sequences, packing them whole into batches of up to
    /// `opts.batch_tokens` tokens (a longer sequence runs alone).
    pub fn embed_ids(
        &mut self,
        seqs: &[Vec<u32>],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<Embedding>, ModelError> {
        self.check_embedding(opts)?;
        let pooling = opts.pooling.unwrap_or(self.pooling());
        let mut out = Vec::with_capacity(seqs.len());
        let mut result = Ok(());
        // Enter the pool once for all the forwards (see `ThreadPool::install`).
        pool.install(&mut || {
            result = self.batches(seqs, &[], opts.batch_tokens, pool, &mut |e, ranges| {
                e.embed_batch(ranges, pooling, opts, pool, &mut out)
            })
        });
        result.map(|()| out)
    }

    /// Raw relevance logits (first label), one per pair, many pairs per forward.
    pub fn score_pairs(
        &mut self,
        pairs: &[Pair],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<f32>, ModelError> {
        if !self.is_reranker() {
            return Err(ModelError::Input(format!(
                "{} is an embedding model (pooling {}): reranking needs a cross-encoder \
                 (pooling rank)",
                self.model.hp.arch_name,
                self.pooling()
            )));
        }
        if let Some(p) = pairs
            .iter()
            .find(|p| p.segment_b > p.ids.len() || p.ids.is_empty())
        {
            return Err(ModelError::Input(format!(
                "a pair of {} tokens with its second segment at {}",
                p.ids.len(),
                p.segment_b
            )));
        }
        let seqs: Vec<Vec<u32>> = pairs.iter().map(|p| p.ids.clone()).collect();
        let segs: Vec<usize> = pairs.iter().map(|p| p.segment_b).collect();
        let mut out = Vec::with_capacity(pairs.len());
        let mut result = Ok(());
        pool.install(&mut || {
            result = self.batches(&seqs, &segs, opts.batch_tokens, pool, &mut |e, ranges| {
                e.score_batch(ranges, pool, &mut out)
            })
        });
        result.map(|()| out)
    }

    /// Scores each document against the query ([`Embedder::score_pairs`]).
    pub fn rerank(
        &mut self,
        query: &str,
        docs: &[&str],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<f32>, ModelError> {
        let pairs = docs
            .iter()
            .map(|d| self.tokenize_pair(query, d, opts))
            .collect::<Result<Vec<_>, _>>()?;
        self.score_pairs(&pairs, opts, pool)
    }

    /// Packs `seqs` whole into forwards of up to `batch_tokens` tokens and
    /// calls `each` after every forward with the batch's sequence ranges.
    fn batches(
        &mut self,
        seqs: &[Vec<u32>],
        segment_b: &[usize],
        batch_tokens: usize,
        pool: &dyn ThreadPool,
        each: &mut BatchFn<'_>,
    ) -> Result<(), ModelError> {
        let mut tokens = Vec::new();
        let mut ranges: Vec<Range<usize>> = Vec::new();
        let mut segs = Vec::new();
        let mut i = 0;
        while i < seqs.len() {
            tokens.clear();
            ranges.clear();
            segs.clear();
            while i < seqs.len()
                && (ranges.is_empty() || tokens.len() + seqs[i].len() <= batch_tokens)
            {
                let s = tokens.len();
                tokens.extend_from_slice(&seqs[i]);
                ranges.push(s..tokens.len());
                segs.extend(segment_b.get(i));
                i += 1;
            }
            if ranges.iter().any(|r| r.is_empty()) {
                return Err(ModelError::Input("a text with no tokens".into()));
            }
            self.model
                .forward_segments(&mut self.ws, &tokens, &ranges, &segs, pool)?;
            each(self, &ranges)?;
        }
        Ok(())
    }

    /// Pools the last forward's sequences, applies the dense head (one
    /// matmul for the whole batch) and normalises.
    fn embed_batch(
        &mut self,
        ranges: &[Range<usize>],
        pooling: Pooling,
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
        out: &mut Vec<Embedding>,
    ) -> Result<(), ModelError> {
        let (dim, normalize) = (opts.dim, opts.normalize);
        let d = self.model.hp.n_embd;
        let hidden = self.ws.hidden();
        if pooling == Pooling::None {
            for r in ranges {
                let mut vector = Vec::with_capacity(r.len() * dim.unwrap_or(d));
                for row in hidden[r.start * d..r.end * d].chunks_exact(d) {
                    head::finish(row, dim, normalize, &mut vector);
                }
                out.push(Embedding {
                    n_tokens: r.len(),
                    vector,
                });
            }
            return Ok(());
        }
        self.pooled.clear();
        self.pooled.resize(ranges.len() * d, 0.0);
        for (r, row) in ranges.iter().zip(self.pooled.chunks_exact_mut(d)) {
            head::pool_row(pooling, hidden, d, r.clone(), row);
        }
        let n = ranges.len();
        head::dense(
            &self.model.dense,
            self.model.store(),
            &mut self.pooled,
            n,
            &mut self.buf,
            &mut self.scratch,
            pool,
        )?;
        for (r, row) in ranges.iter().zip(self.pooled.chunks_exact(d)) {
            let mut vector = Vec::with_capacity(dim.unwrap_or(d));
            head::finish(row, dim, normalize, &mut vector);
            out.push(Embedding {
                n_tokens: r.len(),
                vector,
            });
        }
        Ok(())
    }

    /// The classification head over the last forward's first tokens.
    fn score_batch(
        &mut self,
        ranges: &[Range<usize>],
        pool: &dyn ThreadPool,
        out: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let d = self.model.hp.n_embd;
        let head = self.model.rank.as_ref().ok_or_else(|| {
            ModelError::MissingTensor("cls.output.weight (classification head)".into())
        })?;
        let hidden = self.ws.hidden();
        self.pooled.clear();
        self.pooled.resize(ranges.len() * d, 0.0);
        for (r, row) in ranges.iter().zip(self.pooled.chunks_exact_mut(d)) {
            head::pool_row(Pooling::Rank, hidden, d, r.clone(), row);
        }
        head.forward(
            self.model.store(),
            &mut self.pooled,
            ranges.len(),
            &mut self.buf,
            &mut self.logits,
            &mut self.scratch,
            pool,
        )?;
        out.extend(self.logits.chunks_exact(head.n_out).map(|l| l[0]));
        Ok(())
    }
}

/// The ids a text becomes for a model of context `n_ctx` (prefix included,
/// BOS/EOS as the vocabulary says): too long is an error, or with
/// `opts.truncate` the text is cut keeping the end-of-sequence token, as
/// Hugging Face truncation does. [`Embedder::tokenize`] is this with the
/// model's own tokenizer and context; a server's handlers call it directly.
pub fn tokenize_text(
    tok: &Tokenizer,
    n_ctx: usize,
    text: &str,
    opts: &EmbedOptions,
) -> Result<Vec<u32>, ModelError> {
    let full;
    let text = if opts.prefix.is_empty() {
        text
    } else {
        full = format!("{}{text}", opts.prefix);
        &full
    };
    let mut ids = if opts.truncate {
        tok.encode(text, true, true)
    } else {
        tok.encode_within(text, true, true, n_ctx)?
    };
    if ids.len() > n_ctx {
        let eos = tok.add_eos().then(|| ids.last().copied()).flatten();
        ids.truncate(n_ctx - usize::from(eos.is_some()));
        ids.extend(eos);
    }
    if ids.is_empty() {
        return Err(ModelError::Input("text gives no tokens".into()));
    }
    Ok(ids)
}

/// A query and a document as one sequence in the model's pair format (the
/// prefix, if any, before the query). Too long for `n_ctx`: an error, or
/// with `opts.truncate` the document's tokens are cut (Hugging Face's
/// `only_second`), keeping the special token that closes the pair.
pub fn tokenize_pair_text(
    tok: &Tokenizer,
    n_ctx: usize,
    query: &str,
    doc: &str,
    opts: &EmbedOptions,
) -> Result<Pair, ModelError> {
    let full;
    let query = if opts.prefix.is_empty() {
        query
    } else {
        full = format!("{}{query}", opts.prefix);
        &full
    };
    let (mut ids, mut segment_b) = tok.encode_pair(query, doc);
    if segment_b > ids.len() || ids.is_empty() {
        return Err(ModelError::Input(format!(
            "pair segment starts at {segment_b} of {} tokens",
            ids.len()
        )));
    }
    if ids.len() > n_ctx {
        let over = ids.len() - n_ctx;
        // The document's own tokens lie just before the closing specials.
        let end = ids.len() - tok.pair_template().end.len();
        let n_doc = tok.encode(doc, false, true).len().min(end);
        if !opts.truncate || over > n_doc {
            return Err(ModelError::ContextExceeded {
                n_tokens: ids.len(),
                n_ctx,
                at_least: false,
            });
        }
        ids.drain(end - over..end);
        if segment_b >= end {
            // No second segment (all type 0): it still starts at the end.
            segment_b -= over;
        }
    }
    Ok(Pair { ids, segment_b })
}

/// Cosine similarity (for tests and tools).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (na * nb)
}
