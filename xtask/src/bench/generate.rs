//! `cargo xtask bench generate`: pp512 and tg128 of lamina and llama.cpp, and
//! the weights read per second against the measured memory bandwidth.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use serde_json::json;

use super::measure::capture_ok;
use super::parse::{
    LaminaGenerate, LlamaBenchTest, f64s, is_missing_subcommand, parse_json_line,
    parse_lamina_generate, parse_llama_bench,
};
use super::report::{Better, Cell, Report, stats};
use super::{Args, LONG_TEXT, llama, resolve_model};
use crate::bench_rules::{self as rules, WARMUP_RUNS};
use crate::llama_cpp::llama_cpp_bin;
use crate::{lamina_bin, models};

/// The default generation models (those present are measured).
const GENERATE_MODELS: &[&str] = &[
    "SmolLM2-135M-Instruct-Q8_0.gguf",
    "gemma-3-270m-Q4_K_M.gguf",
    "embeddinggemma-300m-Q4_K_M.gguf",
];

pub(super) fn generate(args: &Args, threads: usize, report: &mut Report) -> Result<()> {
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
    let completion = llama_cpp_bin("llama-completion")?;
    let engines = Engines {
        args,
        lamina: &lamina,
        lbench: &lbench,
        threads,
    };
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
            embed_pp(&engines, &model, &name, report)?;
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
        super::first_token::rows(
            &lamina,
            &completion,
            &model,
            &name,
            threads,
            args.reps,
            report,
        )?;
        super::depth::rows(&engines, &model, &name, report)?;
    }
    Ok(())
}

/// The bench's settings and the two engines' programs, which every figure
/// of a model runs with.
#[derive(Clone, Copy)]
pub(super) struct Engines<'a> {
    pub args: &'a Args,
    pub lamina: &'a Path,
    pub lbench: &'a Path,
    pub threads: usize,
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
fn embed_pp(engines: &Engines<'_>, model: &Path, name: &str, report: &mut Report) -> Result<()> {
    let (lamina, lbench, threads) = (engines.lamina, engines.lbench, engines.threads);
    let args = engines.args;
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
