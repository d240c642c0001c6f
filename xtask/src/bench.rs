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
//!   decodes, the first one excluded as warm-up — see [`parse_decode_rate`];
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
//!   real shapes instead (see [`crate::bench_synth`]).
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

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::bench_rules::{self as rules, WARMUP_RUNS, load_average};
use crate::llama_cpp::{self, llama_cpp_bin};
use crate::{cargo, lamina_bin, models, run, target_dir};

mod engines;

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
/// The default generation models (those present are measured).
const GENERATE_MODELS: &[&str] = &[
    "SmolLM2-135M-Instruct-Q8_0.gguf",
    "gemma-3-270m-Q4_K_M.gguf",
    "embeddinggemma-300m-Q4_K_M.gguf",
];

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

/// The `LAMINA_*` variables that change how lamina runs (thread pool, ISA,
/// stored panels, software prefetch).
fn lamina_env() -> serde_json::Map<String, Value> {
    [
        "LAMINA_POOL",
        "LAMINA_ISA",
        "LAMINA_PANELS",
        "LAMINA_PREFETCH",
    ]
    .iter()
    .filter_map(|k| Some((k.to_string(), json!(std::env::var(k).ok()?))))
    .collect()
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
        embed(&args, threads, &mut report)?;
    }
    if matches!(w, Workload::Generate | Workload::All) {
        generate(&args, threads, &mut report)?;
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

// ---------------------------------------------------------------------------
// Statistics and the report table.

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Stats {
    pub n: usize,
    pub mean: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p95: f64,
    pub min: f64,
    pub max: f64,
}

/// Nearest-rank percentile on sorted samples (the rule `lamina bench` uses).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn stats(samples: &[f64]) -> Stats {
    if samples.is_empty() {
        return Stats::default();
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let mean = s.iter().sum::<f64>() / n as f64;
    // Sample standard deviation, as llama-bench reports it.
    let var = if n > 1 {
        s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    Stats {
        n,
        mean,
        stddev: var.sqrt(),
        p50: percentile(&s, 0.5),
        p95: percentile(&s, 0.95),
        min: s[0],
        max: s[n - 1],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Better {
    Lower,
    Higher,
}

/// One measured value as the table shows it.
#[derive(Clone, Debug)]
struct Cell {
    value: f64,
    text: String,
}

impl Cell {
    fn new(value: f64, text: String) -> Self {
        Cell { value, text }
    }
    fn ms(v: f64) -> Self {
        Cell::new(v, format!("{v:.1} ms"))
    }
    /// Mean ± sample standard deviation, as llama-bench reports rates.
    fn rate(s: &Stats, unit: &str) -> Self {
        Cell::new(s.mean, format!("{:.1} ± {:.1} {unit}", s.mean, s.stddev))
    }
    fn mem(kb_total: u64, kb_file: u64, kb_anon: u64) -> Self {
        Cell::new(
            kb_total as f64,
            format!(
                "{} MiB ({} file + {} anon)",
                mib(kb_total),
                mib(kb_file),
                mib(kb_anon)
            ),
        )
    }
}

fn mib(kb: u64) -> String {
    format!("{:.0}", kb as f64 / 1024.0)
}

struct Row {
    figure: String,
    lamina: std::result::Result<Cell, String>,
    llama: std::result::Result<Cell, String>,
    /// llama.cpp with `OMP_WAIT_POLICY=passive`, where measured.
    llama_passive: Option<std::result::Result<Cell, String>>,
    better: Better,
}

struct Report {
    threads: usize,
    rows: Vec<Row>,
    /// Every sample and setting, for `--json`.
    detail: serde_json::Map<String, Value>,
    isa: Option<String>,
    llama_commit: Option<String>,
    models: Vec<String>,
    load_before: Option<f64>,
    /// The load average sampled during the run.
    load_during: Vec<f64>,
}

impl Report {
    fn new(threads: usize) -> Self {
        Report {
            threads,
            rows: Vec::new(),
            detail: serde_json::Map::new(),
            isa: None,
            llama_commit: None,
            models: Vec::new(),
            load_before: None,
            load_during: Vec::new(),
        }
    }

    fn row(
        &mut self,
        figure: impl Into<String>,
        better: Better,
        lamina: std::result::Result<Cell, String>,
        llama: std::result::Result<Cell, String>,
    ) {
        self.rows.push(Row {
            figure: figure.into(),
            lamina,
            llama,
            llama_passive: None,
            better,
        });
    }

    /// A row with llama.cpp measured at its defaults and with
    /// `OMP_WAIT_POLICY=passive`.
    fn row2(
        &mut self,
        figure: impl Into<String>,
        better: Better,
        lamina: std::result::Result<Cell, String>,
        llama: std::result::Result<Cell, String>,
        llama_passive: std::result::Result<Cell, String>,
    ) {
        self.row(figure, better, lamina, llama);
        self.rows.last_mut().expect("just pushed").llama_passive = Some(llama_passive);
    }

    fn markdown(&self) -> String {
        let mut rows = Vec::new();
        for r in &self.rows {
            let show = |c: &std::result::Result<Cell, String>| match c {
                Ok(c) => c.text.clone(),
                Err(why) => why.clone(),
            };
            let ratio = |theirs: &std::result::Result<Cell, String>| match (&r.lamina, theirs) {
                (Ok(a), Ok(b)) if b.value > 0.0 => format!("{:.2}×", a.value / b.value),
                _ => "—".to_string(),
            };
            let better = match r.better {
                Better::Lower => "lower",
                Better::Higher => "higher",
            };
            let (passive, passive_ratio) = match &r.llama_passive {
                Some(p) => (show(p), ratio(p)),
                None => ("—".to_string(), "—".to_string()),
            };
            rows.push(vec![
                r.figure.clone(),
                show(&r.lamina),
                show(&r.llama),
                ratio(&r.llama),
                passive,
                passive_ratio,
                better.to_string(),
            ]);
        }
        let head = format!(
            "{}, {} threads, ISA {}, lamina {}{}, llama.cpp {}; {}; load average {} before, {} during, {} after\n\n",
            cpu_model(),
            self.threads,
            self.isa.as_deref().unwrap_or("?"),
            git_commit().unwrap_or_else(|| "?".into()),
            lamina_env()
                .iter()
                .map(|(k, v)| format!(" {k}={}", v.as_str().unwrap_or("")))
                .collect::<String>(),
            self.llama_commit.as_deref().unwrap_or("?"),
            rules::DEFAULTS_NOTE,
            self.load_before
                .map_or_else(|| "?".into(), |l| format!("{l:.1}")),
            rules::describe_load(&self.load_during),
            load_average().map_or_else(|| "?".into(), |l| format!("{l:.1}")),
        );
        head + &markdown_table(
            &[
                "figure",
                "lamina",
                "llama.cpp",
                "lamina / llama.cpp",
                "llama.cpp OMP_WAIT_POLICY=passive",
                "lamina / passive",
                "better when",
            ],
            &rows,
        )
    }

    fn write_json(&self) -> Result<PathBuf> {
        let dir = target_dir().join("bench");
        std::fs::create_dir_all(&dir)?;
        let stamp = utc_timestamp(SystemTime::now());
        let path = dir.join(format!("{stamp}.json"));
        let figures: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let cell = |c: &std::result::Result<Cell, String>| match c {
                    Ok(c) => json!({"value": c.value, "text": c.text}),
                    Err(why) => json!({"unavailable": why}),
                };
                json!({"figure": r.figure, "lamina": cell(&r.lamina), "llama_cpp": cell(&r.llama),
                       "llama_cpp_omp_passive": r.llama_passive.as_ref().map(cell),
                       "better": if r.better == Better::Lower { "lower" } else { "higher" }})
            })
            .collect();
        let doc = json!({
            "timestamp": stamp,
            "machine": {"cpu": cpu_model(), "cores": std::thread::available_parallelism().map_or(0, |n| n.get())},
            "threads": self.threads,
            "load_average_before": self.load_before,
            "load_average_during": self.load_during,
            "load_average_after": load_average(),
            "lamina_env": lamina_env(),
            "settings": rules::DEFAULTS_NOTE,
            "isa": self.isa,
            "lamina_commit": git_commit(),
            "llama_cpp_commit": self.llama_commit,
            "llama_cpp_bin": llama_cpp::existing_bin_dir().map(|p| p.display().to_string()),
            "models": self.models,
            "figures": figures,
            "samples": Value::Object(self.detail.clone()),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")?;
        Ok(path)
    }
}

/// A GitHub-style markdown table.
pub(crate) fn markdown_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", headers.join(" | "));
    let _ = writeln!(
        s,
        "|{}|",
        headers.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(s, "| {} |", cells.join(" | "));
    }
    s
}

// ---------------------------------------------------------------------------
// Machine facts.

/// `lscpu`'s "Model name", else /proc/cpuinfo's "model name".
pub(crate) fn cpu_model() -> String {
    if let Ok(out) = Command::new("lscpu").env("LC_ALL", "C").output()
        && let Some(m) = parse_lscpu_model(&String::from_utf8_lossy(&out.stdout))
    {
        return m;
    }
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn parse_lscpu_model(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "Model name")
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `git rev-parse --short=12 HEAD`, with `-dirty` when the tree has changes.
pub(crate) fn git_commit() -> Option<String> {
    let root = crate::workspace_root();
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let mut c = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&root)
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if dirty {
        c.push_str("-dirty");
    }
    Some(c)
}

/// `YYYY-MM-DDTHH-MM-SSZ` (UTC; `-` instead of `:` so it is a file name).
pub(crate) fn utc_timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}-{:02}-{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ---------------------------------------------------------------------------
// Processes: memory from /proc and wall time.

/// Memory figures from `/proc/PID/status`, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mem {
    pub rss_kb: u64,
    pub rss_file_kb: u64,
    pub rss_anon_kb: u64,
    pub hwm_kb: u64,
}

/// Parses `/proc/PID/status`; `None` when the memory lines are absent (a
/// zombie or kernel thread).
pub(crate) fn parse_status(text: &str) -> Option<Mem> {
    let mut m = Mem::default();
    let mut seen = 0;
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let field = match key {
            "VmRSS" => &mut m.rss_kb,
            "RssFile" => &mut m.rss_file_kb,
            "RssAnon" => &mut m.rss_anon_kb,
            "VmHWM" => &mut m.hwm_kb,
            _ => continue,
        };
        let num = val.split_whitespace().next()?;
        *field = num.parse().ok()?;
        seen += 1;
    }
    (seen == 4).then_some(m)
}

pub(crate) fn read_status(pid: u32) -> Option<Mem> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The largest values seen while a process ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Peak {
    /// The kernel's high-water mark of total RSS (exact up to the last sample).
    pub hwm_kb: u64,
    /// The largest file-backed and anonymous RSS sampled (not necessarily
    /// at the same moment).
    pub file_kb: u64,
    pub anon_kb: u64,
    pub samples: usize,
}

impl Peak {
    /// The table cell: peak RSS, split into file-backed and anonymous.
    fn cell(&self) -> Cell {
        Cell::mem(self.hwm_kb, self.file_kb, self.anon_kb)
    }

    fn add(&mut self, m: &Mem) {
        self.hwm_kb = self.hwm_kb.max(m.hwm_kb).max(m.rss_kb);
        self.file_kb = self.file_kb.max(m.rss_file_kb);
        self.anon_kb = self.anon_kb.max(m.rss_anon_kb);
        self.samples += 1;
    }
    fn json(&self) -> Value {
        json!({"hwm_kb": self.hwm_kb, "file_kb": self.file_kb, "anon_kb": self.anon_kb, "samples": self.samples})
    }
}

pub(crate) struct Measured {
    pub output: Output,
    pub wall_s: f64,
    pub peak: Peak,
}

/// Runs `cmd` to completion (stdout and stderr captured), sampling its
/// `/proc` status every 5 ms from a second thread.
pub(crate) fn measure(cmd: &mut Command) -> Result<Measured> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = Peak::default();
            while !stop.load(Ordering::Relaxed) {
                match read_status(pid) {
                    Some(m) => peak.add(&m),
                    None if peak.samples > 0 => break,
                    None => {}
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    let output = child.wait_with_output()?;
    let wall_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let peak = watcher.join().unwrap_or_default();
    Ok(Measured {
        output,
        wall_s,
        peak,
    })
}

/// Like [`measure`], failing with the command's stderr when it fails.
fn measure_ok(cmd: &mut Command) -> Result<Measured> {
    let m = measure(cmd)?;
    if !m.output.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}",
            m.output.status,
            tail(&String::from_utf8_lossy(&m.output.stderr), 20)
        );
    }
    Ok(m)
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// The state letter of `/proc/PID/stat` (R, S, D, Z, ...).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// lamina's memory once the model is loaded and before any text: `lamina
/// embed` opens the model, then reads its texts from stdin, so the process
/// is idle once it sleeps with an unchanging RSS.
fn lamina_idle(lamina: &Path, model: &Path, threads: usize) -> Result<Mem> {
    let mut child = Command::new(lamina)
        .args(["embed", "-t", &threads.to_string(), "-m"])
        .arg(model)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let t0 = Instant::now();
    let mut last: Option<Mem> = None;
    let mut stable = 0;
    let idle = loop {
        std::thread::sleep(Duration::from_millis(20));
        let Some(m) = read_status(pid) else {
            let out = child.wait_with_output()?;
            bail!(
                "lamina embed exited while loading ({}): {}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 5)
            );
        };
        let sleeping = proc_state(pid) == Some('S');
        if sleeping && last.is_some_and(|l| l.rss_kb == m.rss_kb) {
            stable += 1;
        } else {
            stable = 0;
        }
        last = Some(m);
        if stable >= 15 {
            break m;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("lamina embed did not settle within 60 s of starting");
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{SHORT_TEXT}");
    }
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "lamina embed failed after idling");
    Ok(idle)
}

