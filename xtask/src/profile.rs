//! `cargo xtask profile WORKLOAD`: a CPU profile of one named workload.
//!
//! `perf record -e cpu-clock` (software sampling: this VM exposes no
//! hardware counters) with DWARF call graphs, so the release profile's
//! line-table debug info gives real symbols and inlined frames without a
//! frame-pointer build. The top 20 functions by self time (`perf report
//! --no-children`) and the top 20 of lamina's own functions by cumulative
//! time (`perf report --children`) are printed as tables; everything lands
//! in `target/profile/<workload>/`: `perf.data`, both full reports, the
//! folded stacks and `flamegraph.svg` (made by the `inferno` binaries,
//! installed with `cargo install inferno` when missing; if that fails, the
//! folded stacks are written and the SVG is skipped, saying so).
//!
//! `--alloc` instead counts allocator calls: uprobes on glibc's `malloc`,
//! `calloc`, `realloc` and `posix_memalign` (event group `lamina_alloc`,
//! added once with `perf probe`), the workload run with 1 and 1 + k timed
//! runs, and the difference divided by k attributed to the innermost lamina
//! function on each call's stack. No special build of lamina is needed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

use crate::bench::report::markdown_table;
use crate::bench::{self, LONG_TEXT, SHORT_TEXT, resolve_model};
use crate::synth::{self, DEFAULT_SEED, SynthType};
use crate::{lamina_bin, models, run, target_dir};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Workload {
    /// `lamina bench embed` on the 9-word text.
    EmbedShort,
    /// `lamina bench embed` on the 49-word text.
    EmbedLong,
    /// `lamina bench embed --batch 96`.
    EmbedBatch,
    /// Prompt processing, 512 tokens (`lamina bench generate --pp 512 --tg 0`).
    Pp,
    /// Token generation, 128 tokens (`lamina bench generate --pp 16 --tg 128`).
    Tg,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::EmbedShort => "embed-short",
            Workload::EmbedLong => "embed-long",
            Workload::EmbedBatch => "embed-batch",
            Workload::Pp => "pp",
            Workload::Tg => "tg",
        }
    }
    fn default_runs(self) -> usize {
        // Enough runs that model loading is a small part of the profile.
        match self {
            Workload::EmbedShort => 200,
            Workload::EmbedLong => 60,
            Workload::EmbedBatch => 3,
            Workload::Pp | Workload::Tg => 5,
        }
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[arg(value_enum)]
    workload: Workload,
    /// Count allocations and bytes per run of the workload, by call site
    /// (uprobes on glibc's allocator), instead of the CPU profile.
    #[arg(long)]
    alloc: bool,
    /// Model file or name in the models directory (default: EmbeddingGemma
    /// Q8_0 for embed-*, SmolLM2 Q8_0 for pp/tg).
    #[arg(short, long, conflicts_with = "synth")]
    model: Option<String>,
    /// Profile a random-weight file of this real shape instead (a name
    /// `cargo xtask synth` takes, e.g. Llama-3.1-8B), written under
    /// `target/synth/` first if missing.
    #[arg(long)]
    synth: Option<String>,
    /// Weight types of the --synth file.
    #[arg(
        long = "type",
        value_enum,
        default_value = "q4_k_m",
        requires = "synth"
    )]
    synth_type: SynthType,
    #[arg(short, long)]
    threads: Option<usize>,
    /// Timed runs of the workload (default: 200 short, 60 long, 3 batch, 5 pp/tg).
    #[arg(long)]
    runs: Option<usize>,
    /// pp and tg only: tokens already in the cache, as `bench generate
    /// --depth` (its untimed fill of the cache is sampled too).
    #[arg(long, default_value_t = 0)]
    depth: usize,
    /// Samples per second per CPU.
    #[arg(long, default_value_t = 499)]
    freq: u32,
    /// Frame-pointer call graphs (`-g`) instead of DWARF: much smaller
    /// perf.data, but callers are lost where frame pointers are omitted.
    #[arg(long)]
    fp: bool,
}

/// A cache depth is a generation workload's: the embedders keep no cache.
fn check_depth(w: Workload, depth: usize) -> Result<()> {
    ensure!(
        depth == 0 || matches!(w, Workload::Pp | Workload::Tg),
        "--depth {depth}: only the pp and tg workloads have a cache to fill"
    );
    Ok(())
}

