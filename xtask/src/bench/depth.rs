//! `cargo xtask bench generate --depth N`: pp512 and tg128 with N tokens
//! already in the cache, as llama-bench's `-d N` measures them, so attention
//! over a long cache is timed beside the weights it shares the pass with.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use serde_json::json;

use super::generate::Engines;
use super::llama;
use super::measure::capture_ok;
use super::parse::{parse_json_line, parse_lamina_generate, parse_llama_bench};
use super::report::{Better, Cell, Report, stats};

/// Both engines' pp512 and tg128 at `--depth` on `model`, as two rows
/// (none without `--depth`).
///
/// lamina fills the depth once and truncates back to it before each timed
/// test; llama-bench fills it before each of its runs. Neither fill is timed.
pub(super) fn rows(
    engines: &Engines<'_>,
    model: &Path,
    name: &str,
    report: &mut Report,
) -> Result<()> {
    let (lamina, lbench, threads) = (engines.lamina, engines.lbench, engines.threads);
    let (Some(depth), reps) = (engines.args.depth, engines.args.reps) else {
        return Ok(());
    };
    let (t, r, d) = (threads.to_string(), reps.to_string(), depth.to_string());
    eprintln!("bench generate: {name}: lamina at depth {depth}");
    let ours = capture_ok(
        Command::new(lamina)
            .args(["bench", "generate", "--json", "--pp", "512", "--tg", "128"])
            .args(["--depth", &d, "-t", &t, "--runs", &r, "-m"])
            .arg(model),
    )
    .and_then(|out| parse_lamina_generate(&parse_json_line(&out.stdout)?));
    eprintln!("bench generate: {name}: llama.cpp at depth {depth}");
    let theirs = capture_ok(
        llama(lbench, false)
            .arg("-m")
            .arg(model)
            .args(["-p", "512", "-n", "128", "-d", &d, "-t", &t, "-r", &r])
            .args(["-o", "json"]),
    )
    .and_then(|out| parse_llama_bench(&String::from_utf8_lossy(&out.stdout)));
    let cell = |s: &[f64]| {
        if s.is_empty() {
            Err("no samples".to_string())
        } else {
            Ok(Cell::rate(&stats(s), "tok/s"))
        }
    };
    for (fig, p, g) in [("pp512", 512, 0), ("tg128", 0, 128)] {
        let ours = match &ours {
            Ok(o) => cell(if p > 0 { &o.pp_samples } else { &o.tg_samples }),
            Err(e) => Err(format!("{e:#}")),
        };
        let theirs = match &theirs {
            Ok(tests) => tests
                .iter()
                .find(|x| x.n_prompt == p && x.n_gen == g)
                .map_or_else(
                    || Err("missing from llama-bench output".to_string()),
                    |x| cell(&x.samples_ts),
                ),
            Err(e) => Err(format!("{e:#}")),
        };
        report.row(
            format!("{name} {fig} @ d{depth}"),
            Better::Higher,
            ours,
            theirs,
        );
    }
    report.detail.insert(
        format!("depth_{name}"),
        json!({
            "depth": depth,
            "lamina": ours.as_ref().map(|o| json!({"pp_samples": o.pp_samples, "tg_samples": o.tg_samples}))
                .unwrap_or_else(|e| json!({"unavailable": format!("{e:#}")})),
            "llama_cpp": theirs.as_ref().map(|tests| tests.iter().map(|x| json!({"n_prompt": x.n_prompt, "n_gen": x.n_gen, "samples_ts": x.samples_ts})).collect::<Vec<_>>())
                .unwrap_or_default(),
            "lamina_command": format!("lamina bench generate --json --pp 512 --tg 128 --depth {depth} -t {t} --runs {reps} -m MODEL"),
            "llama_cpp_command": format!("llama-bench -m MODEL -p 512 -n 128 -d {depth} -t {t} -r {reps} -o json"),
        }),
    );
    Ok(())
}