// ---------------------------------------------------------------------------
// Output parsers.

/// One entry of `llama-bench -o json`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LlamaBenchTest {
    pub n_prompt: u64,
    pub n_gen: u64,
    pub samples_ns: Vec<f64>,
    pub samples_ts: Vec<f64>,
    pub build_commit: Option<String>,
}

pub(crate) fn parse_llama_bench(text: &str) -> Result<Vec<LlamaBenchTest>> {
    // llama-bench prints the JSON array to stdout; anything before `[` is noise.
    let start = text
        .find('[')
        .context("no JSON array in llama-bench output")?;
    let v: Value = serde_json::from_str(&text[start..]).context("parsing llama-bench JSON")?;
    let arr = v.as_array().context("llama-bench JSON is not an array")?;
    let nums = |e: &Value, k: &str| -> Vec<f64> {
        e[k].as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    arr.iter()
        .map(|e| {
            Ok(LlamaBenchTest {
                n_prompt: e["n_prompt"].as_u64().context("n_prompt")?,
                n_gen: e["n_gen"].as_u64().context("n_gen")?,
                samples_ns: nums(e, "samples_ns"),
                samples_ts: nums(e, "samples_ts"),
                build_commit: e["build_commit"].as_str().map(str::to_string),
            })
        })
        .collect()
}

/// `llama_perf_context_print: prompt eval time = X ms / N tokens (...)` →
/// `(X, N)`.
pub(crate) fn parse_prompt_eval(log: &str) -> Option<(f64, u64)> {
    let line = log.lines().find(|l| l.contains("prompt eval time ="))?;
    let after = line.split_once("prompt eval time =")?.1;
    let (ms, rest) = after.split_once("ms")?;
    let tokens = rest
        .trim_start_matches([' ', '/'])
        .split_whitespace()
        .next()?;
    Some((ms.trim().parse().ok()?, tokens.parse().ok()?))
}

/// llama-embedding's steady batch throughput from its `-lv 4` log: each
/// `batch_decode: n_tokens = N` line carries the wall-clock time
/// (`M.SS.mmm.uuu`) at which that pass starts, so the passes from the
/// second to the second-last ran between the second line and the last one.
/// Returns `(tokens per second over those passes, tokens of all passes)`.
///
/// Its `prompt eval time` is not used: on EmbeddingGemma it reported 1.54 s
/// for 2008 tokens where the passes took 3.66 s of wall time (and
/// `llama-bench -p 512 --embeddings 1` measures 588 tokens/s, not 1300).
/// The first pass is excluded like lamina's warm-up run: it took 1.18 s
/// against 0.74-0.98 s for the later ones of the same size.
pub(crate) fn parse_decode_rate(log: &str) -> Option<(f64, u64)> {
    let passes: Vec<(f64, u64)> = log
        .lines()
        .filter_map(|l| {
            let (stamp, rest) = l.trim().split_once(' ')?;
            let n = rest.split_once("batch_decode: n_tokens =")?.1;
            let n: u64 = n.split(',').next()?.trim().parse().ok()?;
            let f: Vec<f64> = stamp
                .split('.')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            let [min, sec, ms, us] = f[..] else {
                return None;
            };
            Some((min * 60.0 + sec + ms / 1e3 + us / 1e6, n))
        })
        .collect();
    if passes.len() < 3 {
        return None;
    }
    let total = passes.iter().map(|p| p.1).sum();
    let steady = &passes[1..];
    let tokens: u64 = steady[..steady.len() - 1].iter().map(|p| p.1).sum();
    let secs = steady[steady.len() - 1].0 - steady[0].0;
    (secs > 0.0).then(|| (tokens as f64 / secs, total))
}

/// The JSON object of `lamina bench ... --json` (its last line).
fn parse_json_line(stdout: &[u8]) -> Result<Value> {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON object in the output")?;
    Ok(serde_json::from_str(line)?)
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Models.

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

// ---------------------------------------------------------------------------
// Embeddings.

/// The 96 texts of the batch figure, exactly as `lamina bench embed --batch`
/// makes them from its `--text`: text `i` is `"{i}: "` and the first
/// `3·(1 + i mod words)` words of the text, cycled.
pub(crate) fn batch_texts(text: &str, n: usize) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    (0..n)
        .map(|i| {
            let k = 1 + i % words.len().max(1);
            let body: Vec<&str> = words.iter().cycle().take(k * 3).copied().collect();
            format!("{i}: {}", body.join(" "))
        })
        .collect()
}

fn embed(args: &Args, threads: usize, report: &mut Report) -> Result<()> {
    let model = match &args.model {
        Some(m) => resolve_model(m)?,
        None => default_embed_model()?,
    };
    let lamina = lamina_bin()?;
    let lbench = llama_cpp_bin("llama-bench")?;
    let lembed = llama_cpp_bin("llama-embedding")?;
    report.models.push(model.display().to_string());
    let t = threads.to_string();
    eprintln!(
        "bench embed: {} with {threads} threads, {} runs, {} reps",
        model.display(),
        args.runs,
        args.reps
    );
    // Warm the page cache so no figure pays for reading the file from disk.
    let _ = std::fs::read(&model);

    // Latency: short and long text, lamina then llama.cpp.
    for (label, text) in [("9-word", SHORT_TEXT), ("49-word", LONG_TEXT)] {
        eprintln!("  {label} text: lamina");
        let m = measure_ok(
            lamina_bench_embed(&lamina, &t)
                .args(["--runs", &args.runs.to_string(), "--text", text, "-m"])
                .arg(&model),
        )?;
        let v = parse_json_line(&m.output.stdout)?;
        report.isa = v["isa"].as_str().map(str::to_string);
        let tokens = v["tokens"].as_u64().context("lamina bench: tokens")?;
        let ours = f64s(&v["samples_ms"]);
        // llama-bench, at its defaults and with passive OpenMP threads.
        let mut theirs_by_env = Vec::new();
        for passive in [false, true] {
            eprintln!("  {label} text ({tokens} tokens): llama.cpp (OMP passive: {passive})");
            let out = capture_ok(
                llama(&lbench, passive)
                    .args(["-m"])
                    .arg(&model)
                    .args(["-p", &tokens.to_string(), "-n", "0", "-t", &t])
                    .args([
                        "-r",
                        &args.runs.to_string(),
                        "--embeddings",
                        "1",
                        "-o",
                        "json",
                    ]),
            )?;
            let tests = parse_llama_bench(&String::from_utf8_lossy(&out.stdout))?;
            let test = tests.first().context("llama-bench printed no test")?;
            report.llama_commit = report
                .llama_commit
                .take()
                .or_else(|| test.build_commit.clone());
            theirs_by_env.push(
                test.samples_ns
                    .iter()
                    .map(|ns| ns / 1e6)
                    .collect::<Vec<f64>>(),
            );
        }
        let theirs = theirs_by_env[0].clone();
        let passive = theirs_by_env[1].clone();
        let (a, b, c) = (stats(&ours), stats(&theirs), stats(&passive));
        report.row2(
            format!("{label} text ({tokens} tok) P50"),
            Better::Lower,
            Ok(Cell::ms(a.p50)),
            Ok(Cell::ms(b.p50)),
            Ok(Cell::ms(c.p50)),
        );
        report.row2(
            format!("{label} text ({tokens} tok) P95"),
            Better::Lower,
            Ok(Cell::ms(a.p95)),
            Ok(Cell::ms(b.p95)),
            Ok(Cell::ms(c.p95)),
        );
        report.detail.insert(
            format!("latency_{label}"),
            json!({"text": text, "tokens": tokens,
                   "lamina_ms": ours, "lamina_p50": a.p50, "lamina_p95": a.p95, "lamina_mean": a.mean, "lamina_stddev": a.stddev,
                   "llama_cpp_omp_passive_ms": passive,
                   "llama_cpp_ms": theirs, "llama_cpp_p50": b.p50, "llama_cpp_p95": b.p95, "llama_cpp_mean": b.mean, "llama_cpp_stddev": b.stddev,
                   "llama_cpp_command": format!("llama-bench -m MODEL -p {tokens} -n 0 -t {t} -r {} --embeddings 1 -o json", args.runs)}),
        );
    }

    // Batch of 96: throughput and peak memory.
    let texts = batch_texts(SHORT_TEXT, BATCH);
    let batch_file = target_dir().join("bench/batch-96.txt");
    std::fs::create_dir_all(batch_file.parent().expect("has a parent"))?;
    // No trailing newline: llama-embedding would read an empty 97th prompt.
    std::fs::write(&batch_file, texts.join("\n"))?;
    eprintln!("  batch of {BATCH}: lamina");
    let m = measure_ok(
        lamina_bench_embed(&lamina, &t)
            .args(["--runs", &args.reps.to_string(), "--text", SHORT_TEXT])
            .args(["--batch", &BATCH.to_string(), "-m"])
            .arg(&model),
    )?;
    let v = parse_json_line(&m.output.stdout)?;
    let batch_tokens = v["tokens"].as_u64().unwrap_or(0);
    let ours: Vec<f64> = f64s(&v["samples_ms"])
        .iter()
        .map(|ms| BATCH as f64 / (ms / 1e3))
        .collect();
    let ours_peak = m.peak;
    let mut theirs = Vec::new();
    let mut theirs_passive = Vec::new();
    let mut theirs_peak = Peak::default();
    let mut their_tokens = 0;
    let mut their_prompt_eval = Vec::new();
    let llama_batch = |cmd: &mut Command| {
        cmd.arg("-m")
            .arg(&model)
            .args([
                "-t",
                &t,
                "-c",
                LLAMA_BATCH,
                "-b",
                LLAMA_BATCH,
                "-ub",
                LLAMA_BATCH,
            ])
            // Log level 4 makes llama-embedding print its perf summary.
            .args(["-lv", "4", "--embd-output-format", "array", "-f"])
            .arg(&batch_file);
    };
    for (i, passive) in (0..args.reps).flat_map(|i| [(i, false), (i, true)]) {
        eprintln!(
            "  batch of {BATCH}: llama.cpp {}/{} (OMP passive: {passive})",
            i + 1,
            args.reps
        );
        let mut cmd = llama(&lembed, passive);
        llama_batch(&mut cmd);
        let m = measure_ok(&mut cmd)?;
        let log = String::from_utf8_lossy(&m.output.stderr);
        let (rate, n) = parse_decode_rate(&log).context(
            "llama-embedding logged fewer than 3 `batch_decode` passes (is -lv 4 honoured?)",
        )?;
        if passive {
            theirs_passive.push(BATCH as f64 * rate / n as f64);
            continue;
        }
        theirs.push(BATCH as f64 * rate / n as f64);
        their_tokens = n;
        if let Some((ms, _)) = parse_prompt_eval(&log) {
            their_prompt_eval.push(BATCH as f64 / (ms / 1e3));
        }
        if m.peak.hwm_kb > theirs_peak.hwm_kb {
            theirs_peak = m.peak;
        }
    }
    let (a, b, c) = (stats(&ours), stats(&theirs), stats(&theirs_passive));
    report.row2(
        format!("batch of {BATCH} (~{batch_tokens} tok), embeddings/s"),
        Better::Higher,
        Ok(Cell::rate(&a, "/s")),
        Ok(Cell::rate(&b, "/s")),
        Ok(Cell::rate(&c, "/s")),
    );
    report.row(
        format!("peak RSS, batch of {BATCH}"),
        Better::Lower,
        Ok(ours_peak.cell()),
        Ok(theirs_peak.cell()),
    );
    report.detail.insert(
        "batch".into(),
        json!({"texts": texts.len(), "lamina_tokens": batch_tokens, "llama_cpp_tokens": their_tokens,
               "lamina_embeddings_per_s": ours, "llama_cpp_embeddings_per_s": theirs,
               "llama_cpp_omp_passive_embeddings_per_s": theirs_passive,
               "llama_cpp_embeddings_per_s_by_prompt_eval_time": their_prompt_eval,
               "lamina_peak": ours_peak.json(), "llama_cpp_peak": theirs_peak.json(),
               "lamina_command": format!("lamina bench embed --batch {BATCH} --runs {} --warmup {WARMUP_RUNS} -t {t}", args.reps),
               "llama_cpp_command": format!("llama-embedding -m MODEL -t {t} -c {LLAMA_BATCH} -b {LLAMA_BATCH} -ub {LLAMA_BATCH} -lv 4 --embd-output-format array -f BATCH_FILE; embeddings/s = {BATCH} × tokens/s of the logged passes after the first / tokens of all passes")}),
    );

    // Idle memory (lamina only: llama.cpp has no tool that loads and waits).
    eprintln!("  idle memory: lamina");
    let idle = lamina_idle(&lamina, &model, threads)?;
    report.row(
        "idle RSS after load",
        Better::Lower,
        Ok(Cell::mem(idle.rss_kb, idle.rss_file_kb, idle.rss_anon_kb)),
        Err("n/a (no load-and-wait tool)".into()),
    );

    // Whole process, one short text, alternating.
    let mut ours_wall = Vec::new();
    let mut theirs_wall = Vec::new();
    let mut theirs_no_warmup = Vec::new();
    let mut ours_peak = Peak::default();
    let mut theirs_peak = Peak::default();
    for i in 0..args.reps {
        eprintln!("  one-shot CLI embedding {}/{}", i + 1, args.reps);
        let m = measure_ok(
            Command::new(&lamina)
                .args(["embed", "-t", &t, "-m"])
                .arg(&model)
                .arg(SHORT_TEXT),
        )?;
        ours_wall.push(m.wall_s * 1e3);
        ours_peak = ours_peak.max_by_hwm(m.peak);
        let one_shot = |no_warmup: bool| {
            let mut cmd = llama(&lembed, false);
            cmd.arg("-m").arg(&model).args([
                "-t",
                &t,
                "--embd-output-format",
                "array",
                "-p",
                SHORT_TEXT,
            ]);
            if no_warmup {
                cmd.arg("--no-warmup");
            }
            measure_ok(&mut cmd)
        };
        let m = one_shot(false)?;
        theirs_wall.push(m.wall_s * 1e3);
        theirs_peak = theirs_peak.max_by_hwm(m.peak);
        theirs_no_warmup.push(one_shot(true)?.wall_s * 1e3);
    }
    let (a, b, c) = (
        stats(&ours_wall),
        stats(&theirs_wall),
        stats(&theirs_no_warmup),
    );
    report.row(
        rules::ONE_SHOT_LABEL,
        Better::Lower,
        Ok(Cell::ms(a.p50)),
        Ok(Cell::ms(b.p50)),
    );
    report.row(
        rules::ONE_SHOT_NO_WARMUP_LABEL,
        Better::Lower,
        Ok(Cell::ms(a.p50)),
        Ok(Cell::ms(c.p50)),
    );
    report.row(
        "peak RSS, one-shot CLI embedding",
        Better::Lower,
        Ok(ours_peak.cell()),
        Ok(theirs_peak.cell()),
    );
    report.detail.insert(
        "one_shot".into(),
        json!({"text": SHORT_TEXT, "lamina_wall_ms": ours_wall, "llama_cpp_wall_ms": theirs_wall,
               "llama_cpp_no_warmup_wall_ms": theirs_no_warmup,
               "idle_lamina": {"rss_kb": idle.rss_kb, "file_kb": idle.rss_file_kb, "anon_kb": idle.rss_anon_kb},
               "lamina_peak": ours_peak.json(), "llama_cpp_peak": theirs_peak.json(),
               "lamina_command": format!("lamina embed -t {t} -m MODEL TEXT"),
               "llama_cpp_command": format!("llama-embedding -m MODEL -t {t} --embd-output-format array -p TEXT")}),
    );
    Ok(())
}

impl Peak {
    fn max_by_hwm(self, other: Peak) -> Peak {
        if other.hwm_kb > self.hwm_kb {
            other
        } else {
            self
        }
    }
}

/// Runs a command with captured output, failing with its stderr if it fails.
fn capture_ok(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 20)
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Generation.

/// What `lamina bench generate --json` prints.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LaminaGenerate {
    pub pp_tokens_per_s: f64,
    pub tg_tokens_per_s: f64,
    pub pp_samples: Vec<f64>,
    pub tg_samples: Vec<f64>,
    /// Weight bytes a decoded token reads, and the memory bandwidth (GB/s)
    /// measured around the tg runs (absent without tg runs).
    pub weight_bytes_per_token: Option<f64>,
    pub memory_bandwidth_gb_s: Option<f64>,
    /// The median over the tg runs of each run's weight GB/s as a share of
    /// the better of the probes right before and after it (a shared host's
    /// bandwidth drifts within seconds).
    pub tg_bandwidth_share: Option<f64>,
    /// A cache line's round trip between two threads (median of one
    /// measurement after each tg run).
    pub core_round_trip_ns: Option<f64>,
}

