//! Generation checks against `testdata/generate/` (llama.cpp's greedy
//! continuations and teacher-forced top-5 logits; see its README).
//!
//! * `generation`: `lamina generate --temp 0` must continue every prompt
//!   exactly as llama.cpp did on the F32 copies; on quantized files the
//!   shared greedy prefix is reported (rounding differences legitimately
//!   flip near-ties there: the logits check judges those files).
//! * `logits`: `lamina logits --step-from` over llama.cpp's sequence (prompt
//!   as one batch, then one token at a time, as llama.cpp ran it). F32: every
//!   logit within 0.02 of the range of llama.cpp's two attention setups and
//!   a mean |diff| ≤ 0.015; quantized: top-1 agreement at most 2% of
//!   positions below llama.cpp's own FA-off setup and a mean |diff| at most
//!   1.25× that setup's — the thresholds of `crates/model/tests/generate_gold.rs`.
//!
//! With `--live` the gold tool (`testdata/generate/tools/lcpp_gold.cpp`) is
//! built against the cached llama.cpp and rerun on each model's first
//! prompt, to show whether llama.cpp itself has changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::{Ctx, Row, Status, read_json};
use crate::models::hash_file;

/// One llama.cpp run: prompt ids, greedy continuation, top-5 before each.
struct Gold {
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
    top: Vec<Vec<(u32, f32)>>,
}

fn ids(v: &Value, key: &str) -> Result<Vec<u32>> {
    v[key]
        .as_array()
        .with_context(|| format!("{key} is not an array"))?
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .context("not a token id")
        })
        .collect()
}

/// `[[[id, logit], ...], ...]` (lamina logits and the gold share the shape).
fn tops(v: &Value) -> Result<Vec<Vec<(u32, f32)>>> {
    v["top"]
        .as_array()
        .context("top is not an array")?
        .iter()
        .map(|step| {
            step.as_array()
                .context("top step")?
                .iter()
                .map(|pair| {
                    let id = pair[0].as_u64().context("top id")? as u32;
                    let l = pair[1].as_f64().context("top logit")? as f32;
                    Ok((id, l))
                })
                .collect()
        })
        .collect()
}

fn load_gold(path: &Path) -> Result<Gold> {
    let v = read_json(path)?;
    let g = Gold {
        prompt_ids: ids(&v, "prompt_ids")?,
        ids: ids(&v, "ids")?,
        top: tops(&v)?,
    };
    ensure!(
        g.top.len() == g.ids.len() && !g.ids.is_empty(),
        "{}: {} top rows for {} ids",
        path.display(),
        g.top.len(),
        g.ids.len()
    );
    Ok(g)
}

/// A model of the gold: its name, file, and prompts (`P.json` beside
/// `P.fa-off.json`), or why it is skipped.
struct GoldModel {
    name: String,
    file: PathBuf,
    prompts: Vec<String>,
}

fn is_f32(name: &str) -> bool {
    name.ends_with("-F32")
}

/// The gold's models whose files are present and identical to the ones the
/// gold was made from; the others become skip rows.
fn gold_models(ctx: &Ctx, check: &str, rows: &mut Vec<Row>) -> Result<Vec<GoldModel>> {
    let dir = ctx.root.join("testdata/generate");
    if !dir.is_dir() {
        rows.push(Row::skip(check, "—", "testdata/generate/ absent"));
        return Ok(Vec::new());
    }
    let sums = std::fs::read_to_string(dir.join("models.sha256"))
        .context("reading testdata/generate/models.sha256")?;
    let sums: HashMap<&str, &str> = sums
        .lines()
        .filter_map(|l| {
            let (sha, file) = l.split_once("  ")?;
            Some((file.trim(), sha.trim()))
        })
        .collect();
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| sums.contains_key(format!("{n}.gguf").as_str()))
        .collect();
    // F32 first: they are the strict checks.
    names.sort_by_key(|n| (!is_f32(n), n.clone()));
    let mut out = Vec::new();
    for name in names {
        let file_name = format!("{name}.gguf");
        let file = ctx.models.join(&file_name);
        if !file.is_file() {
            rows.push(Row::skip(
                check,
                &file_name,
                format!("{} is missing (cargo xtask models)", file.display()),
            ));
            continue;
        }
        let sha = hash_file(&file, &file_name)?;
        if sums.get(file_name.as_str()) != Some(&sha.as_str()) {
            rows.push(Row::skip(
                check,
                &file_name,
                "not the file the gold was made from (SHA-256 differs)",
            ));
            continue;
        }
        let mut prompts: Vec<String> = std::fs::read_dir(dir.join(&name))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter_map(|f| f.strip_suffix(".json").map(str::to_owned))
            .filter(|p| !p.ends_with(".fa-off"))
            .collect();
        prompts.sort();
        out.push(GoldModel {
            name,
            file,
            prompts,
        });
    }
    Ok(out)
}

