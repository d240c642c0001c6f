//! The decoder stack shared by every architecture: Llama (pre-norm, SwiGLU,
//! normal RoPE) and the Gemma 3 family (√n_embd input scale, QK norm,
//! sandwich norms, GELU, NeoX RoPE, sliding-window layers).
//!
//! A forward runs a batch of `T` tokens through all layers with activations
//! as `T × width` row-major f32 in a [`Workspace`]; every projection is one
//! batched matmul. Attention differs by use:
//! * [`Model::forward_sequences`] (embeddings): several independent sequences
//!   in one batch, each attending only to itself (bidirectional, or causal),
//!   keys and values taken straight from the batch.
//! * [`Model::forward_cached`] (generation): one sequence continued from a
//!   [`KvCache`]; the batch's keys and values are appended to the cache and
//!   queries attend causally over it.
//!
//! Once the workspace and cache are sized, a forward allocates nothing.

use std::ops::Range;

use half::f16;
use lamina_gguf::Gguf;
use lamina_kernels::attention::{AttnShape, KvRows, attention};
use lamina_kernels::matmul::Scratch;
use lamina_kernels::ops;
use lamina_kernels::pool::{Span, ThreadPool, rows2};

use crate::ModelError;
use crate::hparams::{Arch, HParams, Window};
use crate::load::LoadOptions;
use crate::tokenizer::Tokenizer;
use crate::weights::{Linear, Loader, Store, forward_many, store_panels};

/// One block's weights.
#[derive(Debug)]
pub struct Layer {
    attn_norm: Vec<f32>,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
    post_ffn_norm: Option<Vec<f32>>,
}

impl Layer {
    /// The block's seven weight matrices.
    fn matrices(&self) -> [&Linear; 7] {
        [
            &self.wq, &self.wk, &self.wv, &self.wo, &self.gate, &self.up, &self.down,
        ]
    }

    fn matrices_mut(&mut self) -> [&mut Linear; 7] {
        [
            &mut self.wq,
            &mut self.wk,
            &mut self.wv,
            &mut self.wo,
            &mut self.gate,
            &mut self.up,
            &mut self.down,
        ]
    }
}

