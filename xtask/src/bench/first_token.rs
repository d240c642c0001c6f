//! Start-up and memory of a generation model: the whole process of one
//! first token after a short prompt (load included), and its peak RSS
//! against what the weights and the KV cache need.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::llama;
use super::measure::{Peak, capture_ok, measure_ok};
use super::parse::parse_json_line;
use super::report::{Better, Cell, Report, stats};

/// 16 tokens with the BOS in the Llama 3 vocabulary (the --synth shapes');
/// other vocabularies count their own, and the row names the count.
pub(super) const PROMPT: &str =
    "The history of the printing press begins in the fifteenth century, when a";
/// The context both engines allocate (lamina's default where the model allows).
const CTX: usize = 4096;

/// Whole-process wall time and peak RSS of `lamina generate -n 1` against
/// `llama-completion -n 1` (no warm-up, `-fit off`: its fastest start), the
/// median of `reps` alternating runs, and lamina's peak against the file's
/// size plus an f16 cache of [`CTX`] positions.
pub(super) fn rows(
    lamina: &Path,
    completion: &Path,
    model: &Path,
    name: &str,
    threads: usize,
    reps: usize,
    report: &mut Report,
) -> Result<()> {
    let t = threads.to_string();
    let (train, kv_per_position) = cache_shape(lamina, model)?;
    let ctx = CTX.min(train);
    let c = ctx.to_string();
    let (mut ours_s, mut theirs_s) = (Vec::new(), Vec::new());
    let mut tokens = None;
    let (mut ours_peak, mut theirs_peak) = (Peak::default(), Peak::default());
    for i in 0..reps.max(1) {
        eprintln!("bench generate: {name}: first token {}/{}", i + 1, reps);
        let m = measure_ok(
            Command::new(lamina)
                .args(["generate", "--json", "-n", "1", "--temp", "0", "-t", &t])
                .args(["-c", &c])
                .args(["-p", PROMPT, "-m"])
                .arg(model),
        )?;
        ours_s.push(m.wall_s * 1e3);
        let out = parse_json_line(&m.output.stdout)?;
        tokens = out["prompt_ids"].as_array().map(Vec::len);
        ours_peak = ours_peak.max_by_hwm(m.peak);
        let m = measure_ok(
            llama(completion, false)
                .arg("-m")
                .arg(model)
                .args(["-p", PROMPT, "-n", "1", "--temp", "0", "-t", &t, "-c", &c])
                .args(["-no-cnv", "--no-warmup", "-fit", "off"]),
        )?;
        theirs_s.push(m.wall_s * 1e3);
        theirs_peak = theirs_peak.max_by_hwm(m.peak);
    }
    report.row(
        format!(
            "{name} first token of a {}-token prompt, whole process (median)",
            tokens.context("lamina generate --json printed no prompt_ids")?
        ),
        Better::Lower,
        Ok(Cell::ms(stats(&ours_s).p50)),
        Ok(Cell::ms(stats(&theirs_s).p50)),
    );
    let file_kb = std::fs::metadata(model)?.len() / 1024;
    let kv_kb = kv_per_position * ctx as u64 / 1024;
    let bound_kb = (file_kb + kv_kb) * 105 / 100;
    let mut ours = ours_peak.cell();
    ours.text += &format!(
        "; {:.0} % of file + KV ({} + {} MiB)",
        100.0 * ours_peak.hwm_kb as f64 / (file_kb + kv_kb) as f64,
        file_kb / 1024,
        kv_kb / 1024
    );
    report.row(
        format!("{name} peak RSS, first token, context {ctx}"),
        Better::Lower,
        Ok(ours),
        Ok(theirs_peak.cell()),
    );
    report.detail.insert(
        format!("first_token_{name}"),
        json!({"prompt": PROMPT, "ctx": ctx, "lamina_wall_ms": ours_s, "llama_cpp_wall_ms": theirs_s,
               "lamina_peak": ours_peak.json(), "llama_cpp_peak": theirs_peak.json(),
               "file_kb": file_kb, "kv_f16_kb": kv_kb, "rss_bound_kb": bound_kb,
               "within_bound": ours_peak.hwm_kb <= bound_kb,
               "lamina_command": format!("lamina generate --json -n 1 --temp 0 -t {t} -c {ctx} -p PROMPT -m MODEL"),
               "llama_cpp_command": format!("llama-completion -m MODEL -p PROMPT -n 1 --temp 0 -t {t} -c {ctx} -no-cnv --no-warmup -fit off")}),
    );
    Ok(())
}

/// The model's training context and the bytes an f16 cache takes a
/// position (keys and values of every layer's KV heads), from its metadata
/// as `lamina inspect --json` prints it.
fn cache_shape(lamina: &Path, model: &Path) -> Result<(usize, u64)> {
    let out = capture_ok(Command::new(lamina).args(["inspect", "--json"]).arg(model))?;
    let v: Value = serde_json::from_slice(&out.stdout).context("lamina inspect --json output")?;
    shape_of(&v["metadata"])
}

fn shape_of(meta: &Value) -> Result<(usize, u64)> {
    let arch = meta["general.architecture"]
        .as_str()
        .context("general.architecture in the metadata")?;
    let opt = |k: &str| meta[format!("{arch}.{k}")].as_u64();
    let get = |k: &str| opt(k).with_context(|| format!("{arch}.{k} in the metadata"));
    let (layers, embd, heads) = (
        get("block_count")?,
        get("embedding_length")?,
        get("attention.head_count")?,
    );
    let kv_heads = opt("attention.head_count_kv").unwrap_or(heads);
    let key = opt("attention.key_length").unwrap_or(embd / heads);
    let value = opt("attention.value_length").unwrap_or(embd / heads);
    let ctx = opt("context_length").map_or(CTX, |c| c as usize);
    Ok((ctx, layers * kv_heads * (key + value) * 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_bytes_follow_the_kv_heads() {
        // Llama-3.1-8B: 32 layers, 8 KV heads of 128, so 128 KiB a position.
        let meta = json!({"general.architecture": "llama", "llama.block_count": 32,
            "llama.embedding_length": 4096, "llama.attention.head_count": 32,
            "llama.attention.head_count_kv": 8, "llama.context_length": 131072});
        assert_eq!(shape_of(&meta).unwrap(), (131072, 128 * 1024));
        // Gemma 3 270M names its head size; no context length means 4096.
        let meta = json!({"general.architecture": "gemma3", "gemma3.block_count": 18,
            "gemma3.embedding_length": 640, "gemma3.attention.head_count": 4,
            "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 256,
            "gemma3.attention.value_length": 256});
        assert_eq!(shape_of(&meta).unwrap(), (CTX, 18 * 512 * 2));
        assert!(shape_of(&json!({"general.architecture": "llama"})).is_err());
    }
}
