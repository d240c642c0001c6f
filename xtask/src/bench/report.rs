//! The report of `cargo xtask bench`: sample statistics, the markdown table,
//! the `--json` file, and the facts of the machine and commits they record.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde_json::{Value, json};

use crate::bench_rules::{self as rules, load_average};
use crate::llama_cpp;
use crate::target_dir;

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
pub(super) enum Better {
    Lower,
    Higher,
}

/// One measured value as the table shows it.
#[derive(Clone, Debug)]
pub(super) struct Cell {
    pub(super) value: f64,
    pub(super) text: String,
}

impl Cell {
    pub(super) fn new(value: f64, text: String) -> Self {
        Cell { value, text }
    }
    pub(super) fn ms(v: f64) -> Self {
        Cell::new(v, format!("{v:.1} ms"))
    }
    /// Mean ± sample standard deviation, as llama-bench reports rates.
    pub(super) fn rate(s: &Stats, unit: &str) -> Self {
        Cell::new(s.mean, format!("{:.1} ± {:.1} {unit}", s.mean, s.stddev))
    }
    pub(super) fn mem(kb_total: u64, kb_file: u64, kb_anon: u64) -> Self {
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

pub(super) struct Row {
    figure: String,
    lamina: std::result::Result<Cell, String>,
    llama: std::result::Result<Cell, String>,
    /// llama.cpp with `OMP_WAIT_POLICY=passive`, where measured.
    llama_passive: Option<std::result::Result<Cell, String>>,
    better: Better,
}

pub(super) struct Report {
    threads: usize,
    pub(super) rows: Vec<Row>,
    /// Every sample and setting, for `--json`.
    pub(super) detail: serde_json::Map<String, Value>,
    pub(super) isa: Option<String>,
    pub(super) llama_commit: Option<String>,
    pub(super) models: Vec<String>,
    pub(super) load_before: Option<f64>,
    /// The load average sampled during the run.
    pub(super) load_during: Vec<f64>,
}

impl Report {
    pub(super) fn new(threads: usize) -> Self {
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

    pub(super) fn row(
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
    pub(super) fn row2(
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

    pub(super) fn markdown(&self) -> String {
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

    pub(super) fn write_json(&self) -> Result<PathBuf> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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
