//! `cargo xtask validate [--live]`: every fidelity check, one table.
//!
//! Each check is a function in [`CHECKS`] returning table rows (check, model
//! file, figure, threshold, PASS/FAIL/SKIP); an error from a check is a FAIL
//! row. The command exits non-zero when any row fails. A check whose model
//! file or gold data is absent is skipped, saying why (the test suite, not
//! this command, insists on the models being there).
//!
//! Checks today:
//! * `tokenizer` — `lamina tokenize --json` against the `llama-tokenize`
//!   gold in `testdata/tokenizer/` (every string × BOS/special setting).
//! * `embedding` — `lamina embed --json` against the gold vectors in
//!   `testdata/embed/` (llama.cpp per model file, PyTorch F32) when they
//!   exist; with `--live`, also against `llama-embedding` run now, and the
//!   live llama.cpp vectors against the gold ones (what changed upstream).
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

mod generate;
mod quantize;

use generate::{generation, logits};
use quantize::quantizer;

use crate::bench::{LONG_TEXT, SHORT_TEXT, markdown_table};
use crate::llama_cpp::{self, llama_cpp_bin};
use crate::{lamina_bin, models, workspace_root};

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Also run llama.cpp now and compare against it (and against the gold).
    #[arg(long)]
    live: bool,
    /// Run only these checks (tokenizer, embedding, generation, logits, quantizer).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The fast subset `cargo xtask test` (and so CI) runs: the checks in
    /// [`FAST`], a minute or two; the test suite covers the rest.
    #[arg(long, conflicts_with = "only")]
    fast: bool,
}

/// The checks `--fast` runs: they exercise the CLI end to end (tokenizers,
/// greedy generation on the F32 files) where the tests call the library.
pub(crate) const FAST: [&str; 2] = ["tokenizer", "generation"];

