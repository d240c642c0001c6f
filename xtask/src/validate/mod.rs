//! `cargo xtask validate [--live]`: every fidelity check, one table.
//!
//! Each check is a function in [`CHECKS`] returning table rows (check, model
//! file, figure, threshold, PASS/FAIL/SKIP); an error from a check is a FAIL
//! row. The command exits non-zero when any row fails. A check whose model
//! file is absent, or is not the file its gold was made from, is a skip
//! row saying why; with `--require-models` (or `LAMINA_REQUIRE_MODELS=1`,
//! as `cargo xtask test` runs it) any skip fails the command.
//!
//! Checks today:
//! * `tokenizer` — `lamina tokenize --json` against the `llama-tokenize`
//!   gold in `testdata/tokenizer/` (every string × BOS/special setting).
//! * `embedding` — `lamina embed --json` against the gold vectors in
//!   `testdata/embed/` (llama.cpp per model file, PyTorch F32) when they
//!   exist; with `--live`, also against `llama-embedding` run now, and the
//!   live llama.cpp vectors against the gold ones (what changed upstream:
//!   exact on F32, within llama.cpp's own spread on a quantized file).
//! * `minilm` — all-MiniLM-L6-v2 F32 and Q8_0 against the gold in
//!   `testdata/embed/minilm/` (sentence-transformers, llama.cpp); with
//!   `--live`, against `llama-embedding` run now too ([`minilm`]).
//! * `generation`, `logits` — greedy continuations and teacher-forced
//!   top-5 logits against the llama.cpp gold in `testdata/generate/`
//!   ([`generate`]); `--live` rebuilds the gold tool and reruns llama.cpp.
//! * `quantizer` — `lamina quantize` output against llama-quantize's SHA-256s
//!   in `testdata/quantize/` ([`quantize`]); `--live` reruns llama-quantize.
//!
//! To add a check: write `fn name(ctx: &Ctx) -> Result<Vec<Row>>` and list it
//! in [`CHECKS`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

mod embedding;
mod generate;
mod minilm;
mod quantize;
#[path = "../../../testdata/embed/thresholds.rs"]
mod thresholds;

use embedding::embedding;
use generate::{generation, logits};
use minilm::minilm;
use quantize::quantizer;

use crate::bench::report::markdown_table;
use crate::{lamina_bin, models, workspace_root};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Also run llama.cpp now and compare against it (and against the gold).
    #[arg(long)]
    live: bool,
    /// Run only these checks (tokenizer, embedding, minilm, generation, logits, quantizer).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// A quick subset: the checks in [`FAST`], a minute or two.
    #[arg(long, conflicts_with = "only")]
    fast: bool,
    /// Fail when a check is skipped because a model is missing or is not the
    /// file its gold was made from. `cargo xtask test` sets it, as does
    /// `LAMINA_REQUIRE_MODELS=1`.
    #[arg(long)]
    require_models: bool,
}

/// The checks `--fast` runs: they exercise the CLI end to end (tokenizers,
/// greedy generation on the F32 files) where the tests call the library.
pub(crate) const FAST: [&str; 2] = ["tokenizer", "generation"];

impl Args {
    /// What `cargo xtask test` (and so CI) runs: every check against the
    /// gold, and a skip is a failure.
    pub(crate) fn ci() -> Args {
        Args {
            live: false,
            only: Vec::new(),
            fast: false,
            require_models: true,
        }
    }
}

/// Whether a run with these skip rows fails: under `--require-models` any
/// skip does, since it passed without checking.
fn skips_fail(require_models: bool, skipped: usize) -> bool {
    require_models && skipped > 0
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Pass,
    Fail,
    Skip,
    /// A figure reported without a threshold (judged by another check).
    Info,
}

#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub check: String,
    pub model: String,
    pub figure: String,
    pub threshold: String,
    pub status: Status,
}

impl Row {
    fn skip(check: &str, model: &str, why: impl Into<String>) -> Row {
        Row {
            check: check.into(),
            model: model.into(),
            figure: why.into(),
            threshold: "—".into(),
            status: Status::Skip,
        }
    }
}

/// What every check may use.
pub(crate) struct Ctx {
    lamina: PathBuf,
    models: PathBuf,
    root: PathBuf,
    live: bool,
    /// `--fast`: checks may leave out rows that are reported, not judged.
    fast: bool,
}