/// The random-weight file of shape `name`, written first where missing
/// (minutes for the large shapes, before anything is sampled).
fn synth_model(name: &str, ty: SynthType) -> Result<PathBuf> {
    let shape = synth::find(name.trim())?;
    let path = synth::ensure(shape, ty, DEFAULT_SEED)?;
    eprintln!("profile: {} {}: {}", shape.name, ty.name(), path.display());
    Ok(path)
}

pub(crate) fn run_cmd(args: Args) -> Result<()> {
    ensure_perf()?;
    let lamina = lamina_bin()?;
    let w = args.workload;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let runs = args.runs.unwrap_or(w.default_runs()).max(1);
    check_depth(w, args.depth)?;
    let model = match (&args.model, w) {
        (Some(m), _) => resolve_model(m)?,
        (None, _) if let Some(name) = &args.synth => synth_model(name, args.synth_type)?,
        (None, Workload::Pp | Workload::Tg) => {
            let dir = models::default_dir()?;
            [
                "SmolLM2-135M-Instruct-Q8_0.gguf",
                "gemma-3-270m-Q4_K_M.gguf",
            ]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .with_context(|| format!("no generation model in {} (pass -m)", dir.display()))?
        }
        (None, _) => bench::default_embed_model()?,
    };
    if args.alloc {
        return alloc_profile(&lamina, w, &model, threads, args.runs, args.depth);
    }
    let workload = workload_cmd(&lamina, w, &model, threads, runs, 1, args.depth)?;

    let out = target_dir().join("profile").join(w.name());
    fs::create_dir_all(&out)?;
    let data = out.join("perf.data");
    let _ = fs::remove_file(&data);
    let mut rec = Command::new("perf");
    rec.args(["record", "-e", "cpu-clock", "-F", &args.freq.to_string()]);
    if args.fp {
        rec.arg("-g");
    } else {
        rec.args(["--call-graph", "dwarf,16384"]);
    }
    rec.arg("-o")
        .arg(&data)
        .arg("--")
        .arg(workload.get_program());
    rec.args(workload.get_args());
    run(&mut rec).context("perf record failed (is perf_event_paranoid ≤ 2, or are you root?)")?;

    // Self time.
    let self_text = perf_report(&data, false)?;
    fs::write(out.join("report-self.txt"), &self_text)?;
    let self_rows = merge_by_symbol(parse_perf_report(&self_text));
    // Cumulative time.
    let children_text = perf_report(&data, true)?;
    fs::write(out.join("report-children.txt"), &children_text)?;
    let children_rows = parse_perf_report(&children_text);

    println!(
        "\n## {} — {} ({} threads, {runs} runs)\n",
        w.name(),
        model.display(),
        threads
    );
    println!("Top 20 by self time:\n");
    let rows: Vec<Vec<String>> = self_rows
        .iter()
        .take(20)
        .enumerate()
        .map(|(i, e)| {
            vec![
                (i + 1).to_string(),
                format!("{:.2}%", e.self_pct),
                short_symbol(&e.symbol),
            ]
        })
        .collect();
    println!("{}", markdown_table(&["#", "self", "function"], &rows));
    println!("Top 20 of lamina's functions by cumulative time (self + callees):\n");
    // lamina's own functions (not std or rayon generics instantiated with
    // lamina types), each name once: its largest entry.
    let mut seen = std::collections::HashSet::new();
    let rows: Vec<Vec<String>> = children_rows
        .iter()
        .filter(|e| short_symbol(&e.symbol).contains("lamina") && seen.insert(e.symbol.clone()))
        .take(20)
        .enumerate()
        .map(|(i, e)| {
            vec![
                (i + 1).to_string(),
                format!("{:.2}%", e.children_pct.unwrap_or(e.self_pct)),
                format!("{:.2}%", e.self_pct),
                short_symbol(&e.symbol),
            ]
        })
        .collect();
    println!(
        "{}",
        markdown_table(&["#", "cumulative", "self", "function"], &rows)
    );

    flamegraph(&data, &out)?;
    println!("perf data and full reports: {}", out.display());
    Ok(())
}

