//! Which tensors a block reads, by family ([`crate::family`]) and by name:
//! Q/K/V fused or separate, biases where the file has them, gate and up
//! fused or separate, the norms a family requires.

use crate::ModelError;
use crate::family::Family;
use crate::hparams::HParams;
use crate::weights::{Linear, Loader};

/// One block's weights.
#[derive(Debug)]
pub struct Layer {
    pub(super) attn_norm: Vec<f32>,
    pub(super) wq: Linear,
    pub(super) wk: Linear,
    pub(super) wv: Linear,
    pub(super) wo: Linear,
    /// Biases of Q, K, V (Qwen 2) and of the attention output.
    pub(super) bq: Option<Vec<f32>>,
    pub(super) bk: Option<Vec<f32>>,
    pub(super) bv: Option<Vec<f32>>,
    pub(super) bo: Option<Vec<f32>>,
    pub(super) q_norm: Option<Vec<f32>>,
    pub(super) k_norm: Option<Vec<f32>>,
    pub(super) post_attn_norm: Option<Vec<f32>>,
    pub(super) ffn_norm: Vec<f32>,
    pub(super) gate: Linear,
    pub(super) up: Linear,
    pub(super) down: Linear,
    pub(super) post_ffn_norm: Option<Vec<f32>>,
}

impl Layer {
    /// The block's seven weight matrices.
    pub(super) fn matrices(&self) -> [&Linear; 7] {
        [
            &self.wq, &self.wk, &self.wv, &self.wo, &self.gate, &self.up, &self.down,
        ]
    }

