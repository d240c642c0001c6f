//! Parsers of what the engines print: llama-bench's JSON, llama.cpp's logs
//! and the JSON line of `lamina bench`.

use anyhow::{Context, Result};
use serde_json::Value;

/// One entry of `llama-bench -o json`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LlamaBenchTest {
    pub n_prompt: u64,
    pub n_gen: u64,
    pub samples_ns: Vec<f64>,
    pub samples_ts: Vec<f64>,
    pub build_commit: Option<String>,
}

pub(crate) fn parse_llama_bench(text: &str) -> Result<Vec<LlamaBenchTest>> {
    // llama-bench prints the JSON array to stdout; anything before `[` is noise.
    let start = text
        .find('[')
        .context("no JSON array in llama-bench output")?;
    let v: Value = serde_json::from_str(&text[start..]).context("parsing llama-bench JSON")?;
    let arr = v.as_array().context("llama-bench JSON is not an array")?;
    let nums = |e: &Value, k: &str| -> Vec<f64> {
        e[k].as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    arr.iter()
        .map(|e| {
            Ok(LlamaBenchTest {
                n_prompt: e["n_prompt"].as_u64().context("n_prompt")?,
                n_gen: e["n_gen"].as_u64().context("n_gen")?,
                samples_ns: nums(e, "samples_ns"),
                samples_ts: nums(e, "samples_ts"),
                build_commit: e["build_commit"].as_str().map(str::to_string),
            })
        })
        .collect()
}

/// `llama_perf_context_print: prompt eval time = X ms / N tokens (...)` →
/// `(X, N)`.
pub(crate) fn parse_prompt_eval(log: &str) -> Option<(f64, u64)> {
    let line = log.lines().find(|l| l.contains("prompt eval time ="))?;
    let after = line.split_once("prompt eval time =")?.1;
    let (ms, rest) = after.split_once("ms")?;
    let tokens = rest
        .trim_start_matches([' ', '/'])
        .split_whitespace()
        .next()?;
    Some((ms.trim().parse().ok()?, tokens.parse().ok()?))
}

/// llama-embedding's steady batch throughput from its `-lv 4` log: each
/// `batch_decode: n_tokens = N` line carries the wall-clock time
/// (`M.SS.mmm.uuu`) at which that pass starts, so the passes from the
/// second to the second-last ran between the second line and the last one.
/// Returns `(tokens per second over those passes, tokens of all passes)`.
///
/// Its `prompt eval time` is not used: on EmbeddingGemma it reported 1.54 s
/// for 2008 tokens where the passes took 3.66 s of wall time (and
/// `llama-bench -p 512 --embeddings 1` measures 588 tokens/s, not 1300).
/// The first pass is excluded like lamina's warm-up run: it took 1.18 s
/// against 0.74-0.98 s for the later ones of the same size.
pub(crate) fn parse_decode_rate(log: &str) -> Option<(f64, u64)> {
    let passes: Vec<(f64, u64)> = log
        .lines()
        .filter_map(|l| {
            let (stamp, rest) = l.trim().split_once(' ')?;
            let n = rest.split_once("batch_decode: n_tokens =")?.1;
            let n: u64 = n.split(',').next()?.trim().parse().ok()?;
            let f: Vec<f64> = stamp
                .split('.')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            let [min, sec, ms, us] = f[..] else {
                return None;
            };
            Some((min * 60.0 + sec + ms / 1e3 + us / 1e6, n))
        })
        .collect();
    if passes.len() < 3 {
        return None;
    }
    let total = passes.iter().map(|p| p.1).sum();
    let steady = &passes[1..];
    let tokens: u64 = steady[..steady.len() - 1].iter().map(|p| p.1).sum();
    let secs = steady[steady.len() - 1].0 - steady[0].0;
    (secs > 0.0).then(|| (tokens as f64 / secs, total))
}

/// The JSON object of `lamina bench ... --json` (its last line).
pub(super) fn parse_json_line(stdout: &[u8]) -> Result<Value> {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON object in the output")?;
    Ok(serde_json::from_str(line)?)
}

pub(super) fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// What `lamina bench generate --json` prints.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LaminaGenerate {
    pub pp_tokens_per_s: f64,
    pub tg_tokens_per_s: f64,
    pub pp_samples: Vec<f64>,
    pub tg_samples: Vec<f64>,
    /// Weight bytes a decoded token reads, and the memory bandwidth (GB/s)
    /// measured around the tg runs (absent without tg runs).
    pub weight_bytes_per_token: Option<f64>,
    pub memory_bandwidth_gb_s: Option<f64>,
    /// The median over the tg runs of each run's weight GB/s as a share of
    /// the better of the probes right before and after it (a shared host's
    /// bandwidth drifts within seconds).
    pub tg_bandwidth_share: Option<f64>,
    /// A cache line's round trip between two threads (median of one
    /// measurement after each tg run).
    pub core_round_trip_ns: Option<f64>,
}

