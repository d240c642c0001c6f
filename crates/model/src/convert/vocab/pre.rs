//! `tokenizer.ggml.pre` for byte-level BPE vocabularies.

use serde_json::Value;

use crate::convert::{Error, Result};

/// The llama.cpp pre-tokenizer name for a `tokenizer.json`. The Python
/// converter hashes the token ids of a probe text; without a BPE encoder we
/// recognise the pre-tokenizer configuration itself.
pub(super) fn bpe_pre(tok: &Value) -> Result<&'static str> {
    const LLAMA3: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    // Qwen 2 / 2.5 / 3: Llama 3's pattern with single digits.
    const QWEN2: &str = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    let pre = tok.get("pre_tokenizer").cloned().unwrap_or(Value::Null);
    let parts: Vec<Value> = match pre.get("type").and_then(Value::as_str) {
        Some("Sequence") => pre
            .get("pretokenizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        Some(_) => vec![pre.clone()],
        None => vec![],
    };
    let types: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("type").and_then(Value::as_str))
        .collect();
    let regex = parts.iter().find_map(|p| {
        p.get("pattern")
            .and_then(|p| p.get("Regex"))
            .and_then(Value::as_str)
    });
    if regex == Some(LLAMA3) && types.contains(&"ByteLevel") {
        return Ok("llama-bpe");
    }
    if regex == Some(QWEN2) && types == ["Split", "ByteLevel"] {
        return Ok("qwen2");
    }
    if types == ["Digits", "ByteLevel"]
        && parts[0].get("individual_digits").and_then(Value::as_bool) == Some(true)
    {
        return Ok("smollm");
    }
    Err(Error::Tokenizer(format!(
        "tokenizer.json: unrecognised BPE pre-tokenizer {pre}; lamina convert knows the Llama 3 \
         (llama-bpe), Qwen 2 (qwen2) and SmolLM pre-tokenizers"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer(pre: Value) -> Value {
        serde_json::json!({ "pre_tokenizer": pre })
    }

    #[test]
    fn recognises_qwen2_llama3_and_smollm() {
        // Qwen2.5's tokenizer.json pre_tokenizer, as published.
        let qwen2 = tokenizer(serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}));
        assert_eq!(bpe_pre(&qwen2).unwrap(), "qwen2");
        let llama3 = tokenizer(serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}));
        assert_eq!(bpe_pre(&llama3).unwrap(), "llama-bpe");
        let smollm = tokenizer(serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]}));
        assert_eq!(bpe_pre(&smollm).unwrap(), "smollm");
        let gpt2 = tokenizer(serde_json::json!({"type": "ByteLevel", "add_prefix_space": false}));
        let err = bpe_pre(&gpt2).unwrap_err().to_string();
        assert!(err.contains("qwen2"), "{err}");
    }
}
