//! `lamina inspect`: what `gguf-dump` shows, as text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Context, Result};
use lamina_gguf::{ArrayView, Gguf, TensorInfo, Value};
use serde_json::{Map, Value as Json, json};

/// Arrays longer than this are summarised unless `--full` is given.
const ARRAY_SUMMARY_LEN: usize = 32;
/// Items of a long array shown in the text summary.
const TEXT_PREVIEW_ITEMS: usize = 5;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF file (a path, a name in the models directory, or hf://ORG/REPO[:QUANT]).
    file: String,
    /// Also list every tensor.
    #[arg(long)]
    tensors: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
    /// Print arrays in full instead of summarising long ones.
    #[arg(long)]
    full: bool,
    /// Print only `SHA256  TYPE  NAME` of every tensor's data, in file order
    /// (with `--json`: a `sha256` field per tensor). Compares files tensor by tensor.
    #[arg(long)]
    sha256: bool,
}

pub fn run(args: Args) -> Result<()> {
    let path = crate::models::resolve(&args.file)?;
    let gguf = Gguf::open(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let hashes = args.sha256.then(|| tensor_hashes(&gguf));
    let out = if args.json {
        let mut doc = to_json(&gguf, args.full);
        if let (Some(hashes), Some(Json::Array(tensors))) = (&hashes, doc.get_mut("tensors")) {
            for (t, h) in tensors.iter_mut().zip(hashes) {
                t["sha256"] = json!(h);
            }
        }
        let mut s = serde_json::to_string_pretty(&doc)?;
        s.push('\n');
        s
    } else if let Some(hashes) = &hashes {
        let mut s = String::new();
        for (t, h) in gguf.tensors().iter().zip(hashes) {
            let _ = writeln!(s, "{h}  {}  {}", t.ggml_type.name(), escape(&t.name));
        }
        s
    } else {
        to_text(&gguf, &path.display().to_string(), args.tensors, args.full)
    };
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`lamina inspect ... | head`) is not an error worth reporting.
    match stdout.write_all(out.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// The SHA-256 of each tensor's data, in file order (hashed in parallel).
fn tensor_hashes<D: AsRef<[u8]> + Sync>(gguf: &Gguf<D>) -> Vec<String> {
    use rayon::prelude::*;
    use sha2::{Digest, Sha256};
    gguf.tensors()
        .par_iter()
        .map(|t| {
            Sha256::digest(gguf.tensor_data(t))
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .collect()
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `s` with control characters, Unicode format characters (bidirectional
/// overrides, zero-width marks) and backslashes escaped, so a hostile file
/// cannot drive the terminal or disguise text.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Control characters and the invisible formatting characters of
/// Unicode's Cf category that text terminals act on or hide.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}')
}

/// A string value as printed: quoted, with quotes and hidden characters escaped.
fn quoted(s: &str) -> String {
    format!("\"{}\"", escape(s).replace('"', "\\\""))
}

fn value_to_json(value: &Value<'_>, full: bool) -> Json {
    match *value {
        Value::U8(v) => json!(v),
        Value::I8(v) => json!(v),
        Value::U16(v) => json!(v),
        Value::I16(v) => json!(v),
        Value::U32(v) => json!(v),
        Value::I32(v) => json!(v),
        Value::U64(v) => json!(v),
        Value::I64(v) => json!(v),
        // Shortest f32 text re-read as f64, so 1e-5f32 prints as 1e-05 rather
        // than 9.999999747378752e-6. JSON has no NaN or infinity: those become null.
        Value::F32(v) => json!(v.to_string().parse::<f64>().ok()),
        Value::F64(v) => json!(v),
        Value::Bool(v) => json!(v),
        Value::String(s) => json!(lossy(s)),
        Value::Array(a) => array_to_json(&a, full),
    }
}

fn array_to_json(a: &ArrayView<'_>, full: bool) -> Json {
    if !full && a.len() > ARRAY_SUMMARY_LEN {
        json!({ "type": a.elem_type().name(), "len": a.len() })
    } else {
        Json::Array(a.iter().map(|v| value_to_json(&v, full)).collect())
    }
}

fn tensor_json(t: &TensorInfo) -> Json {
    json!({
        "name": t.name,
        "type": t.ggml_type.name(),
        "shape": t.shape,
        "offset": t.offset,
        "n_bytes": t.n_bytes,
    })
}

fn to_json<D: AsRef<[u8]>>(gguf: &Gguf<D>, full: bool) -> Json {
    let mut metadata = Map::new();
    for (key, value) in gguf.metadata() {
        metadata.insert(key.to_string(), value_to_json(&value, full));
    }
    json!({
        "version": gguf.version(),
        "alignment": gguf.alignment(),
        "metadata": metadata,
        "tensors": gguf.tensors().iter().map(tensor_json).collect::<Vec<_>>(),
    })
}

fn value_to_text(value: &Value<'_>, full: bool) -> String {
    match value {
        Value::String(s) => quoted(&lossy(s)),
        Value::Array(a) => {
            let shown = if full {
                a.len()
            } else {
                a.len().min(TEXT_PREVIEW_ITEMS)
            };
            let items: Vec<String> = a
                .iter()
                .take(shown)
                .map(|v| value_to_text(&v, full))
                .collect();
            let more = if shown < a.len() { ", ..." } else { "" };
            format!(
                "[{}; {}] [{}{more}]",
                a.elem_type(),
                a.len(),
                items.join(", ")
            )
        }
        Value::F32(v) => format!("{v}"),
        Value::F64(v) => format!("{v}"),
        Value::Bool(v) => format!("{v}"),
        other => other
            .as_integer()
            .map(|i| i.to_string())
            .unwrap_or_else(|| format!("{other:?}")),
    }
}

fn to_text<D: AsRef<[u8]>>(gguf: &Gguf<D>, path: &str, tensors: bool, full: bool) -> String {
    let mut out = String::new();
    let n_bytes = gguf.as_bytes().len();
    let _ = writeln!(
        out,
        "{}: GGUF v{}, {n_bytes} bytes",
        escape(path),
        gguf.version()
    );
    let _ = writeln!(
        out,
        "alignment {}, data section at byte {}",
        gguf.alignment(),
        gguf.data_offset()
    );
    let _ = writeln!(out, "\n{} metadata keys:", gguf.metadata_len());
    let width = gguf
        .metadata()
        .map(|(k, _)| escape(k).chars().count())
        .max()
        .unwrap_or(0);
    for (key, value) in gguf.metadata() {
        let key = escape(key);
        let _ = writeln!(
            out,
            "  {key:<width$}  {:<6}  {}",
            value.value_type(),
            value_to_text(&value, full)
        );
    }

    let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in gguf.tensors() {
        let entry = by_type.entry(t.ggml_type.name()).or_default();
        entry.0 += 1;
        entry.1 += t.n_bytes;
    }
    let total: u64 = gguf.tensors().iter().map(|t| t.n_bytes).sum();
    let params: u64 = gguf.tensors().iter().map(|t| t.n_elements()).sum();
    let _ = writeln!(
        out,
        "\n{} tensors, {params} parameters, {total} bytes of tensor data:",
        gguf.tensors().len()
    );
    for (name, (count, bytes)) in &by_type {
        let _ = writeln!(out, "  {name:<8} {count:>5} tensors  {bytes:>14} bytes");
    }
    if tensors {
        let width = gguf
            .tensors()
            .iter()
            .map(|t| escape(&t.name).chars().count())
            .max()
            .unwrap_or(4);
        let _ = writeln!(
            out,
            "\n  {:>5}  {:<width$}  {:<7}  {:<24}  {:>12}  {:>12}",
            "#", "name", "type", "shape", "bytes", "offset"
        );
        for (i, t) in gguf.tensors().iter().enumerate() {
            let shape = t
                .shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" x ");
            let _ = writeln!(
                out,
                "  {i:>5}  {:<width$}  {:<7}  {shape:<24}  {:>12}  {:>12}",
                escape(&t.name),
                t.ggml_type.name(),
                t.n_bytes,
                t.offset
            );
        }
    }
    out
}