fn prompt_path(ctx: &Ctx, prompt: &str) -> PathBuf {
    ctx.root
        .join("testdata/generate/prompts")
        .join(format!("{prompt}.txt"))
}

fn gold_path(ctx: &Ctx, model: &str, file: &str) -> PathBuf {
    ctx.root
        .join("testdata/generate")
        .join(model)
        .join(format!("{file}.json"))
}

fn run_json(cmd: &mut Command, what: &str) -> Result<Value> {
    let o = cmd.stdin(Stdio::null()).output()?;
    ensure!(
        o.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&o.stderr).trim()
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("{what} printed no JSON"))?;
    Ok(serde_json::from_str(line)?)
}

/// Greedy continuations.
pub(super) fn generation(ctx: &Ctx) -> Result<Vec<Row>> {
    const CHECK: &str = "greedy generation vs llama.cpp";
    let mut rows = Vec::new();
    for m in gold_models(ctx, CHECK, &mut rows)? {
        // The fast subset keeps the pass/fail rows (F32) and drops the info rows.
        if ctx.fast && !is_f32(&m.name) {
            continue;
        }
        let mut same = 0;
        let mut prefix = Vec::new();
        for p in &m.prompts {
            let gold = load_gold(&gold_path(ctx, &m.name, p))?;
            let v = run_json(
                Command::new(&ctx.lamina)
                    .args(["generate", "--temp", "0", "--json", "-m"])
                    .arg(&m.file)
                    .arg("-f")
                    .arg(prompt_path(ctx, p))
                    .args(["-n", &gold.ids.len().to_string()]),
                "lamina generate",
            )?;
            ensure!(
                ids(&v, "prompt_ids")? == gold.prompt_ids,
                "{}/{p}: prompt tokens differ from llama.cpp's",
                m.name
            );
            let ours = ids(&v, "ids")?;
            let common = ours
                .iter()
                .zip(&gold.ids)
                .take_while(|(a, b)| a == b)
                .count();
            same += usize::from(ours == gold.ids);
            prefix.push(common as f64 / gold.ids.len() as f64);
        }
        let n = m.prompts.len();
        let mean_prefix = 100.0 * prefix.iter().sum::<f64>() / n.max(1) as f64;
        let figure = format!(
            "{same}/{n} prompts identical; shared greedy prefix {mean_prefix:.0}% on average"
        );
        rows.push(if is_f32(&m.name) {
            Row {
                check: CHECK.into(),
                model: format!("{}.gguf", m.name),
                figure,
                threshold: "all identical".into(),
                status: if same == n && n > 0 {
                    Status::Pass
                } else {
                    Status::Fail
                },
            }
        } else {
            Row {
                check: CHECK.into(),
                model: format!("{}.gguf", m.name),
                figure,
                threshold: "— (quantized: see logits)".into(),
                status: Status::Info,
            }
        });
    }
    if ctx.live {
        rows.extend(live(ctx)?);
    }
    Ok(rows)
}

/// Teacher-forced comparison of one prompt (the figures of
/// `crates/model/tests/generate_gold.rs`).
#[derive(Default)]
struct Figures {
    steps: usize,
    /// Sum of |ours − llama.cpp default| over its top-5 ids.
    sum_on: f64,
    /// llama.cpp's setups against each other (ids in both top-5s).
    sum_on_off: f64,
    n_on_off: usize,
    /// How far our logit lies outside the range of llama.cpp's two setups.
    max_outside: f32,
    top1_ours: usize,
    top1_off: usize,
    /// A gold id missing from our top-K (cannot be compared).
    missing: usize,
}

