//! `cargo xtask bench embed`: latency, batch throughput, memory and the
//! one-shot CLI embedding, lamina against llama.cpp.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::json;

use super::measure::{Peak, capture_ok, lamina_idle, measure_ok};
use super::parse::{
    f64s, parse_decode_rate, parse_json_line, parse_llama_bench, parse_prompt_eval,
};
use super::report::{Better, Cell, Report, stats};
use super::{
    Args, BATCH, LLAMA_BATCH, LONG_TEXT, SHORT_TEXT, default_embed_model, llama, resolve_model,
};
use crate::bench_rules::{self as rules, WARMUP_RUNS};
use crate::llama_cpp::llama_cpp_bin;
use crate::{lamina_bin, target_dir};

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

pub(super) fn embed(args: &Args, threads: usize, report: &mut Report) -> Result<()> {
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

/// `lamina bench embed --json` with the shared warm-up count on `threads` threads.
pub(super) fn lamina_bench_embed(lamina: &Path, threads: &str) -> Command {
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
}