type CheckFn = fn(&Ctx) -> Result<Vec<Row>>;

/// Every check, in table order.
const CHECKS: &[(&str, CheckFn)] = &[
    ("tokenizer", tokenizer),
    ("embedding", embedding),
    ("minilm", minilm),
    ("generation", generation),
    ("logits", logits),
    ("quantizer", quantizer),
];

pub(crate) fn run_cmd(mut args: Args) -> Result<()> {
    if args.fast {
        args.only = FAST.map(String::from).to_vec();
    }
    for name in &args.only {
        ensure!(
            CHECKS.iter().any(|(n, _)| n == name),
            "unknown check {name:?}; the checks are {}",
            CHECKS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let ctx = Ctx {
        lamina: lamina_bin()?,
        models: models::default_dir()?,
        root: workspace_root(),
        live: args.live,
        fast: args.fast,
    };
    let mut rows = Vec::new();
    for (name, check) in CHECKS {
        if !args.only.is_empty() && !args.only.iter().any(|o| o == name) {
            continue;
        }
        eprintln!("validate: {name}");
        match check(&ctx) {
            Ok(r) => rows.extend(r),
            Err(e) => rows.push(Row {
                check: (*name).into(),
                model: "—".into(),
                figure: format!("error: {e:#}"),
                threshold: "—".into(),
                status: Status::Fail,
            }),
        }
    }
    println!("{}", render(&rows));
    let count = |s| rows.iter().filter(|r| r.status == s).count();
    let (pass, fail, skip) = (
        count(Status::Pass),
        count(Status::Fail),
        count(Status::Skip),
    );
    println!("validate: {pass} passed, {fail} failed, {skip} skipped");
    if fail > 0 {
        bail!("{fail} validation check(s) failed");
    }
    let require = args.require_models || crate::require_models::models_required();
    if skips_fail(require, skip) {
        let why: Vec<String> = rows
            .iter()
            .filter(|r| r.status == Status::Skip)
            .map(|r| format!("  {} ({}): {}", r.check, r.model, r.figure))
            .collect();
        bail!(
            "{skip} validation check(s) skipped, which --require-models (or {}) makes a failure; \
             `cargo xtask models` makes the models:\n{}",
            crate::require_models::REQUIRE_MODELS,
            why.join("\n")
        );
    }
    Ok(())
}

pub(crate) fn render(rows: &[Row]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.check.clone(),
                r.model.clone(),
                r.figure.clone(),
                r.threshold.clone(),
                match r.status {
                    Status::Pass => "PASS",
                    Status::Fail => "FAIL",
                    Status::Skip => "skip",
                    Status::Info => "info",
                }
                .into(),
            ]
        })
        .collect();
    markdown_table(
        &["check", "model file", "figure", "threshold", "result"],
        &body,
    )
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

// ---------------------------------------------------------------------------
// Tokenizer.

/// The `lamina tokenize` flags for a gold setting ("bos+special", ...).
pub(crate) fn tokenize_flags(setting: &str) -> Result<Vec<&'static str>> {
    let (bos, special) = setting
        .split_once('+')
        .with_context(|| format!("unknown tokenizer setting {setting:?}"))?;
    let mut flags = Vec::new();
    match bos {
        "bos" => {}
        "nobos" => flags.push("--no-bos"),
        _ => bail!("unknown tokenizer setting {setting:?}"),
    }
    match special {
        "special" => {}
        "nospecial" => flags.push("--no-parse-special"),
        _ => bail!("unknown tokenizer setting {setting:?}"),
    }
    Ok(flags)
}

/// One comparison: model, text, settings, expected ids.
struct TokCase {
    text: String,
    setting: String,
    want: Vec<u64>,
}