/// The `lamina bench` command line of a workload.
fn workload_cmd(
    lamina: &Path,
    w: Workload,
    model: &Path,
    threads: usize,
    runs: usize,
    warmup: usize,
    depth: usize,
) -> Result<Command> {
    let mut cmd = Command::new(lamina);
    let (t, r) = (threads.to_string(), runs.to_string());
    match w {
        Workload::EmbedShort | Workload::EmbedLong | Workload::EmbedBatch => {
            let text = if w == Workload::EmbedLong {
                LONG_TEXT
            } else {
                SHORT_TEXT
            };
            cmd.args(["bench", "embed", "-t", &t, "--runs", &r, "--text", text])
                .args(["--warmup", &warmup.to_string()]);
            if w == Workload::EmbedBatch {
                cmd.args(["--batch", &bench::BATCH.to_string()]);
            }
        }
        Workload::Pp if bench::generate::is_embedding_model(model) => {
            ensure!(
                depth == 0,
                "--depth {depth}: an embedding model keeps no cache"
            );
            // As `bench generate` does: an embedding model's prompt processing
            // is one embedding forward over the long text repeated 9 times.
            let text = [LONG_TEXT; 9].join(" ");
            cmd.args(["bench", "embed", "-t", &t, "--runs", &r, "--text", &text])
                .args(["--warmup", &warmup.to_string()]);
        }
        Workload::Pp | Workload::Tg => {
            let probe = Command::new(lamina)
                .args(["bench", "generate", "--help"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            ensure!(
                probe.success(),
                "profile {}: `lamina bench generate` is not available yet",
                w.name()
            );
            // `lamina bench generate` always runs one untimed warm-up.
            let (pp, tg) = if w == Workload::Pp {
                ("512", "0")
            } else {
                ("16", "128")
            };
            cmd.args([
                "bench", "generate", "--pp", pp, "--tg", tg, "-t", &t, "--runs", &r,
            ]);
            if depth > 0 {
                cmd.args(["--depth", &depth.to_string()]);
            }
        }
    }
    cmd.arg("-m").arg(model);
    Ok(cmd)
}

// ---------------------------------------------------------------------------
// Allocations (`--alloc`).

/// uprobes on glibc's allocator entry points, in their own event group.
const ALLOC_PROBES: &[(&str, &str)] = &[
    ("malloc", "lamina_alloc:malloc=__libc_malloc size=%di:u64"),
    (
        "calloc",
        "lamina_alloc:calloc=__libc_calloc nmemb=%di:u64 size=%si:u64",
    ),
    (
        "realloc",
        "lamina_alloc:realloc=__libc_realloc size=%si:u64",
    ),
    (
        "posix_memalign",
        "lamina_alloc:posix_memalign=posix_memalign size=%dx:u64",
    ),
];

/// The libc a binary loads (`ldd`'s `libc.so.6 => PATH`).
fn libc_of(bin: &Path) -> Result<PathBuf> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("libc.so.6 =>"))
        .and_then(|l| l.split("=>").nth(1)?.split_whitespace().next())
        .map(PathBuf::from)
        .with_context(|| format!("{} does not load glibc's libc.so.6", bin.display()))
}

fn ensure_alloc_probes(libc: &Path) -> Result<()> {
    let list = Command::new("perf").args(["probe", "-l"]).output()?;
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    for (name, spec) in ALLOC_PROBES {
        if list.contains(&format!("lamina_alloc:{name} ")) {
            continue;
        }
        let out = Command::new("perf")
            .args(["probe", "-x"])
            .arg(libc)
            .args(["--add", spec])
            .output()?;
        ensure!(
            out.status.success(),
            "could not add the uprobe {spec:?} (needs root and a kernel with uprobes): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// One allocator call from `perf script`: which entry point, how many bytes,
/// and the innermost lamina function on the stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AllocSample {
    pub func: String,
    pub bytes: u64,
    pub site: String,
}

/// Parses `perf script` output of the `lamina_alloc:*` probes with call
/// graphs.
pub(crate) fn parse_alloc_script(text: &str) -> Vec<AllocSample> {
    let mut out = Vec::new();
    let mut cur: Option<AllocSample> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            out.extend(cur.take());
        } else if line.starts_with(|c: char| c.is_whitespace()) {
            let Some(s) = cur.as_mut() else { continue };
            if !s.site.is_empty() {
                continue;
            }
            let sym = frame_symbol(line.trim());
            if short_symbol(sym).contains("lamina") {
                s.site = sym.to_string();
            }
        } else {
            out.extend(cur.take());
            let Some(ev) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("lamina_alloc:"))
            else {
                continue;
            };
            let field = |k: &str| -> Option<u64> {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(k)?.parse().ok())
            };
            let size = field("size=").unwrap_or(0);
            let bytes = size.saturating_mul(field("nmemb=").unwrap_or(1));
            cur = Some(AllocSample {
                func: ev.trim_end_matches(':').to_string(),
                bytes,
                site: String::new(),
            });
        }
    }
    out.extend(cur);
    for s in &mut out {
        if s.site.is_empty() {
            s.site = "(no lamina frame: std or start-up)".into();
        }
    }
    out
}