/// A loaded model: the mapped file and where each weight lies in it.
pub struct Model {
    pub file: Gguf,
    /// The matrices stored as panels at load ([`store_panels`]), if any.
    panels: Option<lamina_gguf::Mmap>,
    pub hp: HParams,
    tok_embd: Linear,
    output_norm: Vec<f32>,
    /// The LM head (the token embedding when tied); `None` for embedding models.
    output: Option<Linear>,
    rope_freqs: Option<Vec<f32>>,
    layers: Vec<Layer>,
    /// Sentence-transformers dense head (`dense_2`, `dense_3`), applied after pooling.
    pub(crate) dense: Vec<Linear>,
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
        let (d, qd, kvd, ff, hd) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.n_ff, hp.head_dim);
        let gemma = hp.arch.is_gemma();
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}.weight");
            let opt_vec = |s: &str, len: usize| -> Result<Option<Vec<f32>>, ModelError> {
                if gemma {
                    ld.vector(&n(s), len).map(Some)
                } else {
                    Ok(None)
                }
            };
            layers.push(Layer {
                attn_norm: ld.vector(&n("attn_norm"), d)?,
                wq: ld.linear(&n("attn_q"), d, qd)?,
                wk: ld.linear(&n("attn_k"), d, kvd)?,
                wv: ld.linear(&n("attn_v"), d, kvd)?,
                wo: ld.linear(&n("attn_output"), qd, d)?,
                q_norm: opt_vec("attn_q_norm", hd)?,
                k_norm: opt_vec("attn_k_norm", hd)?,
                post_attn_norm: opt_vec("post_attention_norm", d)?,
                ffn_norm: ld.vector(&n("ffn_norm"), d)?,
                gate: ld.linear(&n("ffn_gate"), d, ff)?,
                up: ld.linear(&n("ffn_up"), d, ff)?,
                down: ld.linear(&n("ffn_down"), ff, d)?,
                post_ffn_norm: opt_vec("post_ffw_norm", d)?,
            });
        }
        let tok_embd = ld.linear("token_embd.weight", d, hp.n_vocab)?;
        let output = match hp.arch {
            Arch::GemmaEmbedding => None,
            _ if ld.has("output.weight") => Some(ld.linear("output.weight", d, hp.n_vocab)?),
            _ => Some(tok_embd.clone()),
        };
        let rope_freqs = if ld.has("rope_freqs.weight") {
            Some(ld.vector("rope_freqs.weight", hp.rope_dims / 2)?)
        } else {
            None
        };
        let mut dense = Vec::new();
        if hp.arch == Arch::GemmaEmbedding {
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
        let output_norm = ld.vector("output_norm.weight", d)?;
        let mut tok_embd = tok_embd;
        let mut output = output;
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
            rope_freqs,
            layers,
            dense,
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
        let all = self.layers.iter().flat_map(Layer::matrices);
        for w in all
            .chain(std::iter::once(&self.tok_embd))
            .chain(self.dense.iter())
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
        let layers: usize = self
            .layers
            .iter()
            .flat_map(Layer::matrices)
            .map(|w| w.len)
            .sum();
        layers + self.output.as_ref().map_or(0, |o| o.len)
    }

    /// The ISA path the matmuls of this model use.
    pub fn isa(&self) -> lamina_kernels::Isa {
        self.layers
            .first()
            .map_or(lamina_kernels::Isa::Scalar, |l| l.wq.kernels.isa)
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
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
        let t = tokens.len();
        ws.ensure(&self.hp, t);
        let Workspace { bufs, pos, seq, .. } = ws;
        let mut covered = 0;
        for s in seqs {
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
            for (i, p) in s.clone().enumerate() {
                pos[p] = i;
                seq[p] = (s.start, s.end);
            }
            covered = s.end;
        }
        if covered != t {
            return Err(ModelError::Input(
                "sequence ranges do not cover the batch".into(),
            ));
        }
        bufs.t = t;
        self.embed_tokens(bufs, tokens)?;
        self.rope_tables(bufs, &pos[..t], pool);
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
        let output = self.output.as_ref().ok_or_else(|| {
            ModelError::Input(format!(
                "{} is an embedding model: it has no LM head to generate with",
                self.hp.arch_name
            ))
        })?;
        let t = tokens.len();
        let p0 = cache.len;
        if p0 + t > cache.n_ctx {
            return Err(ModelError::ContextExceeded {
                n_tokens: p0 + t,
                n_ctx: cache.n_ctx,
                at_least: false,
            });
        }
        let n_out = if all_logits { t } else { t.min(1) };
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
        let Workspace { bufs, pos, .. } = ws;
        for (i, p) in pos[..t].iter_mut().enumerate() {
            *p = p0 + i;
        }
        bufs.t = t;
        self.embed_tokens(bufs, tokens)?;
        self.rope_tables(bufs, &pos[..t], pool);
        for il in 0..self.hp.n_layer {
            let window = self.hp.layer_window(il);
            // Query `i` sits at cache row `p0 + i`.
            let keys = move |i: usize| -> Range<usize> {
                let (lo, hi) = window_range(window, p0 + i);
                lo..hi.min(p0 + i + 1)
            };
            self.layer(il, bufs, &pos[..t], Some(&mut *cache), &keys, pool)?;
        }
        cache.len = p0 + t;
        self.final_norm(bufs, pool);
        let d = self.hp.n_embd;
        let first = t - n_out;
        let x = &bufs.xn[first * d..t * d];
        output.forward(self.store(), x, n_out, logits, &mut bufs.scratch, pool)?;
        if self.hp.logit_scale != 1.0 {
            ops::scale(logits, 1.0 / self.hp.logit_scale);
        }
        if let Some(c) = self.hp.final_logit_softcap {
            logits.iter_mut().for_each(|l| *l = c * (*l / c).tanh());
        }
        Ok(())
    }

    /// The batch's RoPE tables (`b.rope`), once per forward instead of once
    /// per layer and per Q and K: the same values, computed the same way.
    fn rope_tables(&self, b: &mut Buffers, pos: &[usize], pool: &dyn ThreadPool) {
        let hp = &self.hp;
        let (t, rd) = (b.t, hp.rope_dims);
        let factors = self.rope_freqs.as_deref();
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
    /// batch's keys and values are appended at `pos` and attention reads the
    /// cache; without, it reads the batch.
    fn layer(
        &self,
        il: usize,
        b: &mut Buffers,
        pos: &[usize],
        cache: Option<&mut KvCache>,
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
        if let (1, Some(c)) = (t, cache.as_deref()) {
            // Decoding: attention's reads are a few scattered KV rows, one DRAM
            // miss after another unless idle threads fetch them during Q/K/V.
            pool.prefetch_hint(&c.spans(il, pos[0]));
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
            Some(c) => {
                let n = pos[t - 1] + 1;
                c.store(il, pos[0], &b.k[..t * kvd], &b.v[..t * kvd]);
                let (k, v) = c.rows(il, n);
                attention(&shape, q, k, v, keys, att, pool).map_err(kernel)?
            }
        }

        let o = &mut b.o[..t * d];
        l.wo.forward(f, &b.att[..t * qd], t, o, &mut b.scratch, pool)?;
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
        let gelu = hp.arch.is_gemma();
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

/// The key window `[lo, hi)` around query position `i` before sequence bounds.
fn window_range(w: Window, i: usize) -> (usize, usize) {
    match w {
        Window::Symmetric(n) => (i.saturating_sub(n / 2), i + n / 2 + 1),
        Window::Trailing(n) => ((i + 1).saturating_sub(n), usize::MAX),
        Window::None => (0, usize::MAX),
    }
}

/// Activation buffers of a forward pass, sized for a number of tokens.
#[derive(Debug, Default)]
pub struct Buffers {
    /// Tokens in the current batch.
    t: usize,
    /// Residual stream, `T × n_embd`.
    x: Vec<f32>,
    /// Normed input of a projection, `T × n_embd` (final hidden state at the end).
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    /// RoPE cosine and sine tables of the batch's positions ([`ops::rope_table`]):
    /// `T × rope_dims` for the global base, then as many for the sliding-window
    /// layers' base where the model has such layers.
    rope: Vec<f32>,
    scratch: Scratch,
}

/// Everything a forward pass writes, reused across calls.
#[derive(Debug, Default)]
pub struct Workspace {
    bufs: Buffers,
    pos: Vec<usize>,
    /// Per token: the batch range of its sequence.
    seq: Vec<(usize, usize)>,
    n_embd: usize,
}

impl Workspace {
    /// A workspace already sized for batches of `tokens`.
    pub fn new(hp: &HParams, tokens: usize) -> Workspace {
        let mut ws = Workspace::default();
        ws.ensure(hp, tokens);
        ws
    }

    /// Grows (never shrinks) the buffers for `tokens`; allocates only when growing.
    pub fn ensure(&mut self, hp: &HParams, tokens: usize) {
        let b = &mut self.bufs;
        if b.x.len() >= tokens * hp.n_embd
            && b.gate.len() >= tokens * hp.n_ff
            && b.q.len() >= tokens * hp.q_dim()
            && b.k.len() >= tokens * hp.kv_dim()
            && b.rope.len() >= 2 * tokens * hp.rope_dims
        {
            return;
        }
        let grow = |v: &mut Vec<f32>, n: usize| v.resize(n.max(v.len()), 0.0);
        grow(&mut b.x, tokens * hp.n_embd);
        grow(&mut b.xn, tokens * hp.n_embd);
        grow(&mut b.o, tokens * hp.n_embd);
        grow(&mut b.q, tokens * hp.q_dim());
        grow(&mut b.att, tokens * hp.q_dim());
        grow(&mut b.k, tokens * hp.kv_dim());
        grow(&mut b.v, tokens * hp.kv_dim());
        grow(&mut b.gate, tokens * hp.n_ff);
        grow(&mut b.up, tokens * hp.n_ff);
        grow(&mut b.rope, 2 * tokens * hp.rope_dims);
        self.pos.resize(tokens.max(self.pos.len()), 0);
        self.seq.resize(tokens.max(self.seq.len()), (0, 0));
        // Quantized activations of the widest input; F32 (4 bytes a value) is the worst case.
        let widest = hp.n_embd.max(hp.n_ff).max(hp.q_dim());
        b.scratch.reserve_bytes(tokens * widest * 4);
        self.n_embd = hp.n_embd;
    }

    /// The final-normed hidden states of the last forward: `T × n_embd`.
    pub fn hidden(&self) -> &[f32] {
        &self.bufs.xn[..self.bufs.t * self.n_embd]
    }
}

/// Keys and values of past positions, per layer, for one sequence.
#[derive(Debug)]
pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    /// Positions filled.
    len: usize,
    layers: Vec<(KvBuf, KvBuf)>,
}

/// The element type of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    F16,
    F32,
}

