//! `cargo xtask bench embed --model all-MiniLM-L6-v2`: five embedding
//! engines side by side on all-MiniLM-L6-v2, each in its own process with
//! the same thread count:
//!
//! * lamina on the F32 and Q8_0 files (`lamina bench embed`);
//! * llama.cpp on the same files (`llama-embedding` for the batch, the
//!   wall time between its logged batch decodes as in `bench embed`;
//!   `llama-bench --embeddings 1` for the latency);
//! * sentence-transformers on PyTorch (float32), the checkpoint folder;
//! * ONNX Runtime on the checkpoint exported to ONNX (float32), and on its
//!   dynamic int8 quantization (`quantize_dynamic`), run the way
//!   sentence-transformers' `backend="onnx"` runs it (see `embed_engines.py`).
//!
//! The Python engines run in a venv the bench makes under `target/bench-venv`
//! with pinned packages ([`PY_PACKAGES`]); the ONNX files are exported once
//! into `target/bench/all-MiniLM-L6-v2-onnx/`.
//!
//! Figures: a batch of 96 texts (the texts of `bench embed`'s batch figure)
//! in texts/s, and one short text's latency (P50 over `--runs`), after one
//! warm-up run each; then the issue's targets as ratios. The load rules of
//! [`crate::bench_rules`] apply: no table from a busy machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use super::embed::{batch_texts, lamina_bench_embed};
use super::measure::{capture_ok, measure_ok};
use super::parse::{f64s, parse_decode_rate, parse_json_line, parse_llama_bench};
use super::report::{cpu_model, git_commit, markdown_table, stats, utc_timestamp};
use super::{Args, BATCH, LLAMA_BATCH, SHORT_TEXT, llama};
use crate::bench_rules::{self as rules, WARMUP_RUNS, load_average};
use crate::llama_cpp::{self, llama_cpp_bin};
use crate::{lamina_bin, models, run, target_dir};

/// The checkpoint folder (in the models directory) that selects this bench.
pub(crate) const MODEL: &str = "all-MiniLM-L6-v2";

/// The Python packages of the bench venv, pinned. torch from PyPI is its
/// default (CUDA-capable) build; it runs here on the CPU.
pub(crate) const PY_PACKAGES: &[&str] = &[
    "onnxruntime==1.32.0",
    "onnx==1.23.2",
    "sentence-transformers==5.1.2",
    "transformers==4.57.6",
    "torch==2.11.0",
];

const SCRIPT: &str = include_str!("embed_engines.py");

/// The Python engines, as `embed_engines.py run` names them.
const PY_ENGINES: [&str; 3] = [
    "sentence-transformers",
    "onnxruntime-f32",
    "onnxruntime-int8",
];

/// Whether `bench embed -m NAME` means this bench.
pub(super) fn selected(name: &str) -> bool {
    Path::new(name).file_name().is_some_and(|f| f == MODEL)
}

/// One engine's figures, or why it has none.
struct Engine {
    name: String,
    batch_per_s: Vec<f64>,
    latency_ms: Vec<f64>,
    peak_kb: u64,
    /// Cosine of its short-text vector to sentence-transformers'.
    vector: Option<Vec<f32>>,
    detail: Value,
}

impl Engine {
    fn new(name: &str) -> Self {
        Engine {
            name: name.into(),
            batch_per_s: Vec::new(),
            latency_ms: Vec::new(),
            peak_kb: 0,
            vector: None,
            detail: Value::Null,
        }
    }
}