fn tokenizer(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.root.join("testdata/tokenizer");
    let mut golds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("gold-") && n.ends_with(".json"))
        })
        .collect();
    golds.sort();
    let mut rows = Vec::new();
    for gold_path in golds {
        let gold = read_json(&gold_path)?;
        let model_name = gold["model"].as_str().context("gold file: model")?;
        let model = ctx.models.join(model_name);
        if !model.is_file() {
            rows.push(Row::skip(
                "tokenizer ids",
                model_name,
                format!("{} is missing (cargo xtask models)", model.display()),
            ));
            continue;
        }
        let mut cases = Vec::new();
        for case in gold["cases"].as_array().context("gold file: cases")? {
            let text = case["text"].as_str().context("case text")?;
            for (setting, ids) in case["ids"].as_object().context("case ids")? {
                cases.push(TokCase {
                    text: text.to_string(),
                    setting: setting.clone(),
                    want: ids
                        .as_array()
                        .context("ids")?
                        .iter()
                        .filter_map(Value::as_u64)
                        .collect(),
                });
            }
        }
        let mismatches = tokenize_all(ctx, &model, &cases)?;
        let n = cases.len();
        let same = n - mismatches.len();
        for m in mismatches.iter().take(5) {
            eprintln!("  {model_name}: {m}");
        }
        rows.push(Row {
            check: "tokenizer ids vs llama-tokenize gold".into(),
            model: model_name.into(),
            figure: format!("{same}/{n} strings×settings identical"),
            threshold: "all identical".into(),
            status: if mismatches.is_empty() {
                Status::Pass
            } else {
                Status::Fail
            },
        });
    }
    if rows.is_empty() {
        rows.push(Row::skip(
            "tokenizer ids",
            "—",
            "no testdata/tokenizer/gold-*.json",
        ));
    }
    Ok(rows)
}

