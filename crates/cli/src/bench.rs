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
    /// Prompt processing (one batch of --pp tokens) and generation (--tg single
    /// tokens) speed of a text model, as llama-bench's pp/tg tests.
    Generate(GenerateArgs),
}

#[derive(clap::Args, Debug)]
struct GenerateArgs {
    #[arg(short, long)]
    model: String,
    /// Prompt tokens processed as one batch.
    #[arg(long, default_value_t = 512)]
    pp: usize,
    /// Tokens generated one at a time after the prompt.
    #[arg(long, default_value_t = 128)]
    tg: usize,
    /// Repetitions of each test.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(short, long)]
    threads: Option<usize>,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    load: crate::generate::LoadArg,
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
        What::Generate(a) => generate(a),
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

fn generate(a: GenerateArgs) -> Result<()> {
    use lamina_model::{KvCache, KvType, Model, Workspace};
    if a.runs == 0 || a.pp == 0 {
        bail!("--runs and --pp must be at least 1");
    }
    let pool = thread_pool(a.threads)?;
    let path = models::resolve(&a.model)?;
    let model = Model::open_with(&path, a.load.load())
        .with_context(|| format!("loading {}", path.display()))?;
    let hp = &model.hp;
    let n_ctx = a.pp + a.tg;
    let mut cache = KvCache::new(hp, n_ctx, KvType::F16);
    let mut ws = Workspace::new(hp, a.pp);
    let mut logits = vec![0.0f32; hp.n_vocab];
    // Deterministic pseudo-random prompt ids (as llama-bench uses random tokens).
    let prompt: Vec<u32> = (0..a.pp as u64)
        .map(|i| ((i * 2_654_435_761 + 12_345) % hp.n_vocab as u64) as u32)
        .collect();
    // Token generation is judged against the memory bandwidth measured
    // around its runs (the better of before and after: a shared host's
    // bandwidth drifts).
    // Without the probe's 1 GiB buffer the bench still runs, without the share.
    let probe = || match lamina_kernels::probe::memory_bandwidth(pool.as_ref(), 3) {
        Ok(gbs) => Some(gbs),
        Err(e) => {
            tracing::warn!("memory bandwidth not measured (a 1 GiB buffer: {e})");
            None
        }
    };
    let bw_before = if a.tg > 0 { probe() } else { None };
    let (mut pp_s, mut tg_s) = (Vec::new(), Vec::new());
    for run in 0..=a.runs {
        cache.truncate(0);
        let t = Instant::now();
        model.forward_cached(
            &mut ws,
            &mut cache,
            &prompt,
            false,
            &mut logits,
            pool.as_ref(),
        )?;
        let pp_time = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..a.tg {
            let next = lamina_model::sampling::argmax(&logits) as u32;
            model.forward_cached(
                &mut ws,
                &mut cache,
                &[next],
                false,
                &mut logits,
                pool.as_ref(),
            )?;
        }
        let tg_time = t.elapsed().as_secs_f64();
        if run > 0 {
            // Run 0 warms caches and page mappings.
            pp_s.push(a.pp as f64 / pp_time);
            if a.tg > 0 {
                tg_s.push(a.tg as f64 / tg_time);
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let (pp, tg) = (median(&pp_s), median(&tg_s));
    let bandwidth = bw_before.and_then(|before| probe().map(|after| before.max(after)));
    // Each parallel region pays it: it explains runs whose share drops while
    // the bandwidth rises (the vCPUs moved further apart).
    let round_trip = (a.tg > 0).then(|| lamina_kernels::probe::core_round_trip_ns(20_000));
    let bytes = model.weight_bytes_per_token();
    let tg_gbs = bytes as f64 * tg / 1e9;
    if a.json {
        println!(
            "{}",
            json!({"model": path.display().to_string(), "threads": pool.threads(),
                   "isa": format!("{:?}", model.isa()), "pp": a.pp, "tg": a.tg,
                   "pp_tokens_per_s": pp, "tg_tokens_per_s": tg,
                   "pp_samples": pp_s, "tg_samples": tg_s,
                   "weight_bytes_per_token": bytes,
                   "memory_bandwidth_gb_s": bandwidth,
                   "tg_gb_s": bandwidth.map(|_| tg_gbs),
                   "core_round_trip_ns": round_trip})
        );
    } else {
        let share = bandwidth.map_or(String::new(), |bw| {
            format!(
                "; {tg_gbs:.1} GB/s of weights, {:.0} % of the {bw:.1} GB/s measured",
                100.0 * tg_gbs / bw
            )
        });
        let share = match round_trip {
            Some(ns) => format!("{share}; core-to-core round trip {ns:.0} ns"),
            None => share,
        };
        println!(
            "{}: pp{} {pp:.1} tokens/s, tg{} {tg:.1} tokens/s ({} threads, {:?}{share})",
            path.display(),
            a.pp,
            a.tg,
            pool.threads(),
            model.isa()
        );
    }
    Ok(())
}