pub(super) fn run_cmd(args: &Args, threads: usize, cores: usize) -> Result<()> {
    let dir = models::default_dir()?;
    let folder = match &args.model {
        Some(m) if Path::new(m).is_dir() => PathBuf::from(m),
        _ => dir.join(MODEL),
    };
    let gguf = |q: &str| dir.join(format!("{MODEL}-{q}.gguf"));
    for p in [folder.clone(), gguf("F32"), gguf("Q8_0")] {
        ensure!(
            p.exists(),
            "{} is missing: `cargo xtask models` makes it",
            p.display()
        );
    }
    let work = target_dir().join("bench");
    std::fs::create_dir_all(&work)?;
    let python = prepare_venv(&target_dir().join("bench-venv"))?;
    let script = work.join("embed_engines.py");
    std::fs::write(&script, SCRIPT)?;
    let onnx = work.join(format!("{MODEL}-onnx"));
    export_onnx(&python, &script, &folder, &onnx)?;
    let batch_file = work.join("batch-96.txt");
    // No trailing newline: llama-embedding would read an empty 97th prompt.
    std::fs::write(&batch_file, batch_texts(SHORT_TEXT, BATCH).join("\n"))?;
    let lamina = lamina_bin()?;

    let load = load_average();
    if let Some(why) = rules::busy(load, &[], threads, cores) {
        eprintln!("warning: {why}: the machine is busy; no headline table will be printed");
    }
    let sampler = rules::LoadSampler::start();
    let t = threads.to_string();
    let mut engines = Vec::new();
    let mut tokens = None;
    for q in ["F32", "Q8_0"] {
        let e = lamina_engine(&lamina, &gguf(q), &t, args)?;
        tokens = tokens.or(e.detail["short_tokens"].as_u64());
        engines.push(e);
    }
    let tokens = tokens.context("lamina bench: tokens of the short text")?;
    for q in ["F32", "Q8_0"] {
        engines.push(
            llama_engine(&gguf(q), &batch_file, &t, tokens, args).unwrap_or_else(|e| {
                let mut x = Engine::new(&format!("llama.cpp {q}"));
                x.detail = json!({"unavailable": format!("{e:#}")});
                x
            }),
        );
    }
    for name in PY_ENGINES {
        engines.push(py_engine(
            &python,
            &script,
            name,
            &folder,
            &onnx,
            &batch_file,
            threads,
            args,
        )?);
    }
    let during = sampler.finish();
    let busy = rules::busy(load, &during, threads, cores);

    let table = render(&engines, threads, load, &during);
    if args.json {
        let path = work.join(format!(
            "{}-embed-engines.json",
            utc_timestamp(std::time::SystemTime::now())
        ));
        let doc = json!({
            "machine": {"cpu": cpu_model(), "cores": cores},
            "threads": threads, "lamina_commit": git_commit(),
            "llama_cpp_commit": llama_cpp::existing_bin_dir().and_then(|d| llama_cpp::reported_commit(&d)),
            "python_packages": PY_PACKAGES, "load_average_before": load, "load_average_during": during,
            "engines": engines.iter().map(|e| json!({"engine": e.name, "batch_texts_per_s": e.batch_per_s,
                "latency_ms": e.latency_ms, "peak_rss_kb": e.peak_kb, "detail": e.detail})).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")?;
        println!("samples: {}", path.display());
    }
    match &busy {
        None => println!("{table}"),
        Some(why) if args.allow_busy => {
            println!("BUSY MACHINE ({why}): not a headline table\n\n{table}")
        }
        Some(_) => {}
    }
    if let Some(why) = busy {
        bail!(
            "the machine was busy ({why}): no headline table; rerun on a quiet machine (--allow-busy prints it, labelled)"
        );
    }
    Ok(())
}

/// The venv's python, the venv made (or brought to the pins) first. A
/// stamp of the pins spares pip on later runs.
fn prepare_venv(venv: &Path) -> Result<PathBuf> {
    let python = venv.join("bin/python");
    let stamp = venv.join(".lamina-pins");
    let pins = PY_PACKAGES.join("\n");
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == pins) {
        return Ok(python);
    }
    if !python.is_file() {
        run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    }
    run(Command::new(&python)
        .args(["-m", "pip", "install", "--progress-bar", "off"])
        .args(PY_PACKAGES))?;
    std::fs::write(&stamp, pins)?;
    Ok(python)
}

/// Exports the ONNX files once per set of pins.
fn export_onnx(python: &Path, script: &Path, folder: &Path, onnx: &Path) -> Result<()> {
    let stamp = onnx.join(".lamina-pins");
    let pins = PY_PACKAGES.join("\n");
    let done = ["model.onnx", "model_qint8.onnx"]
        .iter()
        .all(|f| onnx.join(f).is_file());
    if done && std::fs::read_to_string(&stamp).is_ok_and(|s| s == pins) {
        return Ok(());
    }
    eprintln!(
        "  exporting {} to ONNX (float32 and dynamic int8)",
        folder.display()
    );
    capture_ok(
        Command::new(python)
            .arg(script)
            .arg("export")
            .arg(folder)
            .arg(onnx),
    )?;
    std::fs::write(&stamp, pins)?;
    Ok(())
}

fn lamina_engine(lamina: &Path, model: &Path, t: &str, args: &Args) -> Result<Engine> {
    let q = if model.to_string_lossy().ends_with("Q8_0.gguf") {
        "Q8_0"
    } else {
        "F32"
    };
    let mut e = Engine::new(&format!("lamina {q}"));
    eprintln!("  {}: batch of {BATCH}", e.name);
    let m = measure_ok(
        lamina_bench_embed(lamina, t)
            .args(["--runs", &args.reps.to_string(), "--text", SHORT_TEXT])
            .args(["--batch", &BATCH.to_string(), "-m"])
            .arg(model),
    )?;
    let batch = parse_json_line(&m.output.stdout)?;
    e.batch_per_s = f64s(&batch["samples_ms"])
        .iter()
        .map(|ms| BATCH as f64 / (ms / 1e3))
        .collect();
    e.peak_kb = m.peak.hwm_kb;
    eprintln!("  {}: short text", e.name);
    let m = measure_ok(
        lamina_bench_embed(lamina, t)
            .args(["--runs", &args.runs.to_string(), "--text", SHORT_TEXT, "-m"])
            .arg(model),
    )?;
    let short = parse_json_line(&m.output.stdout)?;
    e.latency_ms = f64s(&short["samples_ms"]);
    let out = capture_ok(
        Command::new(lamina)
            .args(["embed", "--json", "-t", t, "-m"])
            .arg(model)
            .arg(SHORT_TEXT),
    )?;
    let v = parse_json_line(&out.stdout)?;
    e.vector = Some(f64s(&v["embedding"]).iter().map(|&x| x as f32).collect());
    e.detail = json!({"isa": short["isa"], "short_tokens": short["tokens"], "batch_tokens": batch["tokens"],
        "command": format!("lamina bench embed --json --warmup {WARMUP_RUNS} -t {t} [--batch {BATCH}] --text TEXT -m MODEL")});
    Ok(e)
}

fn llama_engine(
    model: &Path,
    batch_file: &Path,
    t: &str,
    tokens: u64,
    args: &Args,
) -> Result<Engine> {
    let q = if model.to_string_lossy().ends_with("Q8_0.gguf") {
        "Q8_0"
    } else {
        "F32"
    };
    let mut e = Engine::new(&format!("llama.cpp {q}"));
    let lembed = llama_cpp_bin("llama-embedding")?;
    let lbench = llama_cpp_bin("llama-bench")?;
    for i in 0..args.reps {
        eprintln!("  {}: batch of {BATCH} {}/{}", e.name, i + 1, args.reps);
        let m = measure_ok(
            llama(&lembed, false)
                .arg("-m")
                .arg(model)
                .args([
                    "-t",
                    t,
                    "-c",
                    LLAMA_BATCH,
                    "-b",
                    LLAMA_BATCH,
                    "-ub",
                    LLAMA_BATCH,
                ])
                .args(["-lv", "4", "--embd-output-format", "array", "-f"])
                .arg(batch_file),
        )?;
        let log = String::from_utf8_lossy(&m.output.stderr);
        let (rate, n) =
            parse_decode_rate(&log).context("llama-embedding logged fewer than 3 batch decodes")?;
        e.batch_per_s.push(BATCH as f64 * rate / n as f64);
        e.peak_kb = e.peak_kb.max(m.peak.hwm_kb);
    }
    eprintln!("  {}: short text ({tokens} tokens)", e.name);
    let out = capture_ok(
        llama(&lbench, false)
            .arg("-m")
            .arg(model)
            .args([
                "-p",
                &tokens.to_string(),
                "-n",
                "0",
                "-t",
                t,
                "-r",
                &args.runs.to_string(),
            ])
            .args(["--embeddings", "1", "-o", "json"]),
    )?;
    let tests = parse_llama_bench(&String::from_utf8_lossy(&out.stdout))?;
    let test = tests.first().context("llama-bench printed no test")?;
    e.latency_ms = test.samples_ns.iter().map(|ns| ns / 1e6).collect();
    e.detail = json!({"commit": test.build_commit,
        "batch_command": format!("llama-embedding -m MODEL -t {t} -c {LLAMA_BATCH} -b {LLAMA_BATCH} -ub {LLAMA_BATCH} -lv 4 --embd-output-format array -f BATCH_FILE (decode time of the passes after the first)"),
        "latency_command": format!("llama-bench -m MODEL -p {tokens} -n 0 -t {t} -r {} --embeddings 1 -o json", args.runs)});
    Ok(e)
}

#[allow(clippy::too_many_arguments)]
fn py_engine(
    python: &Path,
    script: &Path,
    name: &str,
    folder: &Path,
    onnx: &Path,
    batch_file: &Path,
    threads: usize,
    args: &Args,
) -> Result<Engine> {
    eprintln!("  {name}: batch of {BATCH} and short text");
    let t = threads.to_string();
    let m = measure_ok(
        Command::new(python)
            .arg(script)
            .args(["run", name])
            .arg(folder)
            .arg(onnx)
            .arg(&t)
            .arg(batch_file)
            .args([SHORT_TEXT, &args.runs.to_string(), &args.reps.to_string()])
            .arg(WARMUP_RUNS.to_string())
            .env("OMP_NUM_THREADS", &t)
            .env("MKL_NUM_THREADS", &t),
    )?;
    let v = parse_json_line(&m.output.stdout)?;
    let texts = v["texts"].as_u64().unwrap_or(0) as f64;
    let mut e = Engine::new(name);
    e.batch_per_s = f64s(&v["batch_s"]).iter().map(|s| texts / s).collect();
    e.latency_ms = f64s(&v["latency_ms"]);
    e.peak_kb = m.peak.hwm_kb;
    e.vector = Some(f64s(&v["short_vector"]).iter().map(|&x| x as f32).collect());
    e.detail = json!({"versions": v["versions"]});
    Ok(e)
}

/// The engines' table, then the issue's targets as ratios.
fn render(engines: &[Engine], threads: usize, load: Option<f64>, during: &[f64]) -> String {
    let find = |n: &str| engines.iter().find(|e| e.name == n);
    let reference = find("sentence-transformers").and_then(|e| e.vector.clone());
    let mut rows = Vec::new();
    for e in engines {
        if e.batch_per_s.is_empty() {
            let why = e.detail["unavailable"].as_str().unwrap_or("not measured");
            rows.push(vec![
                e.name.clone(),
                why.lines().next().unwrap_or("").into(),
                "—".into(),
                "—".into(),
                "—".into(),
                "—".into(),
            ]);
            continue;
        }
        let b = stats(&e.batch_per_s);
        let l = stats(&e.latency_ms);
        let cos = match (&e.vector, &reference) {
            (Some(a), Some(r)) => format!("{:.6}", cosine(a, r)),
            _ => "—".into(),
        };
        rows.push(vec![
            e.name.clone(),
            format!("{:.1} ± {:.1}", b.mean, b.stddev),
            format!("{:.2}", l.p50),
            format!("{:.2}", l.p95),
            format!("{:.0}", e.peak_kb as f64 / 1024.0),
            cos,
        ]);
    }
    let head = format!(
        "all-MiniLM-L6-v2, {}, {threads} threads, lamina {}; each engine in its own process, one warm-up run; \
         load average {} before, {} during\n\n",
        cpu_model(),
        git_commit().unwrap_or_else(|| "?".into()),
        load.map_or_else(|| "?".into(), |l| format!("{l:.1}")),
        rules::describe_load(during),
    );
    let table = markdown_table(
        &[
            "engine",
            "batch of 96, texts/s",
            "short text P50 (ms)",
            "P95 (ms)",
            "peak RSS (MiB)",
            "short-text cosine to sentence-transformers",
        ],
        &rows,
    );
    let mut targets = Vec::new();
    let batch = |n: &str| {
        find(n)
            .filter(|e| !e.batch_per_s.is_empty())
            .map(|e| stats(&e.batch_per_s).mean)
    };
    let lat = |n: &str| {
        find(n)
            .filter(|e| !e.latency_ms.is_empty())
            .map(|e| stats(&e.latency_ms).p50)
    };
    for t in TARGETS {
        let (ours, theirs) = match t.figure {
            Figure::Batch => (batch(t.ours), batch(t.theirs)),
            Figure::Latency => (lat(t.ours), lat(t.theirs)),
        };
        let (ratio, met) = match (ours, theirs) {
            (Some(a), Some(b)) if b > 0.0 => {
                let r = a / b;
                let met = match t.figure {
                    Figure::Batch => r >= t.ratio,
                    Figure::Latency => r <= t.ratio,
                };
                (
                    format!("{r:.2}×"),
                    if met { "yes" } else { "NO" }.to_string(),
                )
            }
            _ => ("—".into(), "—".into()),
        };
        targets.push(vec![t.describe(), ratio, met]);
    }
    format!(
        "{head}{table}\n{}",
        markdown_table(&["target", "measured", "met"], &targets)
    )
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot = |x: &[f32], y: &[f32]| {
        x.iter()
            .zip(y)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum::<f64>()
    };
    let norms = (dot(a, a) * dot(b, b)).sqrt();
    if norms == 0.0 { 0.0 } else { dot(a, b) / norms }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Figure {
    Batch,
    Latency,
}

/// One of the issue's speed targets: `ours` against `theirs` on `figure`,
/// at least `ratio` times the throughput, or at most `ratio` times the latency.
struct Target {
    figure: Figure,
    ours: &'static str,
    theirs: &'static str,
    ratio: f64,
}

impl Target {
    fn describe(&self) -> String {
        match self.figure {
            Figure::Batch => format!("batch: {} ≥ {}× {}", self.ours, self.ratio, self.theirs),
            Figure::Latency => format!(
                "short text: {} ≤ {}× {}'s latency",
                self.ours, self.ratio, self.theirs
            ),
        }
    }
}

const fn target(figure: Figure, ours: &'static str, theirs: &'static str, ratio: f64) -> Target {
    Target {
        figure,
        ours,
        theirs,
        ratio,
    }
}

const TARGETS: [Target; 8] = [
    target(Figure::Batch, "lamina F32", "onnxruntime-f32", 1.5),
    target(Figure::Batch, "lamina Q8_0", "onnxruntime-int8", 1.2),
    target(Figure::Latency, "lamina F32", "onnxruntime-f32", 0.7),
    target(Figure::Latency, "lamina Q8_0", "onnxruntime-int8", 0.7),
    target(Figure::Batch, "lamina F32", "llama.cpp F32", 2.0),
    target(Figure::Batch, "lamina Q8_0", "llama.cpp Q8_0", 2.0),
    target(Figure::Latency, "lamina F32", "llama.cpp F32", 0.5),
    target(Figure::Latency, "lamina Q8_0", "llama.cpp Q8_0", 0.5),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minilm_folder_selects_the_engines_bench() {
        assert!(selected("all-MiniLM-L6-v2"));
        assert!(selected("/models/all-MiniLM-L6-v2"));
        assert!(!selected("all-MiniLM-L6-v2-Q8_0.gguf"));
        assert!(!selected("embeddinggemma-300m-Q8_0.gguf"));
    }

    #[test]
    fn python_packages_are_pinned() {
        for p in PY_PACKAGES {
            let (name, version) = p.split_once("==").unwrap();
            assert!(
                !name.is_empty() && version.split('.').all(|d| d.parse::<u32>().is_ok()),
                "{p}"
            );
        }
        assert!(PY_PACKAGES.contains(&"onnxruntime==1.32.0"));
        for e in PY_ENGINES {
            assert!(
                SCRIPT.contains(&format!("\"{e}\"")),
                "{e} is an engine of embed_engines.py"
            );
        }
    }

    fn engine(name: &str, per_s: f64, ms: f64, v: &[f32]) -> Engine {
        let mut e = Engine::new(name);
        e.batch_per_s = vec![per_s, per_s];
        e.latency_ms = vec![ms, ms, ms];
        e.vector = Some(v.to_vec());
        e
    }

    /// The table shows every engine and judges each target by its ratio.
    #[test]
    fn targets_are_ratios_of_the_right_figures() {
        let engines = [
            engine("lamina F32", 300.0, 3.0, &[1.0, 0.0]),
            engine("lamina Q8_0", 400.0, 2.0, &[1.0, 0.01]),
            engine("llama.cpp F32", 100.0, 8.0, &[1.0, 0.0]),
            Engine::new("llama.cpp Q8_0"),
            engine("sentence-transformers", 100.0, 20.0, &[1.0, 0.0]),
            engine("onnxruntime-f32", 150.0, 5.0, &[1.0, 0.0]),
            engine("onnxruntime-int8", 400.0, 2.5, &[0.0, 1.0]),
        ];
        let t = render(&engines, 2, Some(0.1), &[2.0]);
        assert!(
            t.contains("| lamina F32 | 300.0 ± 0.0 | 3.00 | 3.00 |"),
            "{t}"
        );
        assert!(
            t.contains("| onnxruntime-int8 | 400.0 ± 0.0 | 2.50 | 2.50 | 0 | 0.000000 |"),
            "{t}"
        );
        assert!(t.contains("| llama.cpp Q8_0 | not measured |"), "{t}");
        assert!(
            t.contains("| batch: lamina F32 ≥ 1.5× onnxruntime-f32 | 2.00× | yes |"),
            "{t}"
        );
        assert!(
            t.contains("| batch: lamina Q8_0 ≥ 1.2× onnxruntime-int8 | 1.00× | NO |"),
            "{t}"
        );
        assert!(
            t.contains("| short text: lamina F32 ≤ 0.7× onnxruntime-f32's latency | 0.60× | yes |"),
            "{t}"
        );
        assert!(
            t.contains("| short text: lamina F32 ≤ 0.5× llama.cpp F32's latency | 0.38× | yes |"),
            "{t}"
        );
        assert!(
            t.contains("| batch: lamina Q8_0 ≥ 2× llama.cpp Q8_0 | — | — |"),
            "{t}"
        );
    }
}