impl Args {
    /// `validate --fast`.
    pub(crate) fn fast() -> Args {
        Args {
            live: false,
            only: Vec::new(),
            fast: true,
        }
    }
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

// ---------------------------------------------------------------------------
// Embeddings.

/// Minimum cosine to llama.cpp's vectors from the same file, per file type
/// (the thresholds of `crates/model/tests/embed_fidelity.rs`).
pub(crate) fn embed_threshold_vs_llama(quant: &str) -> f64 {
    match quant {
        "F32" => 0.99999,
        "Q8_0" | "Q6_K" => 0.999,
        "Q4_K_M" => 0.995,
        _ => 0.99,
    }
}
/// Minimum cosine of lamina's F32 file to the PyTorch F32 reference.
const EMBED_VS_PYTORCH_F32: f64 = 0.99999;
/// Minimum cosine between live llama.cpp vectors and the gold ones.
const LIVE_VS_GOLD: f64 = 0.99999;

/// An embedding input: `prefix + text` is what the model sees.
#[derive(Clone, Debug)]
pub(crate) struct EmbedText {
    pub id: String,
    pub prefix: String,
    pub text: String,
}

pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// `n × dim` little-endian f32 vectors.
pub(crate) fn read_f32_rows(bytes: &[u8], dim: usize) -> Result<Vec<Vec<f32>>> {
    ensure!(
        dim > 0 && bytes.len().is_multiple_of(dim * 4),
        "{} bytes is not a whole number of {dim}-float rows",
        bytes.len()
    );
    Ok(bytes
        .chunks_exact(dim * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
        .collect())
}

/// The gold of `testdata/embed/` (made by its `make_gold.py`): `texts.json`
/// (id, prefix, text), `gold.json` (`ids`, `dim`, `sources`) and one
/// `<source>.f32` per source. `None` when the files are absent.
pub(crate) struct EmbedGold {
    pub texts: Vec<EmbedText>,
    /// `(source name, vectors)`, e.g. `("llamacpp-Q8_0", ...)`, `("pytorch-F32", ...)`.
    pub sources: Vec<(String, Vec<Vec<f32>>)>,
}

pub(crate) fn parse_embed_texts(v: &Value) -> Result<Vec<EmbedText>> {
    v.as_array()
        .context("texts.json is not an array")?
        .iter()
        .map(|t| {
            Ok(EmbedText {
                id: t["id"].as_str().context("text id")?.to_string(),
                prefix: t["prefix"].as_str().unwrap_or("").to_string(),
                text: t["text"].as_str().context("text")?.to_string(),
            })
        })
        .collect()
}

fn load_embed_gold(dir: &Path) -> Result<Option<EmbedGold>> {
    let (texts_path, gold_path) = (dir.join("texts.json"), dir.join("gold.json"));
    if !texts_path.is_file() || !gold_path.is_file() {
        return Ok(None);
    }
    let texts = parse_embed_texts(&read_json(&texts_path)?)?;
    let gold = read_json(&gold_path)?;
    let ids: Vec<&str> = gold["ids"]
        .as_array()
        .context("gold.json: ids")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let text_ids: Vec<&str> = texts.iter().map(|t| t.id.as_str()).collect();
    ensure!(
        ids == text_ids,
        "testdata/embed/gold.json is stale (its ids differ from texts.json): rerun make_gold.py"
    );
    let dim = gold["dim"].as_u64().unwrap_or(768) as usize;
    let mut sources = Vec::new();
    if let Some(obj) = gold["sources"].as_object() {
        for name in obj.keys() {
            let f = dir.join(format!("{name}.f32"));
            if !f.is_file() {
                continue;
            }
            let rows = read_f32_rows(&std::fs::read(&f)?, dim)?;
            ensure!(
                rows.len() == texts.len(),
                "{} holds {} vectors for {} texts",
                f.display(),
                rows.len(),
                texts.len()
            );
            sources.push((name.clone(), rows));
        }
    }
    Ok(Some(EmbedGold { texts, sources }))
}

/// lamina's vectors for `texts` (one `lamina embed` call per distinct prefix).
fn lamina_embed(ctx: &Ctx, model: &Path, texts: &[EmbedText]) -> Result<Vec<Vec<f32>>> {
    let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
    let mut prefixes: Vec<&str> = texts.iter().map(|t| t.prefix.as_str()).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    for prefix in prefixes {
        let idx: Vec<usize> = (0..texts.len())
            .filter(|&i| texts[i].prefix == prefix)
            .collect();
        let mut cmd = Command::new(&ctx.lamina);
        cmd.args(["embed", "--json", "-m"]).arg(model);
        if !prefix.is_empty() {
            cmd.args(["--task", prefix]);
        }
        cmd.arg("--");
        cmd.args(idx.iter().map(|&i| texts[i].text.as_str()));
        let o = cmd.stdin(Stdio::null()).output()?;
        ensure!(
            o.status.success(),
            "lamina embed failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(serde_json::from_str)
            .collect::<std::result::Result<_, _>>()?;
        ensure!(
            lines.len() == idx.len(),
            "lamina embed returned {} vectors for {} texts",
            lines.len(),
            idx.len()
        );
        for (line, &i) in lines.iter().zip(&idx) {
            let v: Vec<f32> = line["embedding"]
                .as_array()
                .context("embedding")?
                .iter()
                .filter_map(|x| x.as_f64().map(|x| x as f32))
                .collect();
            out[i] = Some(v);
        }
    }
    Ok(out.into_iter().map(Option::unwrap_or_default).collect())
}

/// A separator that never occurs in a text, so texts with newlines stay whole
/// (the one `testdata/embed/make_gold.py` uses).
const LLAMA_SEP: &str = "<#lamina-no-split#>";

/// llama.cpp's vector for one text, as `testdata/embed/make_gold.py` makes it.
fn llama_embed(model: &Path, text: &str) -> Result<Vec<f32>> {
    let o = Command::new(llama_cpp_bin("llama-embedding")?)
        .arg("-m")
        .arg(model)
        .args(["--pooling", "mean", "--embd-normalize", "2"])
        .args([
            "--embd-output-format",
            "array",
            "--embd-separator",
            LLAMA_SEP,
        ])
        .args(["--no-escape", "-fa", "on", "-p", text])
        // Sleeping instead of spinning OpenMP threads: the same numbers,
        // and no collapse when other processes share the cores.
        .env("OMP_WAIT_POLICY", "passive")
        .stdin(Stdio::null())
        .output()?;
    ensure!(
        o.status.success(),
        "llama-embedding failed: {}",
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    let mut rows = parse_llama_array(&String::from_utf8_lossy(&o.stdout))?;
    ensure!(
        rows.len() == 1,
        "llama-embedding printed {} vectors",
        rows.len()
    );
    Ok(rows.remove(0))
}

/// `llama-embedding --embd-output-format array` stdout: `[[...],[...]]`.
pub(crate) fn parse_llama_array(stdout: &str) -> Result<Vec<Vec<f32>>> {
    let start = stdout
        .find("[[")
        .context("no [[...]] array in llama-embedding output")?;
    let end = stdout.rfind("]]").context("unterminated array")? + 2;
    let v: Vec<Vec<f64>> = serde_json::from_str(&stdout[start..end])?;
    Ok(v.into_iter()
        .map(|r| r.into_iter().map(|x| x as f32).collect())
        .collect())
}

fn min_mean(xs: &[f64]) -> (f64, f64) {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    (min, xs.iter().sum::<f64>() / xs.len().max(1) as f64)
}

fn cos_row(check: &str, model: &str, cos: &[f64], threshold: f64) -> Row {
    let (min, mean) = min_mean(cos);
    Row {
        check: check.into(),
        model: model.into(),
        figure: format!("min {min:.7}, mean {mean:.7} ({} texts)", cos.len()),
        threshold: format!("≥ {threshold}"),
        status: if !cos.is_empty() && min >= threshold {
            Status::Pass
        } else {
            Status::Fail
        },
    }
}

/// Texts for `--live` when there is no gold.
fn builtin_texts() -> Vec<EmbedText> {
    let t = |id: &str, prefix: &str, text: &str| EmbedText {
        id: id.into(),
        prefix: prefix.into(),
        text: text.into(),
    };
    vec![
        t("short", "", SHORT_TEXT),
        t("long", "", LONG_TEXT),
        t(
            "query",
            "task: search result | query: ",
            "Which planet is known as the Red Planet?",
        ),
        t("unicode", "", "机器学习是人工智能的一个分支。"),
    ]
}

fn embedding(ctx: &Ctx) -> Result<Vec<Row>> {
    let gold = load_embed_gold(&ctx.root.join("testdata/embed"))?;
    let mut rows = Vec::new();
    let file = |q: &str| format!("embeddinggemma-300m-{q}.gguf");
    let quants = ["F32", "Q8_0", "Q6_K", "Q4_K_M"];
    let texts = match &gold {
        Some(g) => g.texts.clone(),
        None => {
            rows.push(Row::skip(
                "embedding cosine vs gold",
                "—",
                "testdata/embed/{texts,gold}.json absent",
            ));
            builtin_texts()
        }
    };
    let llama_commit = if ctx.live {
        Some(llama_cpp::reported_commit(&llama_cpp::bin_dir()?).unwrap_or_else(|| "?".into()))
    } else {
        None
    };
    for q in quants {
        let name = file(q);
        let model = ctx.models.join(&name);
        let gold_llama = gold.as_ref().and_then(|g| {
            g.sources
                .iter()
                .find(|(s, _)| *s == format!("llamacpp-{q}"))
                .map(|(_, v)| v)
        });
        let gold_torch = gold.as_ref().and_then(|g| {
            g.sources
                .iter()
                .find(|(s, _)| s == "pytorch-F32")
                .map(|(_, v)| v)
        });
        let wanted = gold_llama.is_some() || (q == "F32" && gold_torch.is_some()) || ctx.live;
        if !wanted {
            continue;
        }
        if !model.is_file() {
            rows.push(Row::skip(
                "embedding cosine",
                &name,
                format!("{} is missing", model.display()),
            ));
            continue;
        }
        let ours = lamina_embed(ctx, &model, &texts)?;
        let cos = |theirs: &[Vec<f32>]| -> Vec<f64> {
            ours.iter().zip(theirs).map(|(a, b)| cosine(a, b)).collect()
        };
        if let Some(g) = gold_llama {
            rows.push(cos_row(
                "embedding cosine vs llama.cpp gold",
                &name,
                &cos(g),
                embed_threshold_vs_llama(q),
            ));
            // llama.cpp against its own gold, where the gold holds its other
            // runs of the file: how far the reference itself moves.
            for (suffix, what) in [
                ("fa-off", "llama.cpp FA off vs its FA on gold"),
                ("avx512", "llama.cpp AVX-512 build vs its AVX2-built gold"),
            ] {
                let source = format!("llamacpp-{q}-{suffix}");
                if let Some((_, other)) = gold
                    .as_ref()
                    .and_then(|gd| gd.sources.iter().find(|(s, _)| *s == source))
                {
                    let spread: Vec<f64> = other.iter().zip(g).map(|(a, b)| cosine(a, b)).collect();
                    let (min, mean) = min_mean(&spread);
                    rows.push(Row {
                        check: format!("{what} (the reference's spread)"),
                        model: name.clone(),
                        figure: format!("min {min:.7}, mean {mean:.7} ({} texts)", spread.len()),
                        threshold: "—".into(),
                        status: Status::Info,
                    });
                }
            }
        }
        if q == "F32"
            && let Some(g) = gold_torch
        {
            rows.push(cos_row(
                "embedding cosine vs PyTorch gold",
                &name,
                &cos(g),
                EMBED_VS_PYTORCH_F32,
            ));
        }
        if ctx.live {
            let live: Vec<Vec<f32>> = texts
                .iter()
                .map(|t| llama_embed(&model, &format!("{}{}", t.prefix, t.text)))
                .collect::<Result<_>>()?;
            rows.push(cos_row(
                &format!(
                    "embedding cosine vs llama.cpp {} (live)",
                    llama_commit.as_deref().unwrap_or("?")
                ),
                &name,
                &cos(&live),
                embed_threshold_vs_llama(q),
            ));
            if let Some(g) = gold_llama {
                let drift: Vec<f64> = live.iter().zip(g).map(|(a, b)| cosine(a, b)).collect();
                rows.push(cos_row(
                    "llama.cpp live vs its gold (drift)",
                    &name,
                    &drift,
                    LIVE_VS_GOLD,
                ));
            }
        }
    }
    if !ctx.live && gold.is_none() {
        rows.push(Row::skip(
            "embedding cosine vs llama.cpp (live)",
            "—",
            "pass --live",
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
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
    fn thresholds_and_table() {
        assert_eq!(embed_threshold_vs_llama("F32"), 0.99999);
        assert!(embed_threshold_vs_llama("Q4_K_M") < embed_threshold_vs_llama("Q8_0"));
        let r = cos_row("c", "m.gguf", &[0.9999, 0.99995], 0.999);
        assert_eq!(r.status, Status::Pass);
        assert_eq!(cos_row("c", "m", &[0.99], 0.999).status, Status::Fail);
        assert_eq!(cos_row("c", "m", &[], 0.999).status, Status::Fail);
        let t = render(&[r]);
        assert!(
            t.contains("| c | m.gguf | min 0.9999000, mean 0.9999250 (2 texts) | ≥ 0.999 | PASS |")
        );
    }
}