pub(crate) fn parse_lamina_generate(v: &Value) -> Result<LaminaGenerate> {
    Ok(LaminaGenerate {
        pp_tokens_per_s: v["pp_tokens_per_s"].as_f64().context("pp_tokens_per_s")?,
        tg_tokens_per_s: v["tg_tokens_per_s"].as_f64().context("tg_tokens_per_s")?,
        pp_samples: f64s(&v["pp_samples"]),
        tg_samples: f64s(&v["tg_samples"]),
        weight_bytes_per_token: v["weight_bytes_per_token"].as_f64(),
        memory_bandwidth_gb_s: v["memory_bandwidth_gb_s"].as_f64(),
        tg_bandwidth_share: v["tg_bandwidth_share"].as_f64(),
        core_round_trip_ns: v["core_round_trip_ns"].as_f64(),
    })
}

/// Whether a failed lamina call failed because the subcommand does not exist.
pub(super) fn is_missing_subcommand(stderr: &str) -> bool {
    stderr.contains("unrecognized subcommand") || stderr.contains("invalid subcommand")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn llama_bench_json_is_parsed() {
        let text = r#"warning: something
[
  {
    "build_commit": "0c1e570",
    "n_prompt": 12,
    "n_gen": 0,
    "avg_ns": 372039618,
    "samples_ns": [ 485288811, 258790426 ],
    "samples_ts": [ 24.7275, 46.3696 ]
  },
  {
    "build_commit": "0c1e570",
    "n_prompt": 0,
    "n_gen": 128,
    "samples_ns": [ 1000000000 ],
    "samples_ts": [ 128.0 ]
  }
]
"#;
        let t = parse_llama_bench(text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].n_prompt, 12);
        assert_eq!(t[0].samples_ns, vec![485_288_811.0, 258_790_426.0]);
        assert_eq!(t[0].build_commit.as_deref(), Some("0c1e570"));
        assert_eq!((t[1].n_prompt, t[1].n_gen), (0, 128));
        assert_eq!(t[1].samples_ts, vec![128.0]);
        assert!(parse_llama_bench("no json").is_err());
    }

    #[test]
    fn prompt_eval_time_is_parsed() {
        let log = "0.08.220.756 I llama_perf_context_print:        load time =    5022.74 ms\n\
                   0.08.220.758 I llama_perf_context_print: prompt eval time =    3534.75 ms /    12 tokens (  294.56 ms per token,     3.39 tokens per second)\n\
                   0.08.220.759 I llama_perf_context_print:        eval time =       0.00 ms /     1 runs\n";
        assert_eq!(parse_prompt_eval(log), Some((3534.75, 12)));
        assert_eq!(
            parse_prompt_eval("llama_perf_context_print: load time = 1 ms"),
            None
        );
    }

    #[test]
    fn decode_rate_skips_the_first_pass() {
        let log = "0.01.144.923 I batch_decode: n_tokens = 500, n_seq = 25\n\
                   0.02.322.041 I batch_decode: n_tokens = 502, n_seq = 24\n\
                   0.03.306.213 I batch_decode: n_tokens = 489, n_seq = 22\n\
                   0.04.063.275 I batch_decode: n_tokens = 492, n_seq = 24\n\
                   0.04.801.541 I batch_decode: n_tokens = 25, n_seq = 1\n\
                   0.04.897.442 I llama_perf_context_print: prompt eval time = 1539.70 ms / 2008 tokens\n";
        let (rate, total) = parse_decode_rate(log).unwrap();
        assert_eq!(total, 2008);
        assert!((rate - 1483.0 / 2.4795).abs() < 0.01, "{rate}");
        let two = log.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(parse_decode_rate(&two), None);
    }

    #[test]
    fn lamina_generate_json_is_parsed() {
        let v: Value = serde_json::from_str(
            r#"{"pp_tokens_per_s": 700.5, "tg_tokens_per_s": 160.0, "pp_samples": [700, 701], "tg_samples": [159.5, 160.5]}"#,
        )
        .unwrap();
        let g = parse_lamina_generate(&v).unwrap();
        assert_eq!(g.pp_tokens_per_s, 700.5);
        assert_eq!(g.pp_samples, vec![700.0, 701.0]);
        assert_eq!(g.tg_samples.len(), 2);
        assert_eq!(g.memory_bandwidth_gb_s, None);
        let g = parse_lamina_generate(&json!({"pp_tokens_per_s": 1.0, "tg_tokens_per_s": 2.0,
            "weight_bytes_per_token": 1.5e8, "memory_bandwidth_gb_s": 45.5, "core_round_trip_ns": 83.0,
            "tg_bandwidth_share": 0.87}))
        .unwrap();
        assert_eq!(g.weight_bytes_per_token, Some(1.5e8));
        assert_eq!(g.memory_bandwidth_gb_s, Some(45.5));
        assert_eq!(g.tg_bandwidth_share, Some(0.87));
        assert_eq!(g.core_round_trip_ns, Some(83.0));
        assert!(parse_lamina_generate(&json!({"pp_tokens_per_s": 1.0})).is_err());
        assert!(is_missing_subcommand(
            "error: unrecognized subcommand 'generate'\n"
        ));
    }
}
