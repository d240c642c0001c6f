//! The decoder stack every generative architecture runs: pre-norm blocks of
//! attention and a gated feed-forward, with what sets a family apart (norms,
//! biases, RoPE layout, activation, soft-caps, windows, multipliers) read
//! from its [`crate::family::Family`] and from the tensors its file has.
//! Encoder families (BERT, nomic-bert) load and run [`crate::encoder`]
//! instead, through the same [`Model`], [`Workspace`] and
//! [`Model::forward_sequences`].
//!
//! A decoder file with a `pooling_type` key (Qwen3-Embedding) is an
//! embedding model: no LM head, its final-normed states pooled by
//! [`crate::embed`] (last token); without the key the same family generates.
//!
//! A forward runs a batch of `T` tokens through all layers with activations
//! as `T × width` row-major f32 in a [`Workspace`]; every projection is one
//! batched matmul. Attention differs by use:
//! * [`Model::forward_sequences`] (embeddings): several independent sequences
//!   in one batch, each attending only to itself (bidirectional, or causal),
//!   keys and values taken straight from the batch.
//! * [`Model::forward_batch`] (generation): sequences continued from their
//!   slots of a [`KvCache`], each a [`Chunk`] of the batch; each chunk's keys
//!   and values are appended to its slot and its queries attend causally
//!   over that slot. [`Model::forward_cached`] is the one-sequence case.
//!
//! Once the workspace and cache are sized, a forward allocates nothing.

use std::ops::Range;

mod buffers;
mod tensors;

use lamina_gguf::Gguf;
use lamina_kernels::attention::{AttnShape, KvRows, attention, attention_head_major};
use lamina_kernels::ops;
use lamina_kernels::pool::{ThreadPool, rows2};

pub use buffers::{Buffers, KvCache, KvElement, KvType, Workspace};
pub use tensors::Layer;
pub(crate) use tensors::{optional, qkv};

use crate::ModelError;
use crate::embed::RankHead;
use crate::encoder::Encoder;
use crate::family::{Activation, Head};
use crate::hparams::{HParams, Window};
use crate::load::LoadOptions;
use crate::tokenizer::Tokenizer;
use crate::weights::{Linear, Loader, Store, forward_many, store_panels};
use tensors::RopeFactors;

