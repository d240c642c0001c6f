//! `cargo xtask bench`: lamina and llama.cpp side by side, alternately, in
//! one run.
//!
//! * `embed` — the seeds' protocol on EmbeddingGemma (Q8_0 unless `-m`):
//!   P50/P95 latency of a 9-word and a 49-word text over `--runs` (≥ 20)
//!   after warm-up, throughput of a batch of 96 texts, idle and peak memory
//!   (RSS split into file-backed and anonymous, sampled from
//!   `/proc/PID/status`), and the whole-process wall time of one CLI
//!   embedding. lamina's in-process figures come from `lamina bench embed`,
//!   llama.cpp's from `llama-bench --embeddings 1` (latency) and
//!   `llama-embedding` (batch: the wall time between its logged batch
//!   decodes, the first one excluded as warm-up — see [`parse::parse_decode_rate`];
//!   one-shot: wall time of the process).
//!   `-m all-MiniLM-L6-v2` (the checkpoint folder) measures five engines
//!   instead: lamina, llama.cpp, sentence-transformers, ONNX Runtime F32 and
//!   int8 (see [`engines`]).
//! * `generate` — pp512 and tg128 tokens/s (`lamina bench generate`,
//!   `llama-bench -p 512 -n 128`); both engines' tg128 starts from an empty
//!   cache, as llama-bench's `-n` test does. tg128 also as GB/s of weights
//!   read (the model's weight bytes per token × tokens/s) against the memory
//!   bandwidth lamina's run measured before and after its tg runs
//!   (`lamina_kernels::bandwidth`'s read of 1 GiB, the best of them, the same
//!   denominator for both engines), judged only for models whose weights are
//!   at least twice the last-level cache ([`crate::bench_rules`]).
//!   Both engines run at their defaults (weights mapped from the file) with
//!   one warm-up run each; llama.cpp also with `OMP_WAIT_POLICY=passive`.
//!   `--synth SHAPE[,...] [--type q4_k_m]` measures random-weight files of
//!   real shapes instead (see [`crate::bench_synth`]). Each model also gets
//!   the whole process of a first token after a short prompt and its peak
//!   RSS (`lamina generate -n 1` against `llama-completion`, see
//!   [`first_token`]); `--depth N` adds pp512 and tg128 with N tokens in the
//!   cache (llama-bench's `-d`, see [`depth`]).
//!
//! The load average is sampled during the run; on a busy machine (load
//! beyond the benchmark's own threads over half the cores) no headline table
//! is printed and the command fails ([`crate::bench_rules::busy`]).
//! * `kernels` — `cargo bench -p lamina-kernels`, passed through.
//! * `criterion` — `cargo bench -p lamina-benches` (the end-to-end criterion
//!   benches of `benches/`: embedding latency, pp512, tg), passed through;
//!   not part of `all`, which measures the same workloads.
//! * `serve` — `lamina serve` under load from `--clients` concurrent clients
//!   for `--secs` seconds (see [`crate::serve`]); not part of `all`.
//!
//! A markdown table goes to stdout; `--json` also writes every sample, the
//! machine and the commits to `target/bench/<UTC timestamp>.json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail, ensure};

use crate::bench_rules::{self as rules, load_average};
use crate::{cargo, models, run};
use report::Report;

mod depth;
pub(crate) mod embed;
mod engines;
mod first_token;
pub(crate) mod generate;
pub(crate) mod measure;
mod parse;
pub(crate) mod report;

/// The short (9-word) and long (49-word) texts of the seeds' protocol,
/// shared with the criterion benches in `benches/`.
pub(crate) use lamina_testkit::texts::{LONG_TEXT, SHORT_TEXT};
/// Texts per batch in the throughput figure.
pub(crate) const BATCH: usize = 96;
/// llama-embedding's context, batch and micro-batch for the batch figure: it
/// packs whole texts into forward passes of at most this many tokens, as
/// lamina does with its default `--batch-tokens 512`.
const LLAMA_BATCH: &str = "512";
/// The default embedding model file, in the models directory.
pub(crate) const EMBED_MODEL: &str = "embeddinggemma-300m-Q8_0.gguf";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    Embed,
    Generate,
    Kernels,
    /// `cargo bench -p lamina-benches`; not part of `all`.
    Criterion,
    /// `lamina serve` under load (see `crate::serve`); not part of `all`.
    Serve,
    All,
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// What to measure.
    #[arg(value_enum, default_value = "embed")]
    what: Workload,
    /// Threads for both engines (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Also write every sample to `target/bench/<timestamp>.json`.
    #[arg(long)]
    json: bool,
    /// Model file or name in the models directory (default: EmbeddingGemma
    /// Q8_0 for embed; SmolLM2 Q8_0, Gemma 3 270M Q4_K_M, EmbeddingGemma
    /// Q4_K_M for generate). `embed -m all-MiniLM-L6-v2`: the five-engine
    /// embedding bench.
    #[arg(short, long)]
    model: Option<String>,
    /// Timed runs per latency figure (after warm-up).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Repetitions of the batch, one-shot and generation figures.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    #[command(flatten)]
    serve: crate::serve::ServeArgs,
    #[command(flatten)]
    synth: crate::bench_synth::SynthArgs,
    /// `generate`: also pp512 and tg128 with this many tokens already in the
    /// cache (llama-bench's `-d`), e.g. 8192.
    #[arg(long)]
    depth: Option<usize>,
    /// Print the table even when the machine was busy (labelled so, and the
    /// command still fails): such figures are not for docs/BENCHMARKS.md.
    #[arg(long)]
    allow_busy: bool,
}