pub(crate) fn parse_lamina_generate(v: &Value) -> Result<LaminaGenerate> {
    Ok(LaminaGenerate {
        pp_tokens_per_s: v["pp_tokens_per_s"].as_f64().context("pp_tokens_per_s")?,
        tg_tokens_per_s: v["tg_tokens_per_s"].as_f64().context("tg_tokens_per_s")?,
        pp_samples: f64s(&v["pp_samples"]),
        tg_samples: f64s(&v["tg_samples"]),
        weight_bytes_per_token: v["weight_bytes_per_token"].as_f64(),
        memory_bandwidth_gb_s: v["memory_bandwidth_gb_s"].as_f64(),
        tg_bandwidth_share: v["tg_bandwidth_share"].as_f64(),
        core_round_trip_ns: v["core_round_trip_ns"].as_f64(),
    })
}

/// Whether a failed lamina call failed because the subcommand does not exist.
fn is_missing_subcommand(stderr: &str) -> bool {
    stderr.contains("unrecognized subcommand") || stderr.contains("invalid subcommand")
}

fn generate(args: &Args, threads: usize, report: &mut Report) -> Result<()> {
    let files: Vec<PathBuf> = match (crate::bench_synth::files(&args.synth)?, &args.model) {
        (Some(files), _) => files,
        (None, Some(m)) => vec![resolve_model(m)?],
        (None, None) => {
            let dir = models::default_dir()?;
            let mut v = Vec::new();
            for name in GENERATE_MODELS {
                let p = dir.join(name);
                if p.is_file() {
                    v.push(p);
                } else {
                    eprintln!(
                        "bench generate: {} is missing (skipped; make it with llama-quantize from an F32 \
                         `lamina convert` output, or pass -m)",
                        p.display()
                    );
                }
            }
            v
        }
    };
    ensure!(!files.is_empty(), "no generation model to measure");
    let lamina = lamina_bin()?;
    let lbench = llama_cpp_bin("llama-bench")?;
    let t = threads.to_string();
    let reps = args.reps.to_string();
    for model in files {
        let name = model.file_name().map_or_else(
            || model.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        report.models.push(model.display().to_string());
        if is_embedding_model(&model) {
            // An embedding model has no LM head: its prompt processing is
            // one embedding forward over a ~512-token text.
            embed_pp(args, &lamina, &lbench, &model, &name, threads, report)?;
            continue;
        }
        let tg = "128";
        eprintln!("bench generate: {name}: lamina");
        // As llama-bench measures them: pp512 on an empty cache, and tg128
        // from an empty cache too (its `-n` test has no prompt; ours starts
        // after one token), not after the 512-token prompt.
        type Run = std::result::Result<(LaminaGenerate, Option<String>), String>;
        let run_lamina = |pp: &str, n: &str| -> Run {
            let out = Command::new(&lamina)
                .args(["bench", "generate", "--json", "--pp", pp, "--tg", n])
                .args(["-t", &t, "--runs", &reps, "-m"])
                .arg(&model)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("failed to run: {e}"))?;
            if out.status.success() {
                parse_json_line(&out.stdout)
                    .and_then(|v| {
                        Ok((
                            parse_lamina_generate(&v)?,
                            v["isa"].as_str().map(str::to_string),
                        ))
                    })
                    .map_err(|e| format!("bad output: {e:#}"))
            } else {
                let err = String::from_utf8_lossy(&out.stderr);
                if is_missing_subcommand(&err) {
                    Err("not available yet".into())
                } else {
                    Err(format!(
                        "failed: {}",
                        err.lines().find(|l| !l.trim().is_empty()).unwrap_or("?")
                    ))
                }
            }
        };
        let ours = run_lamina("512", "0").and_then(|(pp, isa)| {
            let (tg, _) = run_lamina("1", tg)?;
            if let Some(isa) = isa {
                report.isa = Some(isa);
            }
            Ok(LaminaGenerate {
                tg_tokens_per_s: tg.tg_tokens_per_s,
                tg_samples: tg.tg_samples,
                weight_bytes_per_token: tg.weight_bytes_per_token,
                memory_bandwidth_gb_s: tg.memory_bandwidth_gb_s,
                tg_bandwidth_share: tg.tg_bandwidth_share,
                core_round_trip_ns: tg.core_round_trip_ns,
                ..pp
            })
        });
        if let Err(why) = &ours {
            eprintln!("  lamina: {why}");
        }
        let mut by_env = Vec::new();
        for passive in [false, true] {
            eprintln!("bench generate: {name}: llama.cpp (OMP passive: {passive})");
            let out = capture_ok(
                llama(&lbench, passive)
                    .arg("-m")
                    .arg(&model)
                    .args(["-p", "512", "-n", tg, "-t", &t, "-r", &reps, "-o", "json"]),
            )?;
            by_env.push(parse_llama_bench(&String::from_utf8_lossy(&out.stdout))?);
        }
        let (tests, tests_passive) = (&by_env[0], &by_env[1]);
        if report.llama_commit.is_none() {
            report.llama_commit = tests.first().and_then(|x| x.build_commit.clone());
        }
        let find = |tests: &[LlamaBenchTest], p: u64, g: u64| {
            tests
                .iter()
                .find(|x| x.n_prompt == p && x.n_gen == g)
                .cloned()
        };
        let pp = find(tests, 512, 0);
        let tgt = find(tests, 0, 128);
        let figures = [
            (
                "pp512",
                pp,
                find(tests_passive, 512, 0),
                ours.as_ref().map(|o| o.pp_samples.clone()),
            ),
            (
                "tg128",
                tgt.clone(),
                find(tests_passive, 0, 128),
                ours.as_ref().map(|o| o.tg_samples.clone()),
            ),
        ];
        for (fig, theirs, theirs_passive, ours_samples) in figures {
            let cell = |x: Option<LlamaBenchTest>| match x {
                Some(x) => Ok(Cell::rate(&stats(&x.samples_ts), "tok/s")),
                None => Err("missing from llama-bench output".to_string()),
            };
            let passive_cell = cell(theirs_passive);
            let theirs = theirs.map(|x| stats(&x.samples_ts));
            let ours_cell = match &ours_samples {
                Ok(s) if !s.is_empty() => Ok(Cell::rate(&stats(s), "tok/s")),
                Ok(_) => {
                    // No samples: use the reported figure.
                    let o = ours.as_ref().expect("Ok above");
                    let v = if fig == "pp512" {
                        o.pp_tokens_per_s
                    } else {
                        o.tg_tokens_per_s
                    };
                    Ok(Cell::new(v, format!("{v:.1} tok/s")))
                }
                Err(why) => Err(why.to_string()),
            };
            let theirs_cell = match theirs {
                Some(s) => Ok(Cell::rate(&s, "tok/s")),
                None => Err("missing from llama-bench output".into()),
            };
            report.row2(
                format!("{name} {fig}"),
                Better::Higher,
                ours_cell,
                theirs_cell,
                passive_cell,
            );
        }
        // Token generation streams the weights: both engines' tg128 as GB/s
        // of weights read, against the same denominator (the best of the
        // bandwidth probes lamina's run took), and judged only where the
        // weights cannot sit in the last-level cache.
        if let Ok(LaminaGenerate {
            weight_bytes_per_token: Some(bytes),
            memory_bandwidth_gb_s: Some(bw),
            core_round_trip_ns,
            ..
        }) = &ours
        {
            let gbs = |tok_s: f64| bytes * tok_s / 1e9;
            let o = ours.as_ref().expect("Ok above");
            let ours_gbs = gbs(stats(&o.tg_samples).mean);
            let their_tg = tgt.as_ref().map(|x| gbs(stats(&x.samples_ts).mean));
            let figure = format!("{name} tg128 weights read, of measured bandwidth");
            match rules::bandwidth_judged(*bytes, rules::last_level_cache_bytes()) {
                Ok(()) => {
                    // The threads' round trip, which every parallel region
                    // pays, beside the bandwidth: on a shared VM the two
                    // move independently.
                    let trip = core_round_trip_ns
                        .map_or(String::new(), |ns| format!("; round trip {ns:.0} ns"));
                    let of_best = |g: f64| {
                        format!(
                            "{g:.1} GB/s ({:.0} % of the best probe {bw:.1})",
                            100.0 * g / bw
                        )
                    };
                    report.row(
                        figure,
                        Better::Higher,
                        Ok(Cell::new(ours_gbs, format!("{}{trip}", of_best(ours_gbs)))),
                        their_tg
                            .map(|g| Cell::new(g, of_best(g)))
                            .ok_or_else(|| "missing from llama-bench output".to_string()),
                    );
                }
                Err(why) => report.row(figure, Better::Higher, Err(why.clone()), Err(why)),
            }
        }
        report.detail.insert(
            format!("generate_{name}"),
            json!({
                "lamina": ours.as_ref().map(|o| json!({"pp_tokens_per_s": o.pp_tokens_per_s, "tg_tokens_per_s": o.tg_tokens_per_s,
                                                       "pp_samples": o.pp_samples, "tg_samples": o.tg_samples,
                                                       "weight_bytes_per_token": o.weight_bytes_per_token,
                                                       "memory_bandwidth_gb_s": o.memory_bandwidth_gb_s,
                                                       "tg_bandwidth_share": o.tg_bandwidth_share,
                                                       "core_round_trip_ns": o.core_round_trip_ns}))
                              .unwrap_or_else(|e| json!({"unavailable": e})),
                "llama_cpp": tests.iter().map(|x| json!({"n_prompt": x.n_prompt, "n_gen": x.n_gen, "samples_ts": x.samples_ts, "samples_ns": x.samples_ns})).collect::<Vec<_>>(),
                "llama_cpp_omp_passive": tests_passive.iter().map(|x| json!({"n_prompt": x.n_prompt, "n_gen": x.n_gen, "samples_ts": x.samples_ts, "samples_ns": x.samples_ns})).collect::<Vec<_>>(),
                "last_level_cache_bytes": rules::last_level_cache_bytes(),
                "lamina_command": format!("lamina bench generate --json --pp 512 --tg 0 -t {t} --runs {reps} -m MODEL; lamina bench generate --json --pp 1 --tg {tg} -t {t} --runs {reps} -m MODEL"),
                "llama_cpp_command": format!("llama-bench -m MODEL -p 512 -n {tg} -t {t} -r {reps} -o json"),
            }),
        );
    }
    Ok(())
}