/// A loaded model: the mapped file and where each weight lies in it.
pub struct Model {
    pub file: Gguf,
    /// The matrices stored as panels at load ([`store_panels`]), if any.
    panels: Option<lamina_gguf::Mmap>,
    pub hp: HParams,
    pub(crate) tok_embd: Linear,
    /// Empty in encoder models (their blocks end in their own norms).
    output_norm: Vec<f32>,
    /// The LM head (the token embedding when tied); `None` for embedding models.
    output: Option<Linear>,
    /// The LM head's bias (Qwen 2 files may have one).
    output_bias: Option<Vec<f32>>,
    rope_factors: RopeFactors,
    /// The decoder's blocks; empty in encoder models.
    layers: Vec<Layer>,
    /// The encoder stack of encoder families ([`crate::family::Family::encoder`]).
    pub(crate) encoder: Option<Encoder>,
    /// Sentence-transformers dense head (`dense_2`, `dense_3`), applied after pooling.
    pub(crate) dense: Vec<Linear>,
    /// A cross-encoder's classification head (`cls`, `cls.output`).
    pub(crate) rank: Option<RankHead>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("hp", &self.hp)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Opens a GGUF file (mapped) and checks every tensor the architecture
    /// needs; [`LoadOptions`] offers the other choices.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Model, ModelError> {
        LoadOptions::new().open(path)
    }

    /// Loads `file`, storing matrices as panels if `panels` says so for its
    /// hyper-parameters.
    pub(crate) fn load_with(
        mut file: Gguf,
        panels: impl FnOnce(&HParams) -> bool,
    ) -> Result<Model, ModelError> {
        let hp = HParams::from_gguf(&file)?;
        let panels = panels(&hp);
        let ld = Loader { g: &file };
        let d = hp.n_embd;
        let (layers, mut encoder) = if hp.family.encoder.is_some() {
            (Vec::new(), Some(Encoder::load(&ld, &hp)?))
        } else {
            let layers = (0..hp.n_layer)
                .map(|il| Layer::load(&ld, &hp, il))
                .collect::<Result<Vec<_>, _>>()?;
            (layers, None)
        };
        let tok_embd = ld.linear("token_embd.weight", d, hp.n_vocab)?;
        let output = match hp.head {
            Head::Pooled => None,
            Head::Lm if ld.has("output.weight") => {
                Some(ld.linear("output.weight", d, hp.n_vocab)?)
            }
            Head::Lm | Head::TiedLm => Some(tok_embd.clone()),
        };
        let output_bias = match output {
            Some(_) => optional(&ld, "output.bias", hp.n_vocab)?,
            None => None,
        };
        let rope_factors = RopeFactors::load(&ld, &hp)?;
        let rank = RankHead::load(&ld, &hp)?;
        let mut dense = Vec::new();
        if hp.is_embedding() {
            let mut width = d;
            for name in ["dense_2.weight", "dense_3.weight"] {
                if let Some(info) = file.tensor(name) {
                    let rows = info.shape.get(1).copied().unwrap_or(0) as usize;
                    dense.push(ld.linear(name, width, rows)?);
                    width = rows;
                }
            }
            if width != d {
                return Err(ModelError::DenseHead { width, n_embd: d });
            }
        }
        let output_norm = match encoder {
            Some(_) => Vec::new(),
            None => ld.vector("output_norm.weight", d)?,
        };
        let (mut tok_embd, mut output, mut layers) = (tok_embd, output, layers);
        let panels = if !panels {
            None
        } else {
            // The token embedding only where it is also the LM head (tied):
            // otherwise lookups read a few rows of it, and storing it would
            // bring all of it into memory.
            let tied = output
                .as_ref()
                .is_some_and(|o| (o.source, o.start) == (tok_embd.source, tok_embd.start));
            // In the order a forward pass reads them (see `store_panels`).
            let mut all: Vec<&mut Linear> = layers
                .iter_mut()
                .flat_map(|l: &mut Layer| l.matrices_mut())
                .chain(encoder.iter_mut().flat_map(Encoder::matrices_mut))
                .chain(output.as_mut())
                .collect();
            let (stored, panels) = store_panels(&mut all, file)?;
            file = stored;
            if let (true, Some(o)) = (tied, &output) {
                tok_embd = o.clone();
            }
            panels
        };
        Ok(Model {
            panels,
            hp,
            tok_embd,
            output_norm,
            output,
            output_bias,
            rope_factors,
            layers,
            encoder,
            dense,
            rank,
            file,
        })
    }

    /// Where the weights lie (they are borrowed from here per call).
    pub fn store(&self) -> Store<'_> {
        Store {
            file: self.file.as_bytes(),
            panels: self.panels.as_deref().unwrap_or(&[]),
        }
    }

    /// Whether the model has an LM head (generation) rather than a pooled output.
    pub fn has_lm_head(&self) -> bool {
        self.output.is_some()
    }

    /// Refuses a tokenizer with ids the embedding matrix has no row for (a
    /// matrix with extra rows is fine: models pad their vocabulary).
    pub fn check_tokenizer(&self, tok: &Tokenizer) -> Result<(), ModelError> {
        if tok.n_vocab() > self.hp.n_vocab {
            return Err(ModelError::VocabMismatch {
                tokens: tok.n_vocab(),
                rows: self.hp.n_vocab,
            });
        }
        Ok(())
    }

    /// The weight types in use, for reports (`Q8_0 ×168, F32 ×…`).
    pub fn weight_types(&self) -> Vec<(lamina_gguf::GgmlType, usize)> {
        let mut counts: Vec<(lamina_gguf::GgmlType, usize)> = Vec::new();
        for w in self
            .matrices()
            .chain(std::iter::once(&self.tok_embd))
            .chain(self.dense.iter())
            .chain(self.rank.iter().flat_map(RankHead::matrices))
        {
            match counts.iter_mut().find(|(t, _)| *t == w.ty) {
                Some((_, n)) => *n += 1,
                None => counts.push((w.ty, 1)),
            }
        }
        counts
    }

    /// Bytes of weights one decoded token reads: every layer's matrices and
    /// the LM head (the token embedding's one row, and the norms, are noise).
    /// Token generation streams them from memory, so this over the time per
    /// token is the bandwidth it reaches.
    pub fn weight_bytes_per_token(&self) -> usize {
        let layers: usize = self.matrices().map(|w| w.len).sum();
        layers + self.output.as_ref().map_or(0, |o| o.len)
    }

    /// The blocks' weight matrices, decoder or encoder.
    fn matrices(&self) -> impl Iterator<Item = &Linear> {
        self.layers
            .iter()
            .flat_map(Layer::matrices)
            .chain(self.encoder.iter().flat_map(Encoder::matrices))
    }

    /// The ISA path the matmuls of this model use.
    pub fn isa(&self) -> lamina_kernels::Isa {
        self.matrices()
            .next()
            .map_or(lamina_kernels::Isa::Scalar, |w| w.kernels.isa)
    }

    /// The most tokens one sequence may have: the training context, which
    /// an encoder's position table has exactly as many rows as.
    pub fn n_ctx(&self) -> usize {
        self.hp.n_ctx_train
    }

    /// Whether a pair's second segment gets a token-type row of its own
    /// (BERT cross-encoders with their pooler; see [`crate::encoder`]).
    pub fn has_segment_b(&self) -> bool {
        let pooler = self.rank.as_ref().is_some_and(RankHead::has_dense);
        self.encoder
            .as_ref()
            .is_some_and(|e| e.has_segment_b(&self.hp, pooler))
    }

    pub(crate) fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        match tokens.iter().find(|&&t| t as usize >= self.hp.n_vocab) {
            Some(&t) => Err(ModelError::BadToken {
                id: t,
                n_vocab: self.hp.n_vocab,
            }),
            None => Ok(()),
        }
    }

    /// Embedding lookup (scaled) into `b.x`.
    fn embed_tokens(&self, b: &mut Buffers, tokens: &[u32]) -> Result<(), ModelError> {
        self.check_tokens(tokens)?;
        let d = self.hp.n_embd;
        for (i, &t) in tokens.iter().enumerate() {
            let row = &mut b.x[i * d..(i + 1) * d];
            self.tok_embd.row(self.store(), t as usize, row)?;
            if self.hp.embd_scale != 1.0 {
                ops::scale(row, self.hp.embd_scale);
            }
        }
        Ok(())
    }

    /// Runs independent sequences packed in one batch (`seqs` are consecutive
    /// ranges tiling `tokens`; positions restart at 0 in each). Afterwards
    /// [`Workspace::hidden`] holds every token's final-normed hidden state.
    pub fn forward_sequences(
        &self,
        ws: &mut Workspace,
        tokens: &[u32],
        seqs: &[Range<usize>],
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        self.forward_segments(ws, tokens, seqs, &[], pool)
    }

    /// [`Model::forward_sequences`] for pairs: sequence `s` has its second
    /// segment from offset `segment_b[s]` on (its length when it has none;
    /// an empty `segment_b` means no sequence has one). Encoders add the
    /// second token-type row there where the file has one; decoders ignore it.
    pub fn forward_segments(
        &self,
        ws: &mut Workspace,
        tokens: &[u32],
        seqs: &[Range<usize>],
        segment_b: &[usize],
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        if !segment_b.is_empty() && segment_b.len() != seqs.len() {
            return Err(ModelError::Input(format!(
                "{} segment offsets for {} sequences",
                segment_b.len(),
                seqs.len()
            )));
        }
        let t = tokens.len();
        ws.ensure(&self.hp, t);
        let Workspace {
            bufs,
            pos,
            seq,
            types,
            ..
        } = ws;
        let mut covered = 0;
        for (si, s) in seqs.iter().enumerate() {
            if s.start != covered || s.end < s.start || s.end > t {
                return Err(ModelError::Input(format!(
                    "sequence ranges must tile the batch in order; got {s:?} after {covered}"
                )));
            }
            if s.len() > self.hp.n_ctx_train {
                return Err(ModelError::ContextExceeded {
                    n_tokens: s.len(),
                    n_ctx: self.hp.n_ctx_train,
                    at_least: false,
                });
            }
            let b_from = segment_b.get(si).copied().unwrap_or(s.len());
            for (i, p) in s.clone().enumerate() {
                pos[p] = i;
                seq[p] = (s.start, s.end);
                types[p] = u8::from(i >= b_from);
            }
            covered = s.end;
        }
        if covered != t {
            return Err(ModelError::Input(
                "sequence ranges do not cover the batch".into(),
            ));
        }
        bufs.t = t;
        if let Some(enc) = &self.encoder {
            self.check_tokens(tokens)?;
            return enc.forward(self, ws, tokens, pool);
        }
        self.embed_tokens(bufs, tokens)?;
        self.rope_tables(bufs, &pos[..t], self.hp.n_ctx_orig, pool);
        let causal = self.hp.causal;
        for il in 0..self.hp.n_layer {
            let window = self.hp.layer_window(il);
            let seq = &*seq;
            // Keys of query `i`: its own sequence, cut by causality and the window.
            let keys = move |i: usize| -> Range<usize> {
                let (s0, s1) = seq[i];
                let (lo, hi) = window_range(window, i);
                let hi = if causal { hi.min(i + 1) } else { hi };
                lo.max(s0)..hi.min(s1)
            };
            self.layer(il, bufs, &pos[..t], None, &keys, pool)?;
        }
        self.final_norm(bufs, pool);
        Ok(())
    }

    /// Continues the cached sequence with `tokens` (one batch, causal), then
    /// writes logits into `logits`: the last token's (`n_vocab` values) or, with
    /// `all_logits`, every token's (`T × n_vocab`).
    pub fn forward_cached(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        tokens: &[u32],
        all_logits: bool,
        logits: &mut [f32],
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        let chunk = [Chunk {
            seq: 0,
            len: tokens.len(),
            logits: !all_logits,
        }];
        let chunks = if tokens.is_empty() { &[][..] } else { &chunk };
        self.forward_kv(ws, cache, tokens, chunks, all_logits, logits, pool)
    }

    /// Continues several cached sequences in one batch: `chunks` split
    /// `tokens` in order, one chunk per sequence at most. `logits` receives,
    /// chunk by chunk, the logits after the last token of each chunk that
    /// asks for them (`n_vocab` values each). Every token's result is the
    /// same bits whatever else shares the batch.
    pub fn forward_batch(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        tokens: &[u32],
        chunks: &[Chunk],
        logits: &mut [f32],
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        self.forward_kv(ws, cache, tokens, chunks, false, logits, pool)
    }

    #[allow(clippy::too_many_arguments)]
    fn forward_kv(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        tokens: &[u32],
        chunks: &[Chunk],
        all_logits: bool,
        logits: &mut [f32],
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        let output = self.output.as_ref().ok_or_else(|| {
            ModelError::Input(format!(
                "{} is an embedding model: it has no LM head to generate with",
                self.hp.arch_name
            ))
        })?;
        let t = tokens.len();
        check_chunks(cache, chunks, t)?;
        let n_out = if all_logits {
            t
        } else {
            chunks.iter().filter(|c| c.logits).count()
        };
        if logits.len() != n_out * self.hp.n_vocab {
            return Err(ModelError::Input(format!(
                "logits buffer holds {} values, want {}",
                logits.len(),
                n_out * self.hp.n_vocab
            )));
        }
        if t == 0 {
            return Ok(());
        }
        ws.ensure(&self.hp, t);
        let Workspace {
            bufs, pos, kv_base, ..
        } = ws;
        let mut at = 0;
        for c in chunks {
            let (p0, base) = (cache.lens[c.seq], cache.base(c.seq));
            for i in 0..c.len {
                pos[at + i] = p0 + i;
                kv_base[at + i] = base;
            }
            at += c.len;
        }
        bufs.t = t;
        self.embed_tokens(bufs, tokens)?;
        self.rope_tables(bufs, &pos[..t], cache.n_ctx, pool);
        let (pos, kv_base) = (&pos[..t], &kv_base[..t]);
        for il in 0..self.hp.n_layer {
            let window = self.hp.layer_window(il);
            // Query `i` sits at cache row `kv_base[i] + pos[i]`.
            let keys = move |i: usize| -> Range<usize> {
                let (lo, hi) = window_range(window, pos[i]);
                kv_base[i] + lo..kv_base[i] + hi.min(pos[i] + 1)
            };
            let kv = KvWrite {
                cache: &mut *cache,
                chunks,
            };
            self.layer(il, bufs, pos, Some(kv), &keys, pool)?;
        }
        for c in chunks {
            cache.lens[c.seq] += c.len;
        }
        self.final_norm(bufs, pool);
        let d = self.hp.n_embd;
        // The rows the LM head reads: every token's, or each flagged chunk's
        // last, gathered unless they are already consecutive.
        let x = if all_logits {
            &bufs.xn[..t * d]
        } else {
            let mut ends = chunks
                .iter()
                .scan(0, |end, c| {
                    *end += c.len;
                    Some((*end - 1, c.logits))
                })
                .filter(|&(_, l)| l)
                .map(|(e, _)| e);
            let first = ends.next().unwrap_or(0);
            let consecutive = ends.enumerate().all(|(k, e)| e == first + k + 1);
            if consecutive {
                &bufs.xn[first * d..(first + n_out) * d]
            } else {
                let mut k = 0;
                let mut end = 0;
                for c in chunks {
                    end += c.len;
                    if c.logits {
                        let row = &bufs.xn[(end - 1) * d..end * d];
                        bufs.o[k * d..(k + 1) * d].copy_from_slice(row);
                        k += 1;
                    }
                }
                &bufs.o[..n_out * d]
            }
        };
        if n_out == 0 {
            return Ok(());
        }
        output.forward(self.store(), x, n_out, logits, &mut bufs.scratch, pool)?;
        if let Some(b) = &self.output_bias {
            logits
                .chunks_exact_mut(self.hp.n_vocab)
                .for_each(|row| ops::add_in_place(row, b));
        }
        if self.hp.logit_scale != 1.0 {
            ops::scale(logits, 1.0 / self.hp.logit_scale);
        }
        if let Some(c) = self.hp.final_logit_softcap {
            logits.iter_mut().for_each(|l| *l = c * (*l / c).tanh());
        }
        Ok(())
    }

    /// The batch's RoPE tables (`b.rope`) for a context of `n_ctx`
    /// positions, once per forward instead of once per layer and per Q and
    /// K: the same values, computed the same way.
    pub(crate) fn rope_tables(
        &self,
        b: &mut Buffers,
        pos: &[usize],
        n_ctx: usize,
        pool: &dyn ThreadPool,
    ) {
        let hp = &self.hp;
        let (t, rd) = (b.t, hp.rope_dims);
        let factors = self.rope_factors.for_context(n_ctx, hp.n_ctx_orig);
        let (global, swa) = b.rope[..2 * t * rd].split_at_mut(t * rd);
        let swa = if hp.swa_layers.iter().any(|&s| s) {
            swa
        } else {
            &mut []
        };
        rows2(pool, t, global, swa, &|i, g, w| {
            for (cs, base) in [(g, hp.rope_base), (w, hp.rope_base_swa)] {
                if !cs.is_empty() {
                    ops::rope_table(pos[i], rd, base, hp.rope_freq_scale, factors, cs);
                    if hp.rope_attn_factor != 1.0 {
                        ops::scale(cs, hp.rope_attn_factor);
                    }
                }
            }
        });
    }

    /// Final RMSNorm of every token, `x → xn`.
    fn final_norm(&self, b: &mut Buffers, pool: &dyn ThreadPool) {
        let (d, t) = (self.hp.n_embd, b.t);
        let x = &b.x[..t * d];
        rows2(pool, t, &mut b.xn[..t * d], &mut [], &|i, o, _| {
            ops::rms_norm_weighted(
                &x[i * d..(i + 1) * d],
                &self.output_norm,
                self.hp.rms_eps,
                o,
            )
        });
    }

    /// One block over the `b.t` tokens in `b.x`, in place. With a cache, the
    /// batch's keys and values are appended to their sequences and attention
    /// reads the cache; without, it reads the batch.
    fn layer(
        &self,
        il: usize,
        b: &mut Buffers,
        pos: &[usize],
        cache: Option<KvWrite<'_>>,
        keys: &(dyn Fn(usize) -> Range<usize> + Sync),
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        let hp = &self.hp;
        let l = &self.layers[il];
        let f = self.store();
        let t = b.t;
        let (d, qd, kvd, ff, hd) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.n_ff, hp.head_dim);
        let eps = hp.rms_eps;

        let x = &b.x[..t * d];
        rows2(pool, t, &mut b.xn[..t * d], &mut [], &|i, o, _| {
            ops::rms_norm_weighted(&x[i * d..(i + 1) * d], &l.attn_norm, eps, o)
        });
        if let (1, Some(kv)) = (t, &cache) {
            // Decoding: attention's reads are a few scattered KV rows, one DRAM
            // miss after another unless idle threads fetch them during Q/K/V.
            let base = kv.cache.base(kv.chunks[0].seq);
            pool.prefetch_hint(&kv.cache.spans(il, base..base + pos[0]));
        }
        let xn = &b.xn[..t * d];
        forward_many(
            [&l.wq, &l.wk, &l.wv],
            f,
            xn,
            t,
            [&mut b.q[..t * qd], &mut b.k[..t * kvd], &mut b.v[..t * kvd]],
            &mut b.scratch,
            pool,
        )?;

        let rd = hp.rope_dims;
        let table = if hp.swa_layers[il] {
            t * rd..2 * t * rd
        } else {
            0..t * rd
        };
        let rope = &b.rope[table];
        rows2(
            pool,
            t,
            &mut b.q[..t * qd],
            &mut b.k[..t * kvd],
            &|i, q, k| {
                if let (Some(bq), Some(bk)) = (&l.bq, &l.bk) {
                    ops::add_in_place(q, bq);
                    ops::add_in_place(k, bk);
                }
                if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                    q.chunks_exact_mut(hd)
                        .for_each(|h| ops::rms_norm_weighted_in_place(h, qn, eps));
                    k.chunks_exact_mut(hd)
                        .for_each(|h| ops::rms_norm_weighted_in_place(h, kn, eps));
                }
                let cs = &rope[i * rd..(i + 1) * rd];
                ops::rope_apply(q, hd, cs, hp.rope_layout);
                ops::rope_apply(k, hd, cs, hp.rope_layout);
            },
        );

        if let Some(bv) = &l.bv {
            rows2(pool, t, &mut b.v[..t * kvd], &mut [], &|_, v, _| {
                ops::add_in_place(v, bv)
            });
        }

        let shape = AttnShape {
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
            head_dim: hd,
            scale: hp.attn_scale,
            softcap: hp.attn_logit_softcap,
        };
        let q = &b.q[..t * qd];
        let att = &mut b.att[..t * qd];
        let kernel = |e| ModelError::Kernel {
            tensor: format!("blk.{il}.attention"),
            error: e,
        };
        match cache {
            None => attention(
                &shape,
                q,
                KvRows::F32(&b.k[..t * kvd]),
                KvRows::F32(&b.v[..t * kvd]),
                keys,
                att,
                pool,
            )
            .map_err(kernel)?,
            Some(kv) => {
                let mut at = 0;
                for ch in kv.chunks {
                    let r = at * kvd..(at + ch.len) * kvd;
                    let row = kv.cache.base(ch.seq) + pos[at];
                    kv.cache.store(il, row, &b.k[r.clone()], &b.v[r]);
                    at += ch.len;
                }
                let (k, v, rows) = kv.cache.heads(il);
                attention_head_major(&shape, rows, q, k, v, keys, att, pool).map_err(kernel)?
            }
        }

        let o = &mut b.o[..t * d];
        l.wo.forward(f, &b.att[..t * qd], t, o, &mut b.scratch, pool)?;
        if let Some(bo) = &l.bo {
            rows2(pool, t, o, &mut [], &|_, o, _| ops::add_in_place(o, bo));
        }
        self.residual(&l.post_attn_norm, t, o, &mut b.x[..t * d], pool);

        let x = &b.x[..t * d];
        rows2(pool, t, &mut b.xn[..t * d], &mut [], &|i, o, _| {
            ops::rms_norm_weighted(&x[i * d..(i + 1) * d], &l.ffn_norm, eps, o)
        });
        let xn = &b.xn[..t * d];
        forward_many(
            [&l.gate, &l.up],
            f,
            xn,
            t,
            [&mut b.gate[..t * ff], &mut b.up[..t * ff]],
            &mut b.scratch,
            pool,
        )?;
        let (g, u) = (&mut b.gate[..t * ff], &b.up[..t * ff]);
        let gelu = hp.family.activation == Activation::Gelu;
        rows2(pool, t, g, &mut [], &|i, g, _| {
            let u = &u[i * ff..(i + 1) * ff];
            if gelu {
                ops::gelu_mul(g, u)
            } else {
                ops::silu_mul(g, u)
            }
        });
        let o = &mut b.o[..t * d];
        l.down
            .forward(f, &b.gate[..t * ff], t, o, &mut b.scratch, pool)?;
        self.residual(&l.post_ffn_norm, t, o, &mut b.x[..t * d], pool);
        Ok(())
    }

    /// `x += scale · norm(o)` (the norm only where the model has a post-norm).
    fn residual(
        &self,
        post_norm: &Option<Vec<f32>>,
        t: usize,
        o: &mut [f32],
        x: &mut [f32],
        pool: &dyn ThreadPool,
    ) {
        rows2(pool, t, o, x, &|_, o, x| {
            if let Some(w) = post_norm {
                ops::rms_norm_weighted_in_place(o, w, self.hp.rms_eps);
            }
            if self.hp.residual_scale != 1.0 {
                ops::scale(o, self.hp.residual_scale);
            }
            ops::add_in_place(x, o);
        });
    }
}