/// `55d0c1 symbol+0x1f (dso)` → `symbol`.
fn frame_symbol(frame: &str) -> &str {
    let after_addr = frame.split_once(' ').map_or("", |(_, r)| r);
    let sym = match after_addr.rfind(" (") {
        Some(i) => &after_addr[..i],
        None => after_addr,
    };
    match sym.rfind("+0x") {
        Some(i) => &sym[..i],
        None => sym,
    }
}

/// Per call site: (calls, bytes).
fn alloc_by_site(samples: &[AllocSample]) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut m = std::collections::BTreeMap::new();
    for s in samples {
        let e: &mut (u64, u64) = m.entry(s.site.clone()).or_default();
        e.0 += 1;
        e.1 += s.bytes;
    }
    m
}

/// `--alloc`: the workload run twice, with `a` and `b` timed runs and no
/// warm-up, under uprobes on malloc/calloc/realloc/posix_memalign; the
/// difference divided by `b - a` is what one run (one `embed` call, or one
/// pp+tg pass) allocates, by call site.
fn alloc_profile(
    lamina: &Path,
    w: Workload,
    model: &Path,
    threads: usize,
    extra_runs: Option<usize>,
    depth: usize,
) -> Result<()> {
    let libc = libc_of(lamina)?;
    ensure_alloc_probes(&libc)?;
    let (a, b) = (
        1,
        1 + extra_runs.unwrap_or(if w == Workload::EmbedBatch { 2 } else { 10 }),
    );
    let out = target_dir()
        .join("profile")
        .join(format!("{}-alloc", w.name()));
    fs::create_dir_all(&out)?;
    let mut sites = Vec::new();
    for runs in [a, b] {
        let data = out.join(format!("alloc-{runs}.data"));
        let _ = fs::remove_file(&data);
        let cmd = workload_cmd(lamina, w, model, threads, runs, 0, depth)?;
        let mut rec = Command::new("perf");
        rec.arg("record");
        for (name, _) in ALLOC_PROBES {
            rec.args(["-e", &format!("lamina_alloc:{name}")]);
        }
        // A large buffer: start-up allocates in bursts, and a lost chunk
        // would skew the difference between the two runs.
        rec.args(["--call-graph", "dwarf,16384", "-m", "64M", "-o"])
            .arg(&data)
            .arg("--")
            .arg(cmd.get_program())
            .args(cmd.get_args());
        run(&mut rec)?;
        let script = Command::new("perf")
            .arg("script")
            .arg("-i")
            .arg(&data)
            .stderr(Stdio::null())
            .output()?;
        ensure!(script.status.success(), "perf script failed");
        let samples = parse_alloc_script(&String::from_utf8_lossy(&script.stdout));
        sites.push(alloc_by_site(&samples));
    }
    let k = (b - a) as f64;
    let total = |m: &std::collections::BTreeMap<String, (u64, u64)>| {
        m.values().fold((0u64, 0u64), |t, v| (t.0 + v.0, t.1 + v.1))
    };
    let (ta, tb) = (total(&sites[0]), total(&sites[1]));
    let per_run = (
        (tb.0 as f64 - ta.0 as f64) / k,
        (tb.1 as f64 - ta.1 as f64) / k,
    );
    let mut rows: Vec<(String, f64, f64)> = sites[1]
        .iter()
        .map(|(site, &(n, bytes))| {
            let (na, ba) = sites[0].get(site).copied().unwrap_or((0, 0));
            (
                site.clone(),
                (n as f64 - na as f64) / k,
                (bytes as f64 - ba as f64) / k,
            )
        })
        .filter(|r| r.1.abs() >= 0.05)
        .collect();
    rows.sort_by(|x, y| y.1.total_cmp(&x.1));
    println!(
        "\n## {} allocations — {} ({threads} threads; runs {a} vs {b}, no warm-up)\n",
        w.name(),
        model.display()
    );
    println!(
        "Per run: {:.1} allocations, {:.0} bytes. Start-up plus one run: {} allocations, {} bytes.\n",
        per_run.0, per_run.1, ta.0, ta.1
    );
    let table: Vec<Vec<String>> = rows
        .iter()
        .take(20)
        .enumerate()
        .map(|(i, (site, n, bytes))| {
            vec![
                (i + 1).to_string(),
                format!("{n:.1}"),
                format!("{bytes:.0}"),
                short_symbol(site),
            ]
        })
        .collect();
    println!(
        "{}",
        markdown_table(
            &[
                "#",
                "allocations/run",
                "bytes/run",
                "call site (innermost lamina function)"
            ],
            &table
        )
    );
    println!(
        "A run is one `lamina bench` repetition: one embed call (tokenize, forward, pooling, \
         output vectors) or one pp+tg pass. perf data: {}",
        out.display()
    );
    Ok(())
}

