//! The encoder stack of BERT-style embedders and cross-encoders (`bert`:
//! BERT, MiniLM, bge, e5, XLM-R; `nomic-bert`), as llama.cpp's `build_bert`:
//!
//! * input: token embedding + token-type row + the position's row (BERT;
//!   nomic-bert rotates Q and K instead), then LayerNorm with bias. The
//!   token-type row is 0, except in a pair's second segment where the file
//!   has a second row and its classification head is PyTorch's whole
//!   (`cls`, BERT's pooler, kept by `lamina convert` unless `--no-bert-pooler`): row 1
//!   there, as PyTorch's `token_type_ids`. llama.cpp always adds row 0, and
//!   a file without the pooler is what llama.cpp computes, so it gets row 0
//!   too (XLM-R has one row anyway);
//! * post-norm blocks: attention with biases → add → LayerNorm →
//!   feed-forward (GELU-erf of `ffn_up`, or SwiGLU of `ffn_gate`/`ffn_up`)
//!   → add → LayerNorm;
//! * bidirectional attention within each sequence of the batch.
//!
//! It runs on the decoder's machinery ([`crate::transformer`]): activations
//! as `T × width` rows in the same [`Workspace`], one batched matmul per
//! projection over the whole packed batch, per-row work (biases, RoPE,
//! LayerNorm, GELU) fused in one parallel pass per step, attention through
//! [`lamina_kernels::attention`] with each query's keys limited to its own
//! sequence. Once the workspace is sized a forward allocates nothing.

mod tensors;

use lamina_kernels::attention::{AttnShape, KvRows, attention};
use lamina_kernels::ops;
use lamina_kernels::pool::{ThreadPool, rows2};

use crate::ModelError;
use crate::hparams::HParams;
use crate::transformer::{Model, Workspace};
use crate::weights::{Linear, Loader, Store, forward_many};
use lamina_kernels::matmul::Scratch;
use tensors::{EncLayer, Norm};

/// An encoder's weights beyond the token embedding (which [`Model`] holds).
#[derive(Debug)]
pub(crate) struct Encoder {
    /// Absolute position rows (BERT); `None` for rotary families.
    pos_embd: Option<Linear>,
    /// Token-type rows, `n_token_types × n_embd`.
    types: Option<Vec<f32>>,
    embd_norm: Norm,
    layers: Vec<EncLayer>,
}