/// Whether `model` is an embedding model (no LM head), by its file name.
pub(crate) fn is_embedding_model(model: &Path) -> bool {
    model
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("embeddinggemma"))
}

/// Prompt processing of an embedding model: `lamina bench embed` on the long
/// text repeated 9 times (515 tokens) against `llama-bench --embeddings 1`
/// on as many tokens.
fn embed_pp(
    args: &Args,
    lamina: &Path,
    lbench: &Path,
    model: &Path,
    name: &str,
    threads: usize,
    report: &mut Report,
) -> Result<()> {
    let t = threads.to_string();
    let reps = args.reps.to_string();
    let text = [LONG_TEXT; 9].join(" ");
    eprintln!("bench generate: {name}: lamina (embedding forward)");
    let out = capture_ok(
        Command::new(lamina)
            .args([
                "bench",
                "embed",
                "--json",
                "--warmup",
                &WARMUP_RUNS.to_string(),
                "-t",
                &t,
            ])
            .args(["--runs", &reps, "--text", &text, "-m"])
            .arg(model),
    )?;
    let v = parse_json_line(&out.stdout)?;
    let tokens = v["tokens"].as_u64().context("lamina bench embed: tokens")?;
    let ub = tokens.max(512).to_string();
    let ours: Vec<f64> = f64s(&v["samples_ms"])
        .iter()
        .map(|ms| tokens as f64 / (ms / 1e3))
        .collect();
    eprintln!("bench generate: {name}: llama.cpp (embedding forward)");
    let out = capture_ok(
        llama(lbench, false)
            .arg("-m")
            .arg(model)
            .args(["-p", &tokens.to_string(), "-n", "0", "-t", &t, "-r", &reps])
            // A non-causal model needs the whole text in one micro-batch.
            .args(["-b", &ub, "-ub", &ub, "--embeddings", "1", "-o", "json"]),
    )?;
    let tests = parse_llama_bench(&String::from_utf8_lossy(&out.stdout))?;
    let theirs = tests
        .first()
        .map(|x| x.samples_ts.clone())
        .unwrap_or_default();
    report.row(
        format!("{name} pp{tokens} (embedding forward), tokens/s"),
        Better::Higher,
        Ok(Cell::rate(&stats(&ours), "tok/s")),
        if theirs.is_empty() {
            Err("missing from llama-bench output".into())
        } else {
            Ok(Cell::rate(&stats(&theirs), "tok/s"))
        },
    );
    report.detail.insert(
        format!("embed_pp_{name}"),
        json!({"tokens": tokens, "lamina_tokens_per_s": ours, "llama_cpp_tokens_per_s": theirs,
               "lamina_command": format!("lamina bench embed --json --warmup {WARMUP_RUNS} -t {t} --runs {reps} --text LONG×9 -m MODEL"),
               "llama_cpp_command": format!("llama-bench -m MODEL -p {tokens} -n 0 -t {t} -r {reps} -b {ub} -ub {ub} --embeddings 1 -o json")}),
    );
    Ok(())
}