/// One sequence's tokens in a batched forward over a [`KvCache`]
/// ([`Model::forward_batch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The cache sequence the tokens continue.
    pub seq: usize,
    /// How many consecutive tokens of the batch are this sequence's.
    pub len: usize,
    /// Whether the logits after its last token are wanted.
    pub logits: bool,
}

/// Where a layer appends the batch's keys and values.
struct KvWrite<'a> {
    cache: &'a mut KvCache,
    chunks: &'a [Chunk],
}

/// Refuses chunks that do not split `t` tokens, name a sequence the cache
/// lacks or twice, or overflow a sequence's context.
fn check_chunks(cache: &KvCache, chunks: &[Chunk], t: usize) -> Result<(), ModelError> {
    let mut total = 0;
    for (i, c) in chunks.iter().enumerate() {
        if c.seq >= cache.n_seq() || chunks[..i].iter().any(|o| o.seq == c.seq) || c.len == 0 {
            return Err(ModelError::Input(format!(
                "chunk {i} (sequence {}, {} tokens) is empty, repeated or outside the cache's {} sequences",
                c.seq,
                c.len,
                cache.n_seq()
            )));
        }
        let n = cache.lens[c.seq] + c.len;
        if n > cache.n_ctx {
            return Err(ModelError::ContextExceeded {
                n_tokens: n,
                n_ctx: cache.n_ctx,
                at_least: false,
            });
        }
        total += c.len;
    }
    if total != t {
        return Err(ModelError::Input(format!(
            "chunks cover {total} tokens of a batch of {t}"
        )));
    }
    Ok(())
}

/// The key window `[lo, hi)` around query position `i` before sequence bounds.
fn window_range(w: Window, i: usize) -> (usize, usize) {
    match w {
        Window::Symmetric(n) => (i.saturating_sub(n / 2), i + n / 2 + 1),
        Window::Trailing(n) => ((i + 1).saturating_sub(n), usize::MAX),
        Window::None => (0, usize::MAX),
    }
}
