//! What follows the token states: pooling them into one row per text, the
//! sentence-transformers dense head, and a cross-encoder's classification
//! head (llama.cpp's `rank` pooling: the first token → `cls` + bias → tanh
//! → `cls.output` + bias → logits; either layer may be absent, as there).

use std::ops::Range;

use lamina_kernels::matmul::Scratch;
use lamina_kernels::ops;
use lamina_kernels::pool::ThreadPool;

use crate::ModelError;
use crate::hparams::{HParams, Pooling};
use crate::transformer::optional;
use crate::weights::{Linear, Loader, Store};

/// A cross-encoder's classification head.
#[derive(Debug)]
pub(crate) struct RankHead {
    cls: Option<(Linear, Option<Vec<f32>>)>,
    out: Option<(Linear, Option<Vec<f32>>)>,
    /// Logits per pair (labels).
    pub(crate) n_out: usize,
}

/// Most labels a classification head may have.
const MAX_LABELS: usize = 1 << 16;

impl RankHead {
    /// The head, where the file has one; a `rank` model must.
    pub(crate) fn load<D: AsRef<[u8]>>(
        ld: &Loader<'_, D>,
        hp: &HParams,
    ) -> Result<Option<RankHead>, ModelError> {
        let d = hp.n_embd;
        if hp.pooling != Pooling::Rank {
            return Ok(None);
        }
        let has = ld.has("cls.weight") || ld.has("cls.output.weight");
        if hp.family.encoder.is_none() {
            return Err(ModelError::Unsupported(format!(
                "{}: rank pooling (a reranker) is supported for encoder models (bert, nomic-bert)",
                hp.arch_name
            )));
        }
        if !has {
            return Err(ModelError::MissingTensor(
                "cls.output.weight (the classification head of a rank-pooling model)".into(),
            ));
        }
        let cls = match ld.has("cls.weight") {
            true => Some((ld.linear("cls.weight", d, d)?, optional(ld, "cls.bias", d)?)),
            false => None,
        };
        let (out, n_out) = match ld.g.tensor("cls.output.weight") {
            Some(info) => {
                let n = usize::try_from(info.n_rows()).unwrap_or(usize::MAX);
                if n == 0 || n > MAX_LABELS {
                    return Err(ModelError::Unsupported(format!(
                        "cls.output.weight has {n} labels; 1 to {MAX_LABELS} are supported"
                    )));
                }
                let lin = ld.linear("cls.output.weight", d, n)?;
                (Some((lin, optional(ld, "cls.output.bias", n)?)), n)
            }
            None => (None, d),
        };
        Ok(Some(RankHead { cls, out, n_out }))
    }

    /// Whether the head has its dense layer (`cls`) before the output.
    pub(crate) fn has_dense(&self) -> bool {
        self.cls.is_some()
    }

    pub(crate) fn matrices(&self) -> impl Iterator<Item = &Linear> {
        self.cls.iter().chain(self.out.iter()).map(|(l, _)| l)
    }

    /// `x` (`n × n_embd` first-token rows) → `n × n_out` logits in `out`;
    /// `tmp` is scratch of `n × n_embd`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        f: Store<'_>,
        x: &mut Vec<f32>,
        n: usize,
        tmp: &mut Vec<f32>,
        out: &mut Vec<f32>,
        scratch: &mut Scratch,
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        if let Some((w, b)) = &self.cls {
            tmp.clear();
            tmp.resize(n * w.rows, 0.0);
            w.forward(f, x, n, tmp, scratch, pool)?;
            for row in tmp.chunks_exact_mut(w.rows) {
                if let Some(b) = b {
                    ops::add_in_place(row, b);
                }
                row.iter_mut().for_each(|v| *v = v.tanh());
            }
            std::mem::swap(x, tmp);
        }
        match &self.out {
            Some((w, b)) => {
                out.clear();
                out.resize(n * w.rows, 0.0);
                w.forward(f, x, n, out, scratch, pool)?;
                if let Some(b) = b {
                    out.chunks_exact_mut(w.rows)
                        .for_each(|row| ops::add_in_place(row, b));
                }
            }
            None => {
                out.clear();
                out.extend_from_slice(x);
            }
        }
        Ok(())
    }
}

/// The pooled row of the sequence at `r` in `hidden` (`T × d`) into `out`.
pub(crate) fn pool_row(
    pooling: Pooling,
    hidden: &[f32],
    d: usize,
    r: Range<usize>,
    out: &mut [f32],
) {
    let row = |i: usize| &hidden[i * d..(i + 1) * d];
    match pooling {
        Pooling::Mean => {
            out.fill(0.0);
            for i in r.clone() {
                ops::add_in_place(out, row(i));
            }
            ops::scale(out, 1.0 / r.len() as f32);
        }
        Pooling::Cls | Pooling::Rank => out.copy_from_slice(row(r.start)),
        Pooling::Last => out.copy_from_slice(row(r.end - 1)),
        Pooling::None => unreachable!("per-token output is not pooled"),
    }
}

/// The dense head over `n` rows of `cur`, in place (`buf` is scratch).
pub(crate) fn dense(
    layers: &[Linear],
    f: Store<'_>,
    cur: &mut Vec<f32>,
    n: usize,
    buf: &mut Vec<f32>,
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) -> Result<(), ModelError> {
    for lin in layers {
        buf.clear();
        buf.resize(n * lin.rows, 0.0);
        lin.forward(f, cur, n, buf, scratch, pool)?;
        std::mem::swap(cur, buf);
    }
    Ok(())
}

/// Matryoshka truncation then L2 normalisation (when `normalize`), of one row.
pub(crate) fn finish(v: &[f32], dim: Option<usize>, normalize: bool, out: &mut Vec<f32>) {
    let v = &v[..dim.unwrap_or(v.len()).min(v.len())];
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let s = if normalize && norm > 0.0 {
        (1.0 / norm) as f32
    } else {
        1.0
    };
    out.extend(v.iter().map(|&x| x * s));
}