/// perf on PATH, installed with apt-get when missing.
fn ensure_perf() -> Result<()> {
    let works = || {
        Command::new("perf")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works() {
        return Ok(());
    }
    eprintln!("perf is missing: installing linux-perf with apt-get");
    let apt = |a: &[&str]| {
        Command::new("apt-get")
            .args(a)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", "linux-perf"]) {
        let _ = apt(&["update"]);
        let _ = apt(&["install", "-y", "linux-perf"]);
    }
    ensure!(
        works(),
        "perf is missing and `apt-get install -y linux-perf` did not provide it: install perf \
         (linux-perf on Debian, linux-tools-$(uname -r) on Ubuntu)"
    );
    Ok(())
}

fn perf_report(data: &Path, children: bool) -> Result<String> {
    let out = Command::new("perf")
        .arg("report")
        .arg("-i")
        .arg(data)
        .arg(if children {
            "--children"
        } else {
            "--no-children"
        })
        .args([
            "--sort",
            "symbol",
            "--stdio",
            "-g",
            "none",
            "--percent-limit",
            "0.1",
        ])
        .stderr(Stdio::null())
        .output()
        .context("running perf report")?;
    ensure!(out.status.success(), "perf report failed ({})", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One line of `perf report --stdio -g none --sort symbol`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PerfEntry {
    /// With `--children`: the share of samples with this function on the stack.
    pub children_pct: Option<f64>,
    /// The share of samples in this function itself.
    pub self_pct: f64,
    /// `[.]` user space, `[k]` kernel.
    pub kernel: bool,
    pub symbol: String,
}

/// Parses perf report's table: `  12.34%  [.] sym` or, with `--children`,
/// `  56.78%  12.34%  [.] sym`, possibly followed by IPC columns (separated
/// from the symbol by two or more spaces; symbols never hold two spaces).
pub(crate) fn parse_perf_report(text: &str) -> Vec<PerfEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim_start();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let Some(open) = l.find('[') else { continue };
        let pcts: Vec<f64> = l[..open]
            .split_whitespace()
            .filter_map(|p| p.strip_suffix('%')?.parse().ok())
            .collect();
        let rest = &l[open..];
        let Some(close) = rest.find("] ") else {
            continue;
        };
        let marker = &rest[1..close];
        let sym = rest[close + 2..].trim_start();
        let sym = sym.split("  ").next().unwrap_or("").trim_end();
        let (children_pct, self_pct) = match pcts.as_slice() {
            [s] => (None, *s),
            [c, s] => (Some(*c), *s),
            _ => continue,
        };
        if sym.is_empty() {
            continue;
        }
        out.push(PerfEntry {
            children_pct,
            self_pct,
            kernel: marker == "k",
            symbol: sym.to_string(),
        });
    }
    out
}

/// Sums the self time of entries with the same name (distinct closures of
/// one function print alike) and sorts by self time, largest first.
pub(crate) fn merge_by_symbol(entries: Vec<PerfEntry>) -> Vec<PerfEntry> {
    let mut merged: Vec<PerfEntry> = Vec::new();
    for e in entries {
        match merged.iter_mut().find(|m| m.symbol == e.symbol) {
            Some(m) => m.self_pct += e.self_pct,
            None => merged.push(e),
        }
    }
    merged.sort_by(|a, b| b.self_pct.total_cmp(&a.self_pct));
    merged
}

/// A symbol short enough for a table row: generic arguments elided.
pub(crate) fn short_symbol(sym: &str) -> String {
    let mut s = String::new();
    let mut depth = 0usize;
    for c in sym.chars() {
        match c {
            '<' => {
                if depth == 0 {
                    s.push('<');
                }
                depth += 1;
            }
            '>' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    s.push_str("…>");
                }
            }
            _ if depth == 0 => s.push(c),
            _ => {}
        }
    }
    // A leading `<T as Trait>::f` keeps its shape as `<…>::f`; show the
    // original when eliding lost too much.
    if s.starts_with("<…>") && sym.len() <= 120 {
        return sym.to_string();
    }
    s
}

