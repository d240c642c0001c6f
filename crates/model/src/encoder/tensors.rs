//! The tensors of an encoder: embeddings (token, position, token type) with
//! their LayerNorm, and per block the attention, post-norms and the
//! feed-forward, all with the biases BERT files carry. Sizes read from the
//! file (position and token-type rows) are checked against the
//! hyper-parameters before a forward can index them.

use crate::ModelError;
use crate::family::{Activation, Positions};
use crate::hparams::HParams;
use crate::transformer::{optional, qkv};
use crate::weights::{Linear, Loader, Store};

/// A LayerNorm's weight and bias.
#[derive(Debug)]
pub(crate) struct Norm {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
}

impl Norm {
    fn load<D: AsRef<[u8]>>(ld: &Loader<'_, D>, name: &str, n: usize) -> Result<Norm, ModelError> {
        Ok(Norm {
            w: ld.vector(&format!("{name}.weight"), n)?,
            b: ld.vector(&format!("{name}.bias"), n)?,
        })
    }
}

/// One post-norm block.
#[derive(Debug)]
pub(crate) struct EncLayer {
    pub(crate) wq: Linear,
    pub(crate) wk: Linear,
    pub(crate) wv: Linear,
    pub(crate) bq: Option<Vec<f32>>,
    pub(crate) bk: Option<Vec<f32>>,
    pub(crate) bv: Option<Vec<f32>>,
    pub(crate) wo: Linear,
    pub(crate) bo: Option<Vec<f32>>,
    /// After attention and its residual add (`attn_output_norm`).
    pub(crate) attn_norm: Norm,
    pub(crate) up: Linear,
    pub(crate) up_b: Option<Vec<f32>>,
    /// SwiGLU's gate (nomic-bert); `None` for GELU.
    pub(crate) gate: Option<Linear>,
    pub(crate) down: Linear,
    pub(crate) down_b: Option<Vec<f32>>,
    /// After the feed-forward and its residual add (`layer_output_norm`).
    pub(crate) out_norm: Norm,
}

impl EncLayer {
    pub(crate) fn load<D: AsRef<[u8]>>(
        ld: &Loader<'_, D>,
        hp: &HParams,
        il: usize,
    ) -> Result<EncLayer, ModelError> {
        let (d, qd, ff) = (hp.n_embd, hp.q_dim(), hp.n_ff);
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let bias = |s: &str, len: usize| optional(ld, &format!("blk.{il}.{s}.bias"), len);
        let (wq, wk, wv, bq, bk, bv) = qkv(ld, hp, il)?;
        let gate = match hp.family.activation {
            Activation::GeluErf => None,
            Activation::Silu => Some(ld.linear(&n("ffn_gate"), d, ff)?),
            Activation::Gelu => {
                return Err(ModelError::Unsupported(format!(
                    "{}: a GeGLU feed-forward in an encoder",
                    hp.arch_name
                )));
            }
        };
        Ok(EncLayer {
            wq,
            wk,
            wv,
            bq,
            bk,
            bv,
            wo: ld.linear(&n("attn_output"), qd, d)?,
            bo: bias("attn_output", d)?,
            attn_norm: Norm::load(ld, &format!("blk.{il}.attn_output_norm"), d)?,
            up: ld.linear(&n("ffn_up"), d, ff)?,
            up_b: bias("ffn_up", ff)?,
            gate,
            down: ld.linear(&n("ffn_down"), ff, d)?,
            down_b: bias("ffn_down", d)?,
            out_norm: Norm::load(ld, &format!("blk.{il}.layer_output_norm"), d)?,
        })
    }

    pub(crate) fn matrices(&self) -> impl Iterator<Item = &Linear> {
        [&self.wq, &self.wk, &self.wv, &self.wo, &self.up]
            .into_iter()
            .chain(self.gate.as_ref())
            .chain([&self.down])
    }

    pub(crate) fn matrices_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        [
            &mut self.wq,
            &mut self.wk,
            &mut self.wv,
            &mut self.wo,
            &mut self.up,
        ]
        .into_iter()
        .chain(self.gate.as_mut())
        .chain([&mut self.down])
    }
}

/// Absolute position embeddings (BERT): `position_embd` must have a row for
/// every position of the context, as llama.cpp requires; `None` for rotary
/// families.
pub(crate) fn positions<D: AsRef<[u8]>>(
    ld: &Loader<'_, D>,
    hp: &HParams,
) -> Result<Option<Linear>, ModelError> {
    match hp.family.encoder {
        Some(Positions::Absolute) => ld
            .linear("position_embd.weight", hp.n_embd, hp.n_ctx_train)
            .map(Some),
        _ => Ok(None),
    }
}

/// Token-type (segment) rows, dequantized: `n_token_types × n_embd`, or
/// `None` when the file has none.
pub(crate) fn token_types<D: AsRef<[u8]>>(
    ld: &Loader<'_, D>,
    hp: &HParams,
) -> Result<Option<Vec<f32>>, ModelError> {
    if !ld.has("token_types.weight") {
        return Ok(None);
    }
    let (d, n) = (hp.n_embd, hp.n_token_types);
    if n == 0 || n > 16 {
        return Err(ModelError::Unsupported(format!(
            "token_types.weight has {n} rows; an encoder has 1 to 16 segment types"
        )));
    }
    let lin = ld.linear("token_types.weight", d, n)?;
    let store = Store {
        file: ld.g.as_bytes(),
        panels: &[],
    };
    let mut rows = vec![0.0f32; n * d];
    for (r, out) in rows.chunks_exact_mut(d).enumerate() {
        lin.row(store, r, out)?;
    }
    Ok(Some(rows))
}