#[derive(Debug)]
enum KvBuf {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl KvCache {
    /// A cache of `n_ctx` positions (all allocated now).
    pub fn new(hp: &HParams, n_ctx: usize, ty: KvType) -> KvCache {
        let n = n_ctx * hp.kv_dim();
        let buf = || match ty {
            KvType::F16 => KvBuf::F16(vec![f16::ZERO; n]),
            KvType::F32 => KvBuf::F32(vec![0.0; n]),
        };
        KvCache {
            n_ctx,
            kv_dim: hp.kv_dim(),
            len: 0,
            layers: (0..hp.n_layer).map(|_| (buf(), buf())).collect(),
        }
    }

    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Forgets positions from `len` on (to reuse a common prefix).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn store(&mut self, il: usize, p0: usize, k: &[f32], v: &[f32]) {
        let at = p0 * self.kv_dim;
        let (kb, vb) = &mut self.layers[il];
        for (src, dst) in [(k, kb), (v, vb)] {
            match dst {
                KvBuf::F16(d) => ops::f32_to_f16(src, &mut d[at..at + src.len()]),
                KvBuf::F32(d) => d[at..at + src.len()].copy_from_slice(src),
            }
        }
    }

    /// The memory of layer `il`'s first `n` key and value rows.
    fn spans(&self, il: usize, n: usize) -> [Span; 2] {
        let m = n * self.kv_dim;
        let (k, v) = &self.layers[il];
        [k, v].map(|b| match b {
            KvBuf::F16(d) => Span::of(&d[..m]),
            KvBuf::F32(d) => Span::of(&d[..m]),
        })
    }

    fn rows(&self, il: usize, n: usize) -> (KvRows<'_>, KvRows<'_>) {
        fn view(b: &KvBuf, m: usize) -> KvRows<'_> {
            match b {
                KvBuf::F16(d) => KvRows::F16(&d[..m]),
                KvBuf::F32(d) => KvRows::F32(&d[..m]),
            }
        }
        let m = n * self.kv_dim;
        let (k, v) = &self.layers[il];
        (view(k, m), view(v, m))
    }
}