/// `perf script` → folded stacks → `flamegraph.svg`.
fn flamegraph(data: &Path, out: &Path) -> Result<()> {
    let script = out.join("perf.script");
    let f = fs::File::create(&script)?;
    let status = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(data)
        .stdout(f)
        .stderr(Stdio::null())
        .status()?;
    ensure!(status.success(), "perf script failed ({status})");
    let folded = out.join("stacks.folded");
    let svg = out.join("flamegraph.svg");
    let _ = fs::remove_file(&svg);
    let (collapse, graph) = (
        inferno("inferno-collapse-perf"),
        inferno("inferno-flamegraph"),
    );
    let (collapse, graph) = match (collapse, graph) {
        (Some(c), Some(g)) => (Some(c), Some(g)),
        _ => {
            eprintln!("the inferno binaries are missing: `cargo install inferno --locked`");
            let ok = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                .args(["install", "--locked", "inferno"])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                (
                    inferno("inferno-collapse-perf"),
                    inferno("inferno-flamegraph"),
                )
            } else {
                (None, None)
            }
        }
    };
    match collapse {
        Some(c) => {
            let f = fs::File::create(&folded)?;
            let status = Command::new(c)
                .arg(&script)
                .stdout(f)
                .status()
                .context("running inferno-collapse-perf")?;
            ensure!(status.success(), "inferno-collapse-perf failed ({status})");
        }
        None => {
            let text = fs::read_to_string(&script)?;
            fs::write(&folded, collapse_perf_script(&text))?;
        }
    }
    match graph {
        Some(g) => {
            let f = fs::File::create(&svg)?;
            let status = Command::new(g)
                .arg(&folded)
                .stdout(f)
                .status()
                .context("running inferno-flamegraph")?;
            ensure!(status.success(), "inferno-flamegraph failed ({status})");
            println!("flamegraph: {}", svg.display());
        }
        None => println!(
            "flamegraph: inferno is not installed and could not be (`cargo install inferno`), so \
             no SVG; the folded stacks are in {} (any flamegraph tool reads them)",
            folded.display()
        ),
    }
    let _ = fs::remove_file(&script);
    Ok(())
}

