//! `lamina bench`: in-process timings that `cargo xtask bench` collects
//! (per-embedding latency, batch throughput), so process start-up is not
//! counted where llama.cpp's own figures do not count it either.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use lamina_model::embed::{EmbedOptions, Embedder};
use serde_json::json;

use crate::embed::thread_pool;
use crate::models;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand, Debug)]
enum What {
    /// Latency of one text (P50/P95 over --runs) or throughput of --batch copies.
    Embed(EmbedArgs),
}

#[derive(clap::Args, Debug)]
struct EmbedArgs {
    #[arg(short, long)]
    model: String,
    /// The text to embed.
    #[arg(long, default_value = "The quick brown fox jumps over the lazy dog.")]
    text: String,
    /// Timed runs after warm-up.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Embed this many texts per call (varied copies of --text) and report texts/s.
    #[arg(long)]
    batch: Option<usize>,
    #[arg(short, long)]
    threads: Option<usize>,
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    match args.what {
        What::Embed(a) => embed(a),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn embed(a: EmbedArgs) -> Result<()> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let pool = thread_pool(a.threads)?;
    let path = models::resolve(&a.model)?;
    let mut e = Embedder::open(&path).with_context(|| format!("loading {}", path.display()))?;
    let opts = EmbedOptions::default();
    let texts: Vec<String> = match a.batch {
        // Distinct texts of varied length, like a real batch.
        Some(n) => (0..n)
            .map(|i| {
                let words: Vec<&str> = a.text.split_whitespace().collect();
                let k = 1 + i % words.len().max(1);
                format!(
                    "{i}: {}",
                    words
                        .iter()
                        .cycle()
                        .take(k * 3)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            })
            .collect(),
        None => vec![a.text.clone()],
    };
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let n_tokens: usize = refs
        .iter()
        .map(|t| e.tokenize(t, &opts).map(|v| v.len()))
        .sum::<Result<usize, _>>()?;
    for _ in 0..a.warmup {
        e.embed(&refs, &opts, pool.as_ref())?;
    }
    let mut ms = Vec::with_capacity(a.runs);
    for _ in 0..a.runs {
        let t = Instant::now();
        e.embed(&refs, &opts, pool.as_ref())?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p95) = (percentile(&sorted, 0.5), percentile(&sorted, 0.95));
    let per_sec = refs.len() as f64 / (p50 / 1e3);
    if a.json {
        println!(
            "{}",
            json!({"model": path.display().to_string(), "texts": refs.len(), "tokens": n_tokens,
                   "threads": pool.threads(), "isa": format!("{:?}", e.model.isa()),
                   "p50_ms": p50, "p95_ms": p95, "embeddings_per_s": per_sec, "samples_ms": ms})
        );
    } else {
        println!(
            "{} text(s), {n_tokens} tokens, {} threads, {:?}: P50 {p50:.2} ms, P95 {p95:.2} ms, {per_sec:.1} embeddings/s",
            refs.len(),
            pool.threads(),
            e.model.isa()
        );
    }
    Ok(())
}
