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
    /// Tokens generated one at a time, from the same position as the prompt
    /// (as llama-bench's tg test, which has no prompt of its own).
    #[arg(long, default_value_t = 128)]
    tg: usize,
    /// Tokens already in the cache before each test, as llama-bench's `-d`:
    /// processed once, untimed, in batches of at least 512.
    #[arg(long, default_value_t = 0)]
    depth: usize,
    /// Repetitions of each test.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(short, long)]
    threads: Option<usize>,
    #[command(flatten)]
    kv: crate::generate::KvCacheArgs,
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
    // Loaded once and run many times, as `lamina serve` loads it: stored as
    // panels where the ISA has them (the one-shot `lamina embed` keeps rows).
    let model = models::load_options(lamina_model::Load::Map, Some(true))
        .open(&path)
        .with_context(|| format!("loading {}", path.display()))?;
    let mut e = Embedder::new(model)?;
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

/// llama-bench's default micro-batch, the batch a depth is filled in.
const DEPTH_BATCH: usize = 512;

fn generate(a: GenerateArgs) -> Result<()> {
    use lamina_model::{KvCache, Workspace};
    if a.runs == 0 || a.pp == 0 {
        bail!("--runs and --pp must be at least 1");
    }
    let pool = thread_pool(a.threads)?;
    let path = models::resolve(&a.model)?;
    let model = models::load_options(a.load.load(), None)
        .open(&path)
        .with_context(|| format!("loading {}", path.display()))?;
    let hp = &model.hp;
    let n_ctx =
        a.pp.max(a.tg)
            .checked_add(a.depth)
            .context("--depth plus --pp overflows")?;
    if n_ctx > hp.n_ctx_train {
        bail!(
            "--depth plus --pp or --tg is {n_ctx} positions, past the model's training context of {}",
            hp.n_ctx_train
        );
    }
    // The depth is filled in batches as large as the prompt, and at least as
    // large as llama-bench's micro-batch.
    let batch = a.pp.max(DEPTH_BATCH.min(a.depth));
    let kv = a.kv.kv_type();
    lamina_model::mem::check_session(hp, n_ctx, kv, batch)?;
    let mut cache = KvCache::new(hp, n_ctx, kv);
    let mut ws = Workspace::new(hp, batch);
    let mut logits = vec![0.0f32; hp.n_vocab];
    // Deterministic pseudo-random ids (as llama-bench uses random tokens).
    let ids = |n: usize, seed: u64| -> Vec<u32> {
        (0..n as u64)
            .map(|i| ((i * 2_654_435_761 + seed) % hp.n_vocab as u64) as u32)
            .collect()
    };
    let prompt = ids(a.pp, 12_345);
    let filled = Instant::now();
    for chunk in ids(a.depth, 54_321).chunks(batch) {
        model.forward_cached(
            &mut ws,
            &mut cache,
            chunk,
            false,
            &mut logits,
            pool.as_ref(),
        )?;
    }
    if a.depth > 0 {
        tracing::info!(
            "filled {} positions in {:.1} s",
            a.depth,
            filled.elapsed().as_secs_f64()
        );
    }
    // Token generation is judged against the memory bandwidth measured
    // around each timed run: a shared host's bandwidth (and the threads'
    // round trip) drifts within seconds, so a probe taken once for all runs
    // can describe another machine than the one a run saw. Each run's share
    // is of the better of the probes right before and right after it.
    // Without the probe's 1 GiB buffer the bench still runs, without the share.
    let probe = if a.tg > 0 {
        match lamina_kernels::bandwidth::BandwidthProbe::new() {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!("memory bandwidth not measured (a 1 GiB buffer: {e})");
                None
            }
        }
    } else {
        None
    };
    let measure = || probe.as_ref().map(|p| p.measure(pool.as_ref(), 3));
    let bytes = model.weight_bytes_per_token();
    let (mut pp_s, mut tg_s) = (Vec::new(), Vec::new());
    let (mut bw_s, mut share_s, mut trip_s) = (Vec::new(), Vec::new(), Vec::new());
    let mut bw_before = None;
    for run in 0..=a.runs {
        cache.truncate(a.depth);
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
        if run == 1 {
            // Before the first timed tg run; each later run's "before" is
            // the probe after the run ahead of it.
            bw_before = measure();
            bw_s.extend(bw_before);
        }
        // Generation starts where the prompt did, as llama-bench's tg test.
        cache.truncate(a.depth);
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
                let tok_s = a.tg as f64 / tg_time;
                tg_s.push(tok_s);
                // Each parallel region pays it: it explains runs whose share
                // drops while the bandwidth rises (the vCPUs moved further apart).
                trip_s.push(lamina_kernels::bandwidth::core_round_trip_ns(5_000));
                let after = measure();
                if let (Some(before), Some(after)) = (bw_before, after) {
                    bw_s.push(after);
                    share_s.push(bytes as f64 * tok_s / 1e9 / before.max(after));
                }
                bw_before = after;
            }
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let (pp, tg) = (median(&pp_s).unwrap_or(0.0), median(&tg_s).unwrap_or(0.0));
    let bandwidth = bw_s.iter().copied().reduce(f64::max);
    let share = median(&share_s);
    let round_trip = median(&trip_s);
    let tg_gbs = bytes as f64 * tg / 1e9;
    if a.json {
        println!(
            "{}",
            json!({"model": path.display().to_string(), "threads": pool.threads(),
                   "isa": format!("{:?}", model.isa()), "pp": a.pp, "tg": a.tg, "depth": a.depth,
                   "pp_tokens_per_s": pp, "tg_tokens_per_s": tg,
                   "pp_samples": pp_s, "tg_samples": tg_s,
                   "weight_bytes_per_token": bytes,
                   "memory_bandwidth_gb_s": bandwidth,
                   "tg_gb_s": bandwidth.map(|_| tg_gbs),
                   "tg_bandwidth_share": share,
                   "bandwidth_samples_gb_s": bw_s,
                   "tg_bandwidth_share_samples": share_s,
                   "core_round_trip_ns": round_trip,
                   "core_round_trip_samples_ns": trip_s})
        );
    } else {
        let mut notes = String::new();
        if let (Some(bw), Some(share)) = (bandwidth, share) {
            let runs: Vec<String> = share_s
                .iter()
                .map(|s| format!("{:.0}", 100.0 * s))
                .collect();
            notes += &format!(
                "; {tg_gbs:.1} GB/s of weights, {:.0} % of the bandwidth measured around each run (median; runs {} %; probes {:.1}-{bw:.1} GB/s)",
                100.0 * share,
                runs.join("/"),
                bw_s.iter().copied().fold(f64::INFINITY, f64::min),
            );
        }
        if let Some(ns) = round_trip {
            notes += &format!("; core-to-core round trip {ns:.0} ns");
        }
        let at = if a.depth > 0 {
            format!(" @ d{}", a.depth)
        } else {
            String::new()
        };
        println!(
            "{}: pp{}{at} {pp:.1} tokens/s, tg{}{at} {tg:.1} tokens/s ({} threads, {:?}{notes})",
            path.display(),
            a.pp,
            a.tg,
            pool.threads(),
            model.isa()
        );
    }
    Ok(())
}