/// An inferno binary on PATH or in cargo's bin folder.
fn inferno(name: &str) -> Option<PathBuf> {
    let on_path = Command::new(name)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if on_path {
        return Some(PathBuf::from(name));
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let p = home.join("bin").join(name);
    p.is_file().then_some(p)
}

/// A minimal `perf script` → folded-stacks collapser (used only without
/// inferno): `comm;outermost;...;innermost count` per distinct stack.
pub(crate) fn collapse_perf_script(text: &str) -> String {
    let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
    let mut comm: Option<String> = None;
    let mut frames: Vec<String> = Vec::new();
    let mut flush = |comm: &mut Option<String>, frames: &mut Vec<String>| {
        if let Some(c) = comm.take() {
            let mut stack = c;
            for f in frames.iter().rev() {
                stack.push(';');
                stack.push_str(f);
            }
            *counts.entry(stack).or_default() += 1;
        }
        frames.clear();
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut comm, &mut frames);
        } else if line.starts_with(|c: char| c.is_whitespace()) {
            // `\t    55d0c1 symbol+0x1f (/path/to/dso)`
            let t = line.trim();
            let after_addr = t.split_once(' ').map_or("", |(_, r)| r);
            let sym = match after_addr.rfind(" (") {
                Some(i) => &after_addr[..i],
                None => after_addr,
            };
            let sym = match sym.rfind("+0x") {
                Some(i) => &sym[..i],
                None => sym,
            };
            frames.push(sym.replace(';', ":"));
        } else {
            flush(&mut comm, &mut frames);
            // The command name is the first field.
            comm = Some(line.split_whitespace().next().unwrap_or("?").to_string());
        }
    }
    flush(&mut comm, &mut frames);
    counts
        .into_iter()
        .map(|(k, v)| format!("{k} {v}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn synth_shapes_parse_and_unknown_ones_fail_first() {
        let cli =
            Cli::try_parse_from(["x", "tg", "--synth", "Llama-3.1-8B", "--type", "q8_0"]).unwrap();
        assert_eq!(cli.args.synth.as_deref(), Some("Llama-3.1-8B"));
        assert_eq!(cli.args.synth_type, SynthType::Q8_0);
        assert!(
            Cli::try_parse_from(["x", "pp", "-m", "a.gguf", "--synth", "Llama-3.2-1B"]).is_err()
        );
        assert!(Cli::try_parse_from(["x", "pp", "--type", "q4_0"]).is_err());
        let cli = Cli::try_parse_from(["x", "pp", "--synth", "llama-65b"]).unwrap();
        let name = cli.args.synth.as_deref().unwrap();
        let err = synth_model(name, cli.args.synth_type)
            .unwrap_err()
            .to_string();
        assert!(err.contains("llama-65b"), "{err}");
    }

    #[test]
    fn depth_is_for_generation_workloads() {
        let cli = Cli::try_parse_from(["x", "tg", "--depth", "8192"]).unwrap();
        assert_eq!(cli.args.depth, 8192);
        assert!(check_depth(Workload::Tg, 8192).is_ok());
        assert!(check_depth(Workload::Pp, 8192).is_ok());
        assert!(check_depth(Workload::EmbedBatch, 0).is_ok());
        let err = check_depth(Workload::EmbedShort, 512)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pp and tg"), "{err}");
    }

    const SELF_REPORT: &str = "\
# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 1K of event 'cpu-clock'
# Event count (approx.): 1585585584
#
# Overhead  Symbol                                              IPC   [IPC Coverage]
# ........  ..................................................  ....................
#
    39.96%  [.] lamina_kernels::x86_64::avx2::k_q8_0_x8          -      -            
     4.55%  [k] finish_task_switch.isra.0                        -      -            
     3.22%  [.] lamina_kernels::matmul::matmul_many::{{closure}}  -      -            
     1.20%  [.] lamina_kernels::matmul::matmul_many::{{closure}}  -      -            
     0.51%  [.] <std::sys::sync::mutex::futex::Mutex>::lock_contended   -      -   


#
# (Tip: Compare performance results with: perf diff [<old file> <new file>])
#
";

    #[test]
    fn self_report_is_parsed_and_merged() {
        let e = parse_perf_report(SELF_REPORT);
        assert_eq!(e.len(), 5);
        assert_eq!(e[0].symbol, "lamina_kernels::x86_64::avx2::k_q8_0_x8");
        assert_eq!(
            (e[0].self_pct, e[0].children_pct, e[0].kernel),
            (39.96, None, false)
        );
        assert!(e[1].kernel);
        assert_eq!(
            e[4].symbol,
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended"
        );
        let m = merge_by_symbol(e);
        assert_eq!(m.len(), 4);
        assert_eq!(m[1].symbol, "finish_task_switch.isra.0");
        assert!((m[2].self_pct - 4.42).abs() < 1e-9);
    }

    #[test]
    fn children_report_is_parsed() {
        let text = "\
# Children      Self  Symbol
# ........  ........  ......
#
    83.94%     0.00%  [.] <std::sys::thread::unix::Thread>::new::thread_start     -      -
    60.31%     2.83%  [.] lamina_kernels::matmul::matmul_many::{{closure}}       -      -
    43.54%    43.39%  [.] lamina_kernels::x86_64::avx2::k_q8_0_x8
     9.84%     0.00%  [.] main_loop (inlined)
";
        let e = parse_perf_report(text);
        assert_eq!(e.len(), 4);
        assert_eq!(e[1].children_pct, Some(60.31));
        assert_eq!(e[1].self_pct, 2.83);
        assert_eq!(e[2].symbol, "lamina_kernels::x86_64::avx2::k_q8_0_x8");
        assert_eq!(e[3].symbol, "main_loop (inlined)");
    }

    #[test]
    fn long_generic_symbols_are_shortened() {
        assert_eq!(
            short_symbol("rayon::iter::plumbing::bridge<rayon::range::Iter<usize>, F<u8>>::helper"),
            "rayon::iter::plumbing::bridge<…>::helper"
        );
        assert_eq!(short_symbol("a::b::c"), "a::b::c");
        assert_eq!(
            short_symbol("<lamina_kernels::pool::Rayon as lamina_kernels::pool::ThreadPool>::run"),
            "<lamina_kernels::pool::Rayon as lamina_kernels::pool::ThreadPool>::run"
        );
    }

    #[test]
    fn alloc_script_is_parsed() {
        let text = "\
lamina 12168 [000]  6596.664741:         lamina_alloc:malloc: (7fd2ea9ef930) size=472
\t           98930 __GI___libc_malloc+0x0 (inlined)
\t          3be403 std::rt::lang_start_internal+0x243 (/work/target/release/lamina)

lamina 12168 [001]  6596.70:         lamina_alloc:calloc: (7fd2ea9ef930) nmemb=4 size=256
\t           98930 __libc_calloc+0x0 (inlined)
\t          100000 alloc::raw_vec::RawVec<lamina_model::Foo>::grow+0x10 (inlined)
\t          100100 lamina_model::embed::Embedder::embed_ids+0x43 (/work/target/release/lamina)
\t          100200 lamina_model::embed::Embedder::embed+0x43 (/work/target/release/lamina)

lamina 12168 [001]  6596.71:         lamina_alloc:realloc: (7fd2ea9ef930) size=64
\t          100100 <lamina_kernels::pool::Rayon as lamina_kernels::pool::ThreadPool>::run+0x1 (/x)
";
        let s = parse_alloc_script(text);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].func, "malloc");
        assert_eq!(s[0].bytes, 472);
        assert_eq!(s[0].site, "(no lamina frame: std or start-up)");
        assert_eq!(s[1].func, "calloc");
        assert_eq!(s[1].bytes, 1024);
        assert_eq!(s[1].site, "lamina_model::embed::Embedder::embed_ids");
        assert_eq!(
            s[2].site,
            "<lamina_kernels::pool::Rayon as lamina_kernels::pool::ThreadPool>::run"
        );
        let m = alloc_by_site(&s);
        assert_eq!(m["lamina_model::embed::Embedder::embed_ids"], (1, 1024));
    }

    #[test]
    fn perf_script_is_collapsed() {
        let text = "\
lamina 1234/1235 100.000: 1001001 cpu-clock: 
\t    55d0c1 lamina_kernels::k_q8_0_x8+0x1f (/work/target/release/lamina)
\t    55d0a0 lamina_kernels::matmul::matmul_many+0x20 (/work/target/release/lamina)
\t    7f0000 start_thread+0x10 (/usr/lib/libc.so.6)

lamina 1234/1235 100.001: 1001001 cpu-clock: 
\t    55d0c1 lamina_kernels::k_q8_0_x8+0x2f (/work/target/release/lamina)
\t    55d0a0 lamina_kernels::matmul::matmul_many+0x20 (/work/target/release/lamina)
\t    7f0000 start_thread+0x10 (/usr/lib/libc.so.6)

lamina 1234/1234 100.002: 1001001 cpu-clock: 
\t    55d0c1 main+0x1 (/work/target/release/lamina)
";
        assert_eq!(
            collapse_perf_script(text),
            "lamina;main 1\nlamina;start_thread;lamina_kernels::matmul::matmul_many;lamina_kernels::k_q8_0_x8 2\n"
        );
    }
}