/// Our top-K per position is enough: llama.cpp's top-5 ids are all in it
/// unless something is badly wrong (then they count as missing).
const OUR_TOP: usize = 40;

fn teacher_force(ctx: &Ctx, file: &Path, on: &Gold, off: &Gold) -> Result<Figures> {
    ensure!(
        on.prompt_ids == off.prompt_ids && on.ids == off.ids,
        "the FA-on and FA-off gold disagree on the sequence"
    );
    let seq: Vec<String> = on
        .prompt_ids
        .iter()
        .chain(&on.ids[..on.ids.len() - 1])
        .map(u32::to_string)
        .collect();
    let v = run_json(
        Command::new(&ctx.lamina)
            .args(["logits", "--json", "--top", &OUR_TOP.to_string()])
            .args(["--step-from", &on.prompt_ids.len().to_string()])
            .arg("-m")
            .arg(file)
            .arg("--ids")
            .arg(seq.join(",")),
        "lamina logits",
    )?;
    let ours = tops(&v)?;
    let first = on.prompt_ids.len() - 1;
    ensure!(
        ours.len() == first + on.ids.len(),
        "lamina logits returned {} positions",
        ours.len()
    );
    let mut f = Figures::default();
    for (step, mine) in ours[first..].iter().enumerate() {
        let lookup = |id: u32| mine.iter().find(|(i, _)| *i == id).map(|&(_, l)| l);
        f.steps += 1;
        for &(id, l) in &on.top[step] {
            let Some(o) = lookup(id) else {
                f.missing += 1;
                continue;
            };
            f.sum_on += f64::from((o - l).abs());
            if let Some(&(_, lo)) = off.top[step].iter().find(|(i, _)| *i == id) {
                f.sum_on_off += f64::from((l - lo).abs());
                f.n_on_off += 1;
                let (a, b) = (l.min(lo), l.max(lo));
                f.max_outside = f.max_outside.max((a - o).max(o - b).max(0.0));
            }
        }
        f.top1_ours += usize::from(mine[0].0 == on.top[step][0].0);
        f.top1_off += usize::from(off.top[step][0].0 == on.top[step][0].0);
    }
    Ok(f)
}

/// Teacher-forced logits.
pub(super) fn logits(ctx: &Ctx) -> Result<Vec<Row>> {
    const CHECK: &str = "teacher-forced logits vs llama.cpp";
    let mut rows = Vec::new();
    for m in gold_models(ctx, CHECK, &mut rows)? {
        let mut all = Vec::new();
        for p in &m.prompts {
            let on = load_gold(&gold_path(ctx, &m.name, p))?;
            let off = load_gold(&gold_path(ctx, &m.name, &format!("{p}.fa-off")))?;
            all.push(teacher_force(ctx, &m.file, &on, &off)?);
        }
        let steps: usize = all.iter().map(|f| f.steps).sum();
        let missing: usize = all.iter().map(|f| f.missing).sum();
        let mean = all.iter().map(|f| f.sum_on).sum::<f64>() / (5 * steps).max(1) as f64;
        let model = format!("{}.gguf", m.name);
        if is_f32(&m.name) {
            let outside = all.iter().map(|f| f.max_outside).fold(0f32, f32::max);
            let ok = missing == 0 && outside <= 0.02 && mean <= 0.015;
            rows.push(Row {
                check: CHECK.into(),
                model,
                figure: format!(
                    "{steps} positions: max {outside:.4} outside llama.cpp's FA-on/off range, \
                     mean |diff| {mean:.4}{}",
                    missing_note(missing)
                ),
                threshold: "≤ 0.02 outside, mean ≤ 0.015".into(),
                status: pass_if(ok),
            });
        } else {
            let ours: usize = all.iter().map(|f| f.top1_ours).sum();
            let off: usize = all.iter().map(|f| f.top1_off).sum();
            let llama_mean = all.iter().map(|f| f.sum_on_off).sum::<f64>()
                / all.iter().map(|f| f.n_on_off).sum::<usize>().max(1) as f64;
            let ok = missing == 0 && ours * 50 + steps >= off * 50 && mean <= 1.25 * llama_mean;
            rows.push(Row {
                check: CHECK.into(),
                model,
                figure: format!(
                    "top-1 same {ours}/{steps} (llama.cpp FA-off {off}); mean |diff| {mean:.3} \
                     (FA-off {llama_mean:.3}){}",
                    missing_note(missing)
                ),
                threshold: "top-1 ≥ FA-off − 2%, mean ≤ 1.25× FA-off".into(),
                status: pass_if(ok),
            });
        }
    }
    Ok(rows)
}