    pub(super) fn matrices_mut(&mut self) -> [&mut Linear; 7] {
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

    /// Block `il`'s tensors, checked against the hyper-parameters.
    pub(super) fn load<D: AsRef<[u8]>>(
        ld: &Loader<'_, D>,
        hp: &HParams,
        il: usize,
    ) -> Result<Layer, ModelError> {
        let fam: &Family = hp.family;
        let (d, qd, ff, hd) = (hp.n_embd, hp.q_dim(), hp.n_ff, hp.head_dim);
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let bias = |s: &str, len: usize| optional(ld, &format!("blk.{il}.{s}.bias"), len);
        let required = |s: &str, len: usize, yes: bool| -> Result<Option<Vec<f32>>, ModelError> {
            if yes {
                ld.vector(&n(s), len).map(Some)
            } else {
                Ok(None)
            }
        };

        let (wq, wk, wv, bq, bk, bv) = qkv(ld, hp, il)?;
        let (gate, up) = if fam.fused_gate_up {
            let up = n("ffn_up");
            (
                ld.linear_rows(&up, d, 2 * ff, 0..ff)?,
                ld.linear_rows(&up, d, 2 * ff, ff..2 * ff)?,
            )
        } else {
            (
                ld.linear(&n("ffn_gate"), d, ff)?,
                ld.linear(&n("ffn_up"), d, ff)?,
            )
        };
        Ok(Layer {
            attn_norm: ld.vector(&n("attn_norm"), d)?,
            wq,
            wk,
            wv,
            wo: ld.linear(&n("attn_output"), qd, d)?,
            bq,
            bk,
            bv,
            bo: bias("attn_output", d)?,
            q_norm: required("attn_q_norm", hd, fam.qk_norm)?,
            k_norm: required("attn_k_norm", hd, fam.qk_norm)?,
            post_attn_norm: required("post_attention_norm", d, fam.post_norms)?,
            ffn_norm: ld.vector(&n("ffn_norm"), d)?,
            gate,
            up,
            down: ld.linear(&n("ffn_down"), ff, d)?,
            post_ffn_norm: required("post_ffw_norm", d, fam.post_norms)?,
        })
    }
}

/// One block's Q, K and V weights, then their biases where the file has them.
pub(crate) type Qkv = (
    Linear,
    Linear,
    Linear,
    Option<Vec<f32>>,
    Option<Vec<f32>>,
    Option<Vec<f32>>,
);

/// Block `il`'s Q, K and V: one fused `attn_qkv` split into three weights
/// read in place (its bias split alike), or three tensors.
pub(crate) fn qkv<D: AsRef<[u8]>>(
    ld: &Loader<'_, D>,
    hp: &HParams,
    il: usize,
) -> Result<Qkv, ModelError> {
    let (d, qd, kvd) = (hp.n_embd, hp.q_dim(), hp.kv_dim());
    let n = |s: &str| format!("blk.{il}.{s}.weight");
    let bias = |s: &str, len: usize| optional(ld, &format!("blk.{il}.{s}.bias"), len);
    let qkv = n("attn_qkv");
    if !ld.has(&qkv) {
        return Ok((
            ld.linear(&n("attn_q"), d, qd)?,
            ld.linear(&n("attn_k"), d, kvd)?,
            ld.linear(&n("attn_v"), d, kvd)?,
            bias("attn_q", qd)?,
            bias("attn_k", kvd)?,
            bias("attn_v", kvd)?,
        ));
    }
    let rows = qd + 2 * kvd;
    let (q, k, v) = (0..qd, qd..qd + kvd, qd + kvd..rows);
    let (bq, bk, bv) = match bias("attn_qkv", rows)? {
        Some(b) => (
            Some(b[q.clone()].to_vec()),
            Some(b[k.clone()].to_vec()),
            Some(b[v.clone()].to_vec()),
        ),
        None => (
            bias("attn_q", qd)?,
            bias("attn_k", kvd)?,
            bias("attn_v", kvd)?,
        ),
    };
    Ok((
        ld.linear_rows(&qkv, d, rows, q)?,
        ld.linear_rows(&qkv, d, rows, k)?,
        ld.linear_rows(&qkv, d, rows, v)?,
        bq,
        bk,
        bv,
    ))
}

/// A vector the file may or may not have.
pub(crate) fn optional<D: AsRef<[u8]>>(
    ld: &Loader<'_, D>,
    name: &str,
    len: usize,
) -> Result<Option<Vec<f32>>, ModelError> {
    if ld.has(name) {
        ld.vector(name, len).map(Some)
    } else {
        Ok(None)
    }
}

/// The frequency divisors of RoPE's pairs, if the model has any.
#[derive(Debug)]
pub(super) enum RopeFactors {
    None,
    /// Llama 3's `rope_freqs`, whatever the context.
    Fixed(Vec<f32>),
    /// Phi-3's LongRoPE: the long factors for contexts beyond the original
    /// training context, the short ones otherwise (llama.cpp's rule).
    ByContext {
        short: Vec<f32>,
        long: Vec<f32>,
    },
}

impl RopeFactors {
    pub(super) fn load<D: AsRef<[u8]>>(
        ld: &Loader<'_, D>,
        hp: &HParams,
    ) -> Result<RopeFactors, ModelError> {
        let half = hp.rope_dims / 2;
        if let Some(f) = optional(ld, "rope_freqs.weight", half)? {
            return Ok(RopeFactors::Fixed(f));
        }
        let short = optional(ld, "rope_factors_short.weight", half)?;
        let long = optional(ld, "rope_factors_long.weight", half)?;
        match (short, long) {
            (None, None) => Ok(RopeFactors::None),
            (Some(short), Some(long)) if hp.family.long_rope => {
                Ok(RopeFactors::ByContext { short, long })
            }
            _ => Err(ModelError::Unsupported(format!(
                "{}: LongRoPE factors (rope_factors_long/short) need both tensors and a \
                 family that uses them (phi3)",
                hp.arch_name
            ))),
        }
    }

    /// The factors for a context of `n_ctx` positions.
    pub(super) fn for_context(&self, n_ctx: usize, n_ctx_orig: usize) -> Option<&[f32]> {
        match self {
            RopeFactors::None => None,
            RopeFactors::Fixed(f) => Some(f),
            RopeFactors::ByContext { long, .. } if n_ctx > n_ctx_orig => Some(long),
            RopeFactors::ByContext { short, .. } => Some(short),
        }
    }
}