/// `lamina bench embed --json` with the shared warm-up count on `threads` threads.
fn lamina_bench_embed(lamina: &Path, threads: &str) -> Command {
    let mut cmd = Command::new(lamina);
    cmd.args(["bench", "embed", "--json", "--warmup"])
        .arg(WARMUP_RUNS.to_string())
        .args(["-t", threads]);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_texts_have_the_seeds_word_counts() {
        assert_eq!(SHORT_TEXT.split_whitespace().count(), 9);
        assert_eq!(LONG_TEXT.split_whitespace().count(), 49);
    }

    #[test]
    fn batch_texts_match_lamina_bench() {
        let t = batch_texts(SHORT_TEXT, BATCH);
        assert_eq!(t.len(), 96);
        assert_eq!(t[0], "0: The quick brown");
        assert_eq!(t[1], "1: The quick brown fox jumps over");
        // i mod 9 = 8: 27 words, the text three times.
        assert_eq!(t[8].split_whitespace().count(), 28);
        assert_eq!(t[9], "9: The quick brown");
        assert!(t.iter().all(|s| !s.contains('\n')));
    }

    #[test]
    fn proc_status_is_parsed() {
        let text = "Name:\tlamina\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 1234567 kB\n\
                    VmSize:\t 1200000 kB\nVmHWM:\t  412345 kB\nVmRSS:\t  400000 kB\n\
                    RssAnon:\t   66000 kB\nRssFile:\t  333000 kB\nRssShmem:\t    1000 kB\nThreads:\t3\n";
        assert_eq!(
            parse_status(text),
            Some(Mem {
                rss_kb: 400_000,
                rss_file_kb: 333_000,
                rss_anon_kb: 66_000,
                hwm_kb: 412_345
            })
        );
        // A zombie has no memory lines.
        assert_eq!(
            parse_status("Name:\tx\nState:\tZ (zombie)\nThreads:\t1\n"),
            None
        );
        assert_eq!(
            parse_status("VmHWM:\tbad kB\nVmRSS:\t1 kB\nRssAnon:\t1 kB\nRssFile:\t1 kB\n"),
            None
        );
    }

    #[test]
    fn peak_keeps_maxima() {
        let mut p = Peak::default();
        p.add(&Mem {
            rss_kb: 10,
            rss_file_kb: 8,
            rss_anon_kb: 2,
            hwm_kb: 10,
        });
        p.add(&Mem {
            rss_kb: 9,
            rss_file_kb: 5,
            rss_anon_kb: 4,
            hwm_kb: 12,
        });
        assert_eq!((p.hwm_kb, p.file_kb, p.anon_kb, p.samples), (12, 8, 4, 2));
    }

    #[test]
    fn llama_bench_json_is_parsed() {
        let text = r#"warning: something
[
  {
    "build_commit": "0c1e570",
    "n_prompt": 12,
    "n_gen": 0,
    "avg_ns": 372039618,
    "samples_ns": [ 485288811, 258790426 ],
    "samples_ts": [ 24.7275, 46.3696 ]
  },
  {
    "build_commit": "0c1e570",
    "n_prompt": 0,
    "n_gen": 128,
    "samples_ns": [ 1000000000 ],
    "samples_ts": [ 128.0 ]
  }
]
"#;
        let t = parse_llama_bench(text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].n_prompt, 12);
        assert_eq!(t[0].samples_ns, vec![485_288_811.0, 258_790_426.0]);
        assert_eq!(t[0].build_commit.as_deref(), Some("0c1e570"));
        assert_eq!((t[1].n_prompt, t[1].n_gen), (0, 128));
        assert_eq!(t[1].samples_ts, vec![128.0]);
        assert!(parse_llama_bench("no json").is_err());
    }

    #[test]
    fn prompt_eval_time_is_parsed() {
        let log = "0.08.220.756 I llama_perf_context_print:        load time =    5022.74 ms\n\
                   0.08.220.758 I llama_perf_context_print: prompt eval time =    3534.75 ms /    12 tokens (  294.56 ms per token,     3.39 tokens per second)\n\
                   0.08.220.759 I llama_perf_context_print:        eval time =       0.00 ms /     1 runs\n";
        assert_eq!(parse_prompt_eval(log), Some((3534.75, 12)));
        assert_eq!(
            parse_prompt_eval("llama_perf_context_print: load time = 1 ms"),
            None
        );
    }

    #[test]
    fn decode_rate_skips_the_first_pass() {
        let log = "0.01.144.923 I batch_decode: n_tokens = 500, n_seq = 25\n\
                   0.02.322.041 I batch_decode: n_tokens = 502, n_seq = 24\n\
                   0.03.306.213 I batch_decode: n_tokens = 489, n_seq = 22\n\
                   0.04.063.275 I batch_decode: n_tokens = 492, n_seq = 24\n\
                   0.04.801.541 I batch_decode: n_tokens = 25, n_seq = 1\n\
                   0.04.897.442 I llama_perf_context_print: prompt eval time = 1539.70 ms / 2008 tokens\n";
        let (rate, total) = parse_decode_rate(log).unwrap();
        assert_eq!(total, 2008);
        assert!((rate - 1483.0 / 2.4795).abs() < 0.01, "{rate}");
        let two = log.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(parse_decode_rate(&two), None);
    }

    #[test]
    fn lamina_generate_json_is_parsed() {
        let v: Value = serde_json::from_str(
            r#"{"pp_tokens_per_s": 700.5, "tg_tokens_per_s": 160.0, "pp_samples": [700, 701], "tg_samples": [159.5, 160.5]}"#,
        )
        .unwrap();
        let g = parse_lamina_generate(&v).unwrap();
        assert_eq!(g.pp_tokens_per_s, 700.5);
        assert_eq!(g.pp_samples, vec![700.0, 701.0]);
        assert_eq!(g.tg_samples.len(), 2);
        assert_eq!(g.memory_bandwidth_gb_s, None);
        let g = parse_lamina_generate(&json!({"pp_tokens_per_s": 1.0, "tg_tokens_per_s": 2.0,
            "weight_bytes_per_token": 1.5e8, "memory_bandwidth_gb_s": 45.5, "core_round_trip_ns": 83.0,
            "tg_bandwidth_share": 0.87}))
        .unwrap();
        assert_eq!(g.weight_bytes_per_token, Some(1.5e8));
        assert_eq!(g.memory_bandwidth_gb_s, Some(45.5));
        assert_eq!(g.tg_bandwidth_share, Some(0.87));
        assert_eq!(g.core_round_trip_ns, Some(83.0));
        assert!(parse_lamina_generate(&json!({"pp_tokens_per_s": 1.0})).is_err());
        assert!(is_missing_subcommand(
            "error: unrecognized subcommand 'generate'\n"
        ));
    }

    #[test]
    fn stats_and_percentiles() {
        let s = stats(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.n, s.p50, s.min, s.max), (5, 3.0, 1.0, 5.0));
        assert_eq!(s.mean, 3.0);
        assert!((s.stddev - 2.5f64.sqrt()).abs() < 1e-12);
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        // round(19 · 0.95) = 18 → the 19th value.
        assert_eq!(stats(&v).p95, 19.0);
        assert_eq!(stats(&[]).n, 0);
    }

    #[test]
    fn lscpu_model_name_is_found() {
        let text = "Architecture:            x86_64\n  CPU op-mode(s):        32-bit, 64-bit\nVendor ID:               AuthenticAMD\n  Model name:            AMD EPYC\n    CPU family:          25\n";
        assert_eq!(parse_lscpu_model(text).as_deref(), Some("AMD EPYC"));
        assert_eq!(parse_lscpu_model("Architecture: x86_64\n"), None);
    }

    #[test]
    fn timestamps_are_utc_file_names() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00-00-00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_406_428);
        assert_eq!(utc_timestamp(t), "2026-11-23T04-00-28Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc_timestamp(leap), "2000-02-29T00-00-00Z");
    }

    #[test]
    fn table_is_markdown() {
        let t = markdown_table(&["a", "b"], &[vec!["1".into(), "x|y".into()]]);
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | x\\|y |\n");
    }
}
