//! The `embedding` check: `lamina embed` against the gold vectors of
//! `testdata/embed/` (llama.cpp per model file, PyTorch F32), judged by the
//! thresholds of `testdata/embed/thresholds.rs`; with `--live`, also against
//! `llama-embedding` run now.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::thresholds::{self, min_mean};
use super::{Ctx, Row, Status, read_json};
use crate::bench::{LONG_TEXT, SHORT_TEXT};
use crate::llama_cpp::{self, llama_cpp_bin};

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

pub(super) fn load_embed_gold(dir: &Path) -> Result<Option<EmbedGold>> {
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
pub(super) fn lamina_embed(ctx: &Ctx, model: &Path, texts: &[EmbedText]) -> Result<Vec<Vec<f32>>> {
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
pub(super) fn llama_embed(model: &Path, text: &str) -> Result<Vec<f32>> {
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

/// A row judging per-text cosines against a floor of
/// `testdata/embed/thresholds.rs`.
pub(super) fn floor_row(check: &str, model: &str, cos: &[f64], floor: &thresholds::Floor) -> Row {
    let (min, mean) = min_mean(cos);
    Row {
        check: check.into(),
        model: model.into(),
        figure: format!("min {min:.7}, mean {mean:.7} ({} texts)", cos.len()),
        threshold: floor.describe(),
        status: if floor.shortfalls(check, cos, &[]).is_empty() {
            Status::Pass
        } else {
            Status::Fail
        },
    }
}

/// llama.cpp run now against its gold run: judged by `floor` (llama.cpp's
/// own spread on a quantized file), reported alone when there is none.
pub(super) fn drift_row(
    model: &str,
    drift: &[f64],
    floor: Result<thresholds::Floor, String>,
) -> Row {
    let check = "llama.cpp live vs its gold (drift)";
    match floor {
        Ok(floor) => floor_row(check, model, drift, &floor),
        Err(e) => {
            let (min, mean) = min_mean(drift);
            Row {
                check: check.into(),
                model: model.into(),
                figure: format!("min {min:.7}, mean {mean:.7}; {e}"),
                threshold: "—".into(),
                status: Status::Info,
            }
        }
    }
}

/// A row judging per-text cosines against one bound for every text.
pub(super) fn cos_row(check: &str, model: &str, cos: &[f64], threshold: f64) -> Row {
    let floor = thresholds::Floor {
        min: threshold,
        mean: threshold,
    };
    floor_row(check, model, cos, &floor)
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

pub(super) fn embedding(ctx: &Ctx) -> Result<Vec<Row>> {
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
        // llama.cpp's other runs of the file against its gold run: how far
        // the reference itself moves, which sets a quantized file's floor.
        let mut spreads = Vec::new();
        if let Some(g) = gold_llama {
            for (suffix, what) in thresholds::SPREAD_RUNS {
                let source = format!("llamacpp-{q}-{suffix}");
                if let Some((_, other)) = gold
                    .as_ref()
                    .and_then(|gd| gd.sources.iter().find(|(s, _)| *s == source))
                {
                    let spread: Vec<f64> = other.iter().zip(g).map(|(a, b)| cosine(a, b)).collect();
                    let (min, mean) = min_mean(&spread);
                    rows.push(Row {
                        check: format!("{what} vs its gold (the reference's spread)"),
                        model: name.clone(),
                        figure: format!("min {min:.7}, mean {mean:.7} ({} texts)", spread.len()),
                        threshold: "—".into(),
                        status: Status::Info,
                    });
                    spreads.push(spread);
                }
            }
        }
        let floor_llama = thresholds::vs_llama(q, &spreads);
        if let Some(g) = gold_llama {
            match &floor_llama {
                Ok(floor) => rows.push(floor_row(
                    "embedding cosine vs llama.cpp gold",
                    &name,
                    &cos(g),
                    floor,
                )),
                Err(e) => rows.push(Row {
                    check: "embedding cosine vs llama.cpp gold".into(),
                    model: name.clone(),
                    figure: e.clone(),
                    threshold: "—".into(),
                    status: Status::Fail,
                }),
            }
            if let Some(t) = gold_torch {
                let llama_vs_torch: Vec<f64> = g.iter().zip(t).map(|(a, b)| cosine(a, b)).collect();
                rows.push(floor_row(
                    "embedding cosine vs PyTorch gold",
                    &name,
                    &cos(t),
                    &thresholds::vs_pytorch(q, &llama_vs_torch),
                ));
            }
        } else if q == "F32"
            && let Some(t) = gold_torch
        {
            rows.push(floor_row(
                "embedding cosine vs PyTorch gold",
                &name,
                &cos(t),
                &thresholds::vs_pytorch(q, &[]),
            ));
        }
        if ctx.live {
            let live: Vec<Vec<f32>> = texts
                .iter()
                .map(|t| llama_embed(&model, &format!("{}{}", t.prefix, t.text)))
                .collect::<Result<_>>()?;
            let check = format!(
                "embedding cosine vs llama.cpp {} (live)",
                llama_commit.as_deref().unwrap_or("?")
            );
            let live_cos = cos(&live);
            rows.push(match &floor_llama {
                Ok(floor) => floor_row(&check, &name, &live_cos, floor),
                // Without the gold's spread runs a quantized file has no floor.
                Err(e) => {
                    let (min, mean) = min_mean(&live_cos);
                    Row {
                        check,
                        model: name.clone(),
                        figure: format!("min {min:.7}, mean {mean:.7}; {e}"),
                        threshold: "—".into(),
                        status: Status::Info,
                    }
                }
            });
            if let Some(g) = gold_llama {
                let drift: Vec<f64> = live.iter().zip(g).map(|(a, b)| cosine(a, b)).collect();
                rows.push(drift_row(
                    &name,
                    &drift,
                    thresholds::live_vs_gold(q, &spreads),
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