/// A llama.cpp command: at its defaults, or with `OMP_WAIT_POLICY=passive`
/// (its OpenMP threads then sleep instead of spin-waiting, which suffers
/// most when other processes share the cores); the table shows both.
fn llama(program: &Path, passive: bool) -> Command {
    let mut cmd = Command::new(program);
    if passive {
        cmd.env("OMP_WAIT_POLICY", "passive");
    }
    cmd
}

pub(crate) fn run_cmd(args: Args) -> Result<()> {
    if args.what == Workload::Criterion {
        return run(cargo().args(["bench", "-p", "lamina-benches"]));
    }
    if args.what == Workload::Serve {
        let threads = args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        return crate::serve::bench(&args.serve, threads, args.model.as_deref());
    }
    ensure!(
        args.runs >= 1 && args.reps >= 1,
        "--runs and --reps must be at least 1"
    );
    if args.runs < 20 {
        eprintln!(
            "note: --runs {} is below the protocol's 20: figures are indicative",
            args.runs
        );
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    ensure!(threads >= 1, "--threads must be at least 1");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.what == Workload::Embed && args.model.as_deref().is_some_and(engines::selected) {
        return engines::run_cmd(&args, threads, cores);
    }
    ensure!(
        !args.synth.is_set() || matches!(args.what, Workload::Generate | Workload::All),
        "--synth applies to `bench generate` only"
    );
    ensure!(
        !args.synth.is_set() || args.model.is_none(),
        "--synth and -m name different models: pass one"
    );
    crate::bench_synth::prepare(&args.synth, threads, cores)?;
    let load = load_average();
    if let Some(why) = rules::busy(load, &[], threads, cores) {
        eprintln!("warning: {why}: the machine is busy; no headline table will be printed");
    }
    let mut report = Report::new(threads);
    report.load_before = load;
    let w = args.what;
    let sampler = rules::LoadSampler::start();
    if matches!(w, Workload::Embed | Workload::All) {
        embed::embed(&args, threads, &mut report)?;
    }
    if matches!(w, Workload::Generate | Workload::All) {
        generate::generate(&args, threads, &mut report)?;
    }
    report.load_during = sampler.finish();
    let busy = rules::busy(load, &report.load_during, threads, cores);
    if !report.rows.is_empty() {
        if args.json {
            let path = report.write_json()?;
            println!("samples: {}", path.display());
        }
        match &busy {
            None => println!("{}", report.markdown()),
            Some(why) if args.allow_busy => {
                println!("BUSY MACHINE ({why}): not a headline table\n");
                println!("{}", report.markdown());
            }
            Some(_) => {}
        }
    }
    if let Some(why) = busy {
        bail!(
            "the machine was busy ({why}): no headline table; rerun on a quiet machine \
             (--allow-busy prints the figures, labelled)"
        );
    }
    if matches!(w, Workload::Kernels | Workload::All) {
        run(cargo().args(["bench", "-p", "lamina-kernels"]))?;
    }
    Ok(())
}

/// A model argument as a path: an existing path, else a name in the models
/// directory.
pub(crate) fn resolve_model(name: &str) -> Result<PathBuf> {
    let p = PathBuf::from(name);
    if p.is_file() {
        return Ok(p);
    }
    let dir = models::default_dir()?;
    let q = dir.join(name);
    ensure!(
        q.is_file(),
        "{name} is neither a file nor in {}",
        dir.display()
    );
    Ok(q)
}

/// The default embedding model, or how to make it.
pub(crate) fn default_embed_model() -> Result<PathBuf> {
    let dir = models::default_dir()?;
    let path = dir.join(EMBED_MODEL);
    if path.is_file() {
        return Ok(path);
    }
    bail!(
        "{} is missing. Make it from the checkpoint `cargo xtask models` fetches:\n  \
         cargo run --release -p lamina-cli -- convert {}/embeddinggemma-300m /tmp/embeddinggemma-300m-F32.gguf --type f32\n  \
         $(dirname $(cargo xtask llama-cpp | tail -1 | awk '{{print $NF}}'))/bin/llama-quantize /tmp/embeddinggemma-300m-F32.gguf {} Q8_0\n\
         (the llama.cpp tools: `cargo xtask llama-cpp` prints their folder), or pass -m FILE",
        path.display(),
        dir.display(),
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_texts_have_the_seeds_word_counts() {
        assert_eq!(SHORT_TEXT.split_whitespace().count(), 9);
        assert_eq!(LONG_TEXT.split_whitespace().count(), 49);
    }
}