fn missing_note(missing: usize) -> String {
    if missing == 0 {
        String::new()
    } else {
        format!("; {missing} llama.cpp top-5 ids outside lamina's top {OUR_TOP}")
    }
}

fn pass_if(ok: bool) -> Status {
    if ok { Status::Pass } else { Status::Fail }
}

/// Builds the gold tool against the cached llama.cpp and reruns each model's
/// first prompt: llama.cpp now against its gold.
fn live(ctx: &Ctx) -> Result<Vec<Row>> {
    const CHECK: &str = "llama.cpp live vs its generation gold (drift)";
    let tool = build_gold_tool(ctx)?;
    let mut rows = Vec::new();
    let mut ignored = Vec::new();
    for m in gold_models(ctx, CHECK, &mut ignored)? {
        let Some(p) = m.prompts.first() else { continue };
        let gold = load_gold(&gold_path(ctx, &m.name, p))?;
        let v = run_json(
            Command::new(&tool)
                .arg("-m")
                .arg(&m.file)
                .arg("-f")
                .arg(prompt_path(ctx, p))
                .args(["-n", &gold.ids.len().to_string(), "--top", "5", "-t", "2"]),
            "lcpp_gold",
        )?;
        let now = ids(&v, "ids")?;
        let max_diff = tops(&v)?
            .iter()
            .zip(&gold.top)
            .flat_map(|(a, b)| a.iter().zip(b))
            .filter(|(a, b)| a.0 == b.0)
            .map(|(a, b)| (a.1 - b.1).abs())
            .fold(0f32, f32::max);
        rows.push(Row {
            check: CHECK.into(),
            model: format!("{}.gguf ({p})", m.name),
            figure: format!(
                "ids {}; max |logit diff| {max_diff:.4}",
                if now == gold.ids { "same" } else { "DIFFER" }
            ),
            threshold: "same ids".into(),
            status: pass_if(now == gold.ids),
        });
    }
    Ok(rows)
}

fn build_gold_tool(ctx: &Ctx) -> Result<PathBuf> {
    let bin = crate::llama_cpp::bin_dir()?;
    // The static libraries sit in the build tree above bin/.
    let build = bin.parent().context("llama.cpp build dir")?;
    // The sources the build was configured from, as CMake recorded them.
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt"))
        .with_context(|| format!("reading {}/CMakeCache.txt", build.display()))?;
    let src = cache
        .lines()
        .find_map(|l| l.strip_prefix("CMAKE_HOME_DIRECTORY:INTERNAL="))
        .map(PathBuf::from)
        .context("CMakeCache.txt names no source folder")?;
    let dir = crate::target_dir().join("validate");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("lcpp_gold");
    let lib = |p: &str| build.join(p);
    let status = Command::new("c++")
        .args(["-O2", "-std=c++17"])
        .arg(format!("-I{}", src.join("include").display()))
        .arg(format!("-I{}", src.join("ggml/include").display()))
        .arg(ctx.root.join("testdata/generate/tools/lcpp_gold.cpp"))
        .arg("-o")
        .arg(&out)
        .arg(lib("src/libllama.a"))
        .arg(lib("ggml/src/libggml.a"))
        .arg(lib("ggml/src/libggml-cpu.a"))
        .arg(lib("ggml/src/libggml-base.a"))
        .args(["-fopenmp", "-lpthread", "-ldl"])
        .status()
        .context("running c++ to build the gold tool")?;
    ensure!(status.success(), "building lcpp_gold failed");
    Ok(out)
}
