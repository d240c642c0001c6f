//! `lamina logits`: teacher forcing. The whole sequence runs through the
//! model; for every position the top-K next-token ids and their logits are
//! printed, so they can be compared with another engine's.

use std::io::Write;

use anyhow::{Context, Result, bail};
use lamina_model::{KvCache, Workspace};
use serde_json::json;

use crate::generate::ModelArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Text to tokenize (BOS added as the model does; special tokens parsed).
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    prompt: Option<String>,
    /// Token ids, comma-separated (used as they are).
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// How many of the best tokens to print per position.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Evaluate the tokens from this position on one at a time, as a
    /// generation decodes them (the ones before run as batched prefill), so
    /// the figures compare with an engine's prompt-then-decode run.
    #[arg(long)]
    step_from: Option<usize>,
    /// Print {"ids": [...], "top": [[[id, logit], ...], ...]}.
    #[arg(long)]
    json: bool,
}

/// Tokens per forward pass: every position's logits are kept, so the batch
/// is bounded by the logits buffer (`tokens × n_vocab` floats, ≤ 64 MiB).
fn chunk_for(n_vocab: usize, batch: usize) -> usize {
    ((16 << 20) / n_vocab.max(1)).clamp(1, batch.max(1))
}

pub fn run(args: Args) -> Result<()> {
    let loaded = args.model.load()?;
    let ids = match (&args.prompt, &args.ids) {
        (Some(p), _) => loaded.tok.encode(p, true, true),
        (None, Some(ids)) => ids.clone(),
        (None, None) => bail!("give --prompt or --ids"),
    };
    if ids.is_empty() {
        bail!("no tokens to evaluate");
    }
    let n_vocab = loaded.model.hp.n_vocab;
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
        bail!("token id {bad} is outside the vocabulary of {n_vocab}");
    }
    loaded.check_fits(ids.len())?;
    let k = args.top.clamp(1, n_vocab);
    let chunk = chunk_for(n_vocab, args.model.batch);
    let hp = &loaded.model.hp;
    let kv = args.model.kv();
    lamina_model::mem::check_session(hp, ids.len(), kv, chunk)?;
    let mut ws = Workspace::new(hp, chunk);
    let mut cache = KvCache::new(hp, ids.len(), kv);
    let mut logits = vec![0f32; chunk * n_vocab];
    let mut top: Vec<Vec<(u32, f32)>> = Vec::with_capacity(ids.len());
    let mut order: Vec<u32> = Vec::with_capacity(n_vocab);
    let step_from = args.step_from.unwrap_or(ids.len()).min(ids.len());
    let (prefill, decoded) = ids.split_at(step_from);
    for part in prefill.chunks(chunk).chain(decoded.chunks(1)) {
        let out = &mut logits[..part.len() * n_vocab];
        loaded
            .model
            .forward_cached(&mut ws, &mut cache, part, true, out, &*loaded.pool)
            .context("forward pass")?;
        for row in out.chunks_exact(n_vocab) {
            order.clear();
            order.extend(0..n_vocab as u32);
            let by =
                |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
            if k < n_vocab {
                order.select_nth_unstable_by(k - 1, by);
            }
            order[..k].sort_unstable_by(by);
            top.push(order[..k].iter().map(|&i| (i, row[i as usize])).collect());
        }
    }

    let mut out = std::io::stdout().lock();
    if args.json {
        let top: Vec<Vec<serde_json::Value>> = top
            .iter()
            .map(|t| t.iter().map(|&(i, l)| json!([i, l])).collect())
            .collect();
        writeln!(out, "{}", json!({"ids": ids, "top": top}))?;
    } else {
        let piece = |id: u32| {
            let p = String::from_utf8_lossy(&loaded.tok.token_to_piece(id, true)).into_owned();
            format!("{p:?}")
        };
        for (pos, (&id, t)) in ids.iter().zip(&top).enumerate() {
            write!(out, "{pos:>5} {id:>7} {:<16} ->", piece(id))?;
            for &(i, l) in t {
                write!(out, "  {i} {} {l:.4}", piece(i))?;
            }
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(())
}