/// Runs `lamina tokenize` on every case (as many processes at once as there
/// are cores) and describes each mismatch.
fn tokenize_all(ctx: &Ctx, model: &Path, cases: &[TokCase]) -> Result<Vec<String>> {
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let tmp = crate::target_dir().join("validate");
    std::fs::create_dir_all(&tmp)?;
    let chunk = cases.len().div_ceil(jobs).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .chunks(chunk)
            .enumerate()
            .map(|(j, part)| {
                let tmp = tmp.join(format!("tokenize-{j}.txt"));
                s.spawn(move || -> Result<Vec<String>> {
                    let mut bad = Vec::new();
                    for c in part {
                        // The text goes through a file, byte for byte, as the gold's did.
                        std::fs::write(&tmp, &c.text)?;
                        let out = Command::new(&ctx.lamina)
                            .args(["tokenize", "--json", "-m"])
                            .arg(model)
                            .arg("--file")
                            .arg(&tmp)
                            .args(tokenize_flags(&c.setting)?)
                            .stdin(Stdio::null())
                            .output()?;
                        ensure!(
                            out.status.success(),
                            "lamina tokenize failed on {:?}: {}",
                            c.text,
                            String::from_utf8_lossy(&out.stderr).trim()
                        );
                        let v: Value = serde_json::from_slice(&out.stdout)
                            .context("parsing lamina tokenize --json")?;
                        let got: Vec<u64> = v["ids"]
                            .as_array()
                            .context("ids")?
                            .iter()
                            .filter_map(Value::as_u64)
                            .collect();
                        if got != c.want {
                            bad.push(format!(
                                "{} {:?}: llama.cpp {:?}, lamina {:?}",
                                c.setting, c.text, c.want, got
                            ));
                        }
                    }
                    Ok(bad)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(
                h.join()
                    .map_err(|_| anyhow::anyhow!("a tokenize worker panicked"))??,
            );
        }
        Ok(all)
    })
}

#[cfg(test)]
mod tests {
    use super::embedding::*;
    use super::*;

    #[test]
    fn tokenizer_settings_map_to_flags() {
        assert!(tokenize_flags("bos+special").unwrap().is_empty());
        assert_eq!(
            tokenize_flags("nobos+nospecial").unwrap(),
            vec!["--no-bos", "--no-parse-special"]
        );
        assert_eq!(
            tokenize_flags("bos+nospecial").unwrap(),
            vec!["--no-parse-special"]
        );
        assert!(tokenize_flags("eos+special").is_err());
        assert!(tokenize_flags("bos").is_err());
    }

    #[test]
    fn tokenizer_gold_settings_are_known() {
        // Every setting in the committed gold maps to flags.
        let dir = workspace_root().join("testdata/tokenizer");
        let gold = read_json(&dir.join("gold-gemma3.json")).unwrap();
        for case in gold["cases"].as_array().unwrap() {
            for setting in case["ids"].as_object().unwrap().keys() {
                tokenize_flags(setting).unwrap();
            }
        }
    }

    #[test]
    fn cosines() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 0.0]) - 1.0).abs() < 1e-12);
        assert!(cosine(&[1.0, 0.0], &[0.0, 2.0]).abs() < 1e-12);
        assert!((cosine(&[1.0, 1.0], &[-1.0, -1.0]) + 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }

    #[test]
    fn f32_rows_are_read() {
        let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            read_f32_rows(&bytes, 2).unwrap(),
            vec![vec![1.0, 2.0], vec![3.0, 4.0]]
        );
        assert!(read_f32_rows(&bytes, 3).is_err());
    }

    #[test]
    fn llama_embedding_array_is_parsed() {
        let out = "[[0.1,-0.2,0.3],[1e-3,0,1]]\n\n";
        let v = parse_llama_array(out).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], vec![0.1, -0.2, 0.3]);
        assert!(parse_llama_array("nothing").is_err());
    }

    #[test]
    fn embed_texts_are_parsed() {
        let v: Value = serde_json::from_str(
            r#"[{"id": "fox", "task": null, "prefix": "", "text": "The fox."},
                {"id": "q", "task": "query", "prefix": "task: search result | query: ", "text": "Mars?"}]"#,
        )
        .unwrap();
        let t = parse_embed_texts(&v).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].prefix, "task: search result | query: ");
        assert!(parse_embed_texts(&serde_json::json!({"id": 1})).is_err());
    }

    #[test]
    fn absent_embed_gold_is_none() {
        let dir = std::env::temp_dir().join("lamina-xtask-no-gold");
        let _ = std::fs::create_dir_all(&dir);
        assert!(load_embed_gold(&dir).unwrap().is_none());
    }

    #[test]
    fn skips_fail_only_when_models_are_required() {
        assert!(skips_fail(true, 1));
        assert!(!skips_fail(true, 0));
        assert!(!skips_fail(false, 3));
        assert!(Args::ci().require_models && !Args::ci().fast && Args::ci().only.is_empty());
    }

    #[test]
    fn thresholds_and_table() {
        let spreads = [vec![0.999, 0.9995], vec![0.998, 0.9999]];
        let f = thresholds::vs_llama("Q6_K", &spreads).unwrap();
        assert!((f.min - (0.998 - thresholds::MIN_SLACK)).abs() < 1e-12);
        assert!((f.mean - (0.99895 - thresholds::MEAN_SLACK)).abs() < 1e-12);
        assert!(thresholds::vs_llama("Q6_K", &[]).is_err());
        assert_eq!(
            thresholds::vs_llama("F32", &[]).unwrap().min,
            thresholds::F32_VS_LLAMA
        );
        let q = floor_row("c", "m", &[0.9972, 0.9999, 0.9999], &f);
        assert_eq!(q.status, Status::Pass, "{q:?}");
        assert_eq!(
            floor_row("c", "m", &[0.9960, 0.9999], &f).status,
            Status::Fail
        );
        assert_eq!(
            floor_row("c", "m", &[0.9975, 0.9975], &f).status,
            Status::Fail
        );
        let r = cos_row("c", "m.gguf", &[0.9999, 0.99995], 0.999);
        assert_eq!(r.status, Status::Pass);
        assert_eq!(cos_row("c", "m", &[0.99], 0.999).status, Status::Fail);
        assert_eq!(cos_row("c", "m", &[], 0.999).status, Status::Fail);
        let t = render(&[r]);
        assert!(t.contains(
            "| c | m.gguf | min 0.9999000, mean 0.9999250 (2 texts) | every text ≥ 0.999 | PASS |"
        ));
    }

    /// llama.cpp rebuilt moves a quantized file's vectors as far as its
    /// own spread, so live-vs-gold is judged by that spread there and
    /// exactly only on F32.
    #[test]
    fn live_drift_is_judged_by_llama_cpp_s_own_spread() {
        let spreads = [vec![0.9971509, 0.998], vec![0.9959232, 0.999]];
        let drift = [0.9960, 0.9990];
        let q6 = drift_row("m", &drift, thresholds::live_vs_gold("Q6_K", &spreads));
        assert_eq!(q6.status, Status::Pass, "{q6:?}");
        let f32 = drift_row("m", &drift, thresholds::live_vs_gold("F32", &[]));
        assert_eq!(f32.status, Status::Fail, "{f32:?}");
        assert!(f32.threshold.contains("0.99999"), "{f32:?}");
        let none = drift_row("m", &drift, thresholds::live_vs_gold("Q8_0", &[]));
        assert_eq!(none.status, Status::Info, "{none:?}");
    }
}