impl Encoder {
    pub(crate) fn load<D: AsRef<[u8]>>(
        ld: &Loader<'_, D>,
        hp: &HParams,
    ) -> Result<Encoder, ModelError> {
        let layers = (0..hp.n_layer)
            .map(|il| EncLayer::load(ld, hp, il))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Encoder {
            pos_embd: tensors::positions(ld, hp)?,
            types: tensors::token_types(ld, hp)?,
            embd_norm: Norm {
                w: ld.vector("token_embd_norm.weight", hp.n_embd)?,
                b: ld.vector("token_embd_norm.bias", hp.n_embd)?,
            },
            layers,
        })
    }

    /// Every weight matrix, in the order a forward reads them.
    pub(crate) fn matrices(&self) -> impl Iterator<Item = &Linear> {
        self.layers.iter().flat_map(EncLayer::matrices)
    }

    pub(crate) fn matrices_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers.iter_mut().flat_map(EncLayer::matrices_mut)
    }

    /// Whether a pair's second segment gets its own token-type row: where
    /// the table has one and the file keeps PyTorch's classification head
    /// whole (BERT's pooler as `cls`). The pinned converter drops that
    /// pooler, and such a file is llama.cpp's model, which adds row 0 to
    /// every token: computing as llama.cpp does is the only way to be
    /// comparable with anything.
    pub(crate) fn has_segment_b(&self, hp: &HParams, pooler: bool) -> bool {
        self.types.is_some() && hp.n_token_types >= 2 && pooler
    }

    /// Runs the `ws.bufs.t` tokens whose positions, sequences and segments
    /// `ws` already holds; leaves the last block's output in `ws.bufs.xn`.
    pub(crate) fn forward(
        &self,
        m: &Model,
        ws: &mut Workspace,
        tokens: &[u32],
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        let hp = &m.hp;
        let d = hp.n_embd;
        let Workspace {
            bufs: b,
            pos,
            seq,
            types,
            ..
        } = ws;
        let t = b.t;
        let f = m.store();
        // Token rows into `x`, position rows into `o`: the lookups may fail
        // (a type with no row kernel), so they run before the parallel pass.
        for (i, &tok) in tokens.iter().enumerate() {
            m.tok_embd
                .row(f, tok as usize, &mut b.x[i * d..(i + 1) * d])?;
            if let Some(pe) = &self.pos_embd {
                pe.row(f, pos[i], &mut b.o[i * d..(i + 1) * d])?;
            }
        }
        let seg = &types[..t];
        let n_types = if m.has_segment_b() { 2 } else { 1 };
        rows2(pool, t, &mut b.x[..t * d], &mut b.o[..t * d], &|i, x, p| {
            if let Some(ty) = &self.types {
                let r = usize::from(seg[i]).min(n_types - 1);
                ops::add_in_place(x, &ty[r * d..(r + 1) * d]);
            }
            if self.pos_embd.is_some() {
                ops::add_in_place(x, p);
            }
            ops::layer_norm_in_place(x, &self.embd_norm.w, &self.embd_norm.b, hp.rms_eps);
        });
        let rotary = self.pos_embd.is_none();
        if rotary {
            m.rope_tables(b, &pos[..t], hp.n_ctx_orig, pool);
        }
        let seq = &seq[..t];
        let keys = |i: usize| -> std::ops::Range<usize> { seq[i].0..seq[i].1 };
        for (il, l) in self.layers.iter().enumerate() {
            self.block(m, il, l, b, rotary, &keys, pool)?;
        }
        b.xn[..t * d].copy_from_slice(&b.x[..t * d]);
        Ok(())
    }

    /// One post-norm block over `b.x`, in place.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        m: &Model,
        il: usize,
        l: &EncLayer,
        b: &mut crate::transformer::Buffers,
        rotary: bool,
        keys: &(dyn Fn(usize) -> std::ops::Range<usize> + Sync),
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        let hp = &m.hp;
        let f = m.store();
        let t = b.t;
        let (d, qd, kvd, ff, hd) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.n_ff, hp.head_dim);
        let eps = hp.rms_eps;
        forward_many(
            [&l.wq, &l.wk, &l.wv],
            f,
            &b.x[..t * d],
            t,
            [&mut b.q[..t * qd], &mut b.k[..t * kvd], &mut b.v[..t * kvd]],
            &mut b.scratch,
            pool,
        )?;
        let rd = hp.rope_dims;
        let rope = &b.rope[..if rotary { t * rd } else { 0 }];
        rows2(
            pool,
            t,
            &mut b.q[..t * qd],
            &mut b.k[..t * kvd],
            &|i, q, k| {
                if let Some(bq) = &l.bq {
                    ops::add_in_place(q, bq);
                }
                if let Some(bk) = &l.bk {
                    ops::add_in_place(k, bk);
                }
                if rotary {
                    let cs = &rope[i * rd..(i + 1) * rd];
                    ops::rope_apply(q, hd, cs, hp.rope_layout);
                    ops::rope_apply(k, hd, cs, hp.rope_layout);
                }
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
            softcap: None,
        };
        attention(
            &shape,
            &b.q[..t * qd],
            KvRows::F32(&b.k[..t * kvd]),
            KvRows::F32(&b.v[..t * kvd]),
            keys,
            &mut b.att[..t * qd],
            pool,
        )
        .map_err(|e| ModelError::Kernel {
            tensor: format!("blk.{il}.attention"),
            error: e,
        })?;
        let sub = SubLayer { f, t, d, eps, pool };
        sub.out(
            &l.wo,
            &b.att[..t * qd],
            &mut b.o,
            &mut b.x,
            &mut b.scratch,
            &l.bo,
            &l.attn_norm,
        )?;

        match &l.gate {
            None => {
                l.up.forward(
                    f,
                    &b.x[..t * d],
                    t,
                    &mut b.gate[..t * ff],
                    &mut b.scratch,
                    pool,
                )?;
                rows2(pool, t, &mut b.gate[..t * ff], &mut [], &|_, u, _| {
                    if let Some(ub) = &l.up_b {
                        ops::add_in_place(u, ub);
                    }
                    ops::gelu_erf(u);
                });
            }
            Some(gate) => {
                forward_many(
                    [gate, &l.up],
                    f,
                    &b.x[..t * d],
                    t,
                    [&mut b.gate[..t * ff], &mut b.up[..t * ff]],
                    &mut b.scratch,
                    pool,
                )?;
                rows2(
                    pool,
                    t,
                    &mut b.gate[..t * ff],
                    &mut b.up[..t * ff],
                    &|_, g, u| {
                        if let Some(ub) = &l.up_b {
                            ops::add_in_place(u, ub);
                        }
                        ops::silu_mul(g, u);
                    },
                );
            }
        }
        sub.out(
            &l.down,
            &b.gate[..t * ff],
            &mut b.o,
            &mut b.x,
            &mut b.scratch,
            &l.down_b,
            &l.out_norm,
        )
    }
}

/// What the two output steps of a block (attention's, the feed-forward's)
/// share.
struct SubLayer<'a> {
    f: Store<'a>,
    t: usize,
    d: usize,
    eps: f32,
    pool: &'a dyn ThreadPool,
}

impl SubLayer<'_> {
    /// `x = LayerNorm(x + W·input + bias)` per row, with `o` holding `W·input`.
    #[allow(clippy::too_many_arguments)]
    fn out(
        &self,
        w: &Linear,
        input: &[f32],
        o: &mut [f32],
        x: &mut [f32],
        scratch: &mut Scratch,
        bias: &Option<Vec<f32>>,
        norm: &Norm,
    ) -> Result<(), ModelError> {
        let (t, n) = (self.t, self.t * self.d);
        let (o, x) = (&mut o[..n], &mut x[..n]);
        w.forward(self.f, input, t, o, scratch, self.pool)?;
        rows2(self.pool, t, o, x, &|_, o, x| {
            if let Some(bias) = bias {
                ops::add_in_place(o, bias);
            }
            ops::add_in_place(x, o);
            ops::layer_norm_in_place(x, &norm.w, &norm.b, self.eps);
        });
        Ok(())
    }
}
