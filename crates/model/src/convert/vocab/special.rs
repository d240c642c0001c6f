//! gguf-py's `SpecialVocab(dir, load_merges, n_vocab).add_to_gguf(...)`:
//! merges, special token ids, add_bos/add_eos/add_sep, the chat template and
//! the normalizer flags, in the order the Python code sets them.

use std::path::Path;

use lamina_gguf::OwnedValue;
use serde_json::{Map, Value};

use super::read_opt_json;
use crate::convert::{Error, Result, io_err};

/// A JSON value as Python's `bool()` sees it.
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Bool(true)) => true,
    }
}

/// `x in (a, b)` with Python equality (a string never equals a dict).
fn is_one_of(x: &str, options: [&Option<Value>; 2]) -> bool {
    options
        .iter()
        .any(|o| matches!(o, Some(Value::String(s)) if s == x))
}

fn special_id(item: &Value) -> Option<String> {
    item.get("SpecialToken")
        .and_then(|s| s.get("id"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn sequence_id(item: &Value) -> Option<&str> {
    item.get("Sequence")
        .and_then(|s| s.get("id"))
        .and_then(Value::as_str)
}

#[derive(Default)]
struct State {
    types: Vec<&'static str>,
    ids: Vec<(&'static str, u32)>,
    add: Vec<(&'static str, bool)>,
    merges: Vec<String>,
    lowercase: Option<bool>,
    strip_accents: Option<bool>,
    n_vocab: Option<usize>,
}

impl State {
    /// `add_special_token[typ] = v` (`overwrite`) or `setdefault`.
    fn set_add(&mut self, typ: &'static str, v: bool, overwrite: bool) {
        match self.add.iter_mut().find(|(t, _)| *t == typ) {
            Some(e) if overwrite => e.1 = v,
            Some(_) => {}
            None => self.add.push((typ, v)),
        }
    }

    /// `_set_special_token`: the first valid id per type wins.
    fn set_id(&mut self, typ: &'static str, id: Option<&Value>) -> Result<()> {
        let Some(id) = id.and_then(Value::as_i64) else {
            return Ok(());
        };
        if id < 0 {
            return Err(Error::Tokenizer(format!(
                "invalid value for special token type {typ}: {id}"
            )));
        }
        let fits = self.n_vocab.is_none_or(|n| (id as u64) < n as u64);
        if fits && !self.ids.iter().any(|(t, _)| *t == typ) {
            let id = u32::try_from(id)
                .map_err(|_| Error::Tokenizer(format!("special token id {id} is too large")))?;
            self.ids.push((typ, id));
        }
        Ok(())
    }
}

/// Adds the `SpecialVocab` keys to `entries`.
pub(super) fn special_vocab(
    dir: &Path,
    n_vocab: Option<usize>,
    load_merges: bool,
    entries: &mut Vec<(String, OwnedValue)>,
) -> Result<()> {
    let mut st = State {
        types: vec!["bos", "eos", "unk", "sep", "pad", "cls", "mask"],
        n_vocab,
        ..State::default()
    };
    let tok = read_opt_json(&dir.join("tokenizer.json"))?.filter(|t| truthy(Some(t)));
    let mut tc: Option<Map<String, Value>> =
        read_opt_json(&dir.join("tokenizer_config.json"))?.and_then(|v| v.as_object().cloned());
    let mut added_tokens: Vec<Value> = Vec::new();
    if let Some(tok) = &tok {
        if load_merges {
            read_merges(tok, &mut st.merges)?;
        }
        if let Some(n) = tok.get("normalizer").filter(|n| truthy(Some(n))) {
            parse_normalizer(n, &mut st.lowercase, &mut st.strip_accents);
        }
        added_tokens = tok
            .get("added_tokens")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        post_processor(tok, &mut tc, &mut st);
    }
    if let Some(tcm) = tc.as_ref().filter(|t| !t.is_empty()) {
        let chat_template = chat_template(dir, tcm)?;
        for typ in st.types.clone() {
            if let Some(Value::Bool(v)) = tcm.get(&format!("add_{typ}_token")) {
                st.set_add(typ, *v, false);
            }
            let content = match tcm.get(&format!("{typ}_token")) {
                Some(Value::String(s)) => s.as_str(),
                Some(Value::Object(o)) => match o.get("content") {
                    Some(Value::String(s)) => s.as_str(),
                    _ => continue,
                },
                _ => continue,
            };
            let id = added_tokens
                .iter()
                .find(|a| a.get("content").and_then(Value::as_str) == Some(content))
                .and_then(|a| a.get("id"));
            st.set_id(typ, id)?;
        }
        config_ids(dir, &mut st)?;
        finish(entries, st, chat_template);
    } else {
        config_ids(dir, &mut st)?;
        finish(entries, st, None);
    }
    Ok(())
}

fn read_merges(tok: &Value, merges: &mut Vec<String>) -> Result<()> {
    let Some(Value::Array(m)) = tok.get("model").and_then(|m| m.get("merges")) else {
        return Ok(());
    };
    for e in m {
        match e {
            Value::String(s) => merges.push(s.clone()),
            Value::Array(pair) if pair.len() == 2 => {
                let enc = |v: &Value| -> String {
                    v.as_str()
                        .unwrap_or("")
                        .chars()
                        .map(|c| if c == ' ' { '\u{120}' } else { c })
                        .collect()
                };
                merges.push(format!("{} {}", enc(&pair[0]), enc(&pair[1])));
            }
            _ => {
                return Err(Error::Tokenizer(
                    "tokenizer.json: unknown merges format".into(),
                ));
            }
        }
    }
    Ok(())
}

/// The post-processor part of `_try_load_from_tokenizer_json`, which may
/// rewrite the special tokens of `tokenizer_config.json` as it goes.
fn post_processor(tok: &Value, tc: &mut Option<Map<String, Value>>, st: &mut State) {
    let get =
        |tc: &Option<Map<String, Value>>, k: &str| tc.as_ref().and_then(|t| t.get(k)).cloned();
    let has_tc = |tc: &Option<Map<String, Value>>| tc.as_ref().is_some_and(|t| !t.is_empty());
    let mut bos = get(tc, "bos_token");
    let mut cls = get(tc, "cls_token");
    let mut eos = get(tc, "eos_token");
    let mut sep = get(tc, "sep_token");
    let set = |tc: &mut Option<Map<String, Value>>, k: &str, v: Option<Value>| {
        if let Some(t) = tc.as_mut() {
            t.insert(k.to_string(), v.unwrap_or(Value::Null));
        }
    };
    if !truthy(bos.as_ref()) && truthy(cls.as_ref()) && has_tc(tc) {
        bos = cls.clone();
        set(tc, "bos_token", bos.clone());
    }
    if !truthy(eos.as_ref()) && truthy(sep.as_ref()) && has_tc(tc) {
        eos = sep.clone();
        set(tc, "eos_token", eos.clone());
    }
    let Some(pp) = tok.get("post_processor").filter(|p| truthy(Some(p))) else {
        return;
    };
    let procs: Vec<Value> = pp
        .get("processors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![pp.clone()]);
    for p in procs {
        match p.get("type").and_then(Value::as_str) {
            Some("ByteLevel") => {
                st.set_add("bos", false, false);
                st.set_add("eos", false, false);
            }
            Some("RobertaProcessing") => {
                st.set_add("bos", true, true);
                st.set_add("eos", true, true);
                st.set_add("sep", true, true);
                let first = |k: &str, dflt: &Option<Value>| {
                    p.get(k)
                        .and_then(|v| v.get(0))
                        .cloned()
                        .or_else(|| dflt.clone())
                };
                if !truthy(cls.as_ref()) && has_tc(tc) {
                    cls = first("cls", &bos);
                    set(tc, "cls_token", cls.clone());
                }
                if !truthy(sep.as_ref()) && has_tc(tc) {
                    sep = first("sep", &eos);
                    set(tc, "sep_token", sep.clone());
                }
            }
            Some("TemplateProcessing") => {
                let single = p
                    .get("single")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut pair = p
                    .get("pair")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut first = None;
                let mut last = None;
                if single.len() > 1 {
                    first = special_id(&single[0]);
                    if let Some(f) = &first {
                        if !has_tc(tc) {
                            bos = Some(Value::String(f.clone()));
                        } else if !is_one_of(f, [&bos, &cls]) {
                            if !truthy(bos.as_ref()) {
                                bos = Some(Value::String(f.clone()));
                                set(tc, "bos_token", bos.clone());
                            }
                            if !truthy(cls.as_ref()) {
                                cls = Some(Value::String(f.clone()));
                                set(tc, "cls_token", cls.clone());
                            }
                        }
                        st.set_add("bos", is_one_of(f, [&bos, &cls]), true);
                    }
                    last = special_id(&single[single.len() - 1]);
                    if let Some(l) = &last {
                        let is_eos = matches!(&eos, Some(Value::String(s)) if s == l);
                        if !has_tc(tc) {
                            eos = Some(Value::String(l.clone()));
                        } else if !is_eos {
                            for extra in ["eot", "eom"] {
                                if !st.types.contains(&extra) {
                                    st.types.push(extra);
                                    set(tc, &format!("{extra}_token"), eos.clone());
                                    break;
                                }
                            }
                            eos = Some(Value::String(l.clone()));
                            set(tc, "eos_token", eos.clone());
                        }
                        st.set_add("eos", true, true);
                    }
                }
                if pair.is_empty() {
                    continue;
                }
                let start = usize::from(first.is_some() && special_id(&pair[0]) == first);
                let stop = pair.len()
                    - usize::from(last.is_some() && special_id(&pair[pair.len() - 1]) == last);
                pair = if start < stop {
                    pair[start..stop].to_vec()
                } else {
                    Vec::new()
                };
                if pair.len() < 3
                    || sequence_id(&pair[0]) != Some("A")
                    || sequence_id(&pair[pair.len() - 1]) != Some("B")
                {
                    continue;
                }
                let mid = &pair[1..pair.len() - 1];
                let mut add_sep = false;
                if let Some(e) = special_id(&mid[0])
                    && is_one_of(&e, [&sep, &eos])
                    && last.is_none()
                {
                    add_sep = true;
                }
                if mid.len() == 2
                    && let Some(e) = special_id(&mid[1])
                    && is_one_of(&e, [&sep, &eos])
                {
                    add_sep = true;
                }
                st.set_add("sep", add_sep, true);
                if add_sep && !truthy(sep.as_ref()) && has_tc(tc) {
                    set(tc, "sep_token", eos.clone());
                }
            }
            _ => {}
        }
    }
}

fn chat_template(dir: &Path, tc: &Map<String, Value>) -> Result<Option<String>> {
    let jinja = dir.join("chat_template.jinja");
    let alt = if jinja.is_file() {
        let extra = dir.join("additional_chat_templates");
        if extra.is_dir()
            && std::fs::read_dir(&extra)
                .map_err(io_err(&extra))?
                .flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "jinja"))
        {
            return Err(Error::Unsupported(
                "additional_chat_templates/ (named chat templates) is not supported yet".into(),
            ));
        }
        Some(Value::String(
            std::fs::read_to_string(&jinja).map_err(io_err(&jinja))?,
        ))
    } else {
        read_opt_json(&dir.join("chat_template.json"))?
            .and_then(|v| v.get("chat_template").cloned())
    };
    match tc.get("chat_template").cloned().or(alt) {
        Some(Value::String(s)) => Ok(Some(s)),
        Some(Value::Array(_)) => Err(Error::Unsupported(
            "tokenizer_config.json: lists of named chat templates are not supported yet".into(),
        )),
        _ => Ok(None),
    }
}

/// `_try_load_from_config_json`.
fn config_ids(dir: &Path, st: &mut State) -> Result<()> {
    let Some(cfg) = read_opt_json(&dir.join("config.json"))? else {
        return Ok(());
    };
    for typ in st.types.clone() {
        let key = format!("{typ}_token_id");
        let v = cfg.get(&key).filter(|v| !v.is_null()).or_else(|| {
            cfg.get("text_config")
                .and_then(|t| t.get(&key))
                .filter(|v| !v.is_null())
        });
        st.set_id(typ, v)?;
    }
    Ok(())
}

/// `add_to_gguf`: only the types gguf-py's writer has a method for.
fn finish(entries: &mut Vec<(String, OwnedValue)>, st: State, chat_template: Option<String>) {
    if !st.merges.is_empty() {
        entries.push((
            "tokenizer.ggml.merges".into(),
            OwnedValue::string_array(st.merges),
        ));
    }
    for (typ, id) in st.ids {
        let key = match typ {
            "bos" | "eos" | "eot" | "eom" | "mask" => format!("tokenizer.ggml.{typ}_token_id"),
            "unk" => "tokenizer.ggml.unknown_token_id".into(),
            "sep" => "tokenizer.ggml.seperator_token_id".into(),
            "pad" => "tokenizer.ggml.padding_token_id".into(),
            _ => continue,
        };
        entries.push((key, OwnedValue::U32(id)));
    }
    for (typ, v) in st.add {
        if matches!(typ, "bos" | "eos" | "sep") {
            entries.push((
                format!("tokenizer.ggml.add_{typ}_token"),
                OwnedValue::Bool(v),
            ));
        }
    }
    if let Some(t) = chat_template {
        entries.push(("tokenizer.chat_template".into(), OwnedValue::string(t)));
    }
    if let Some(v) = st.lowercase {
        entries.push((
            "tokenizer.ggml.normalizer.lowercase".into(),
            OwnedValue::Bool(v),
        ));
    }
    if let Some(v) = st.strip_accents {
        entries.push((
            "tokenizer.ggml.normalizer.strip_accents".into(),
            OwnedValue::Bool(v),
        ));
    }
}

fn parse_normalizer(n: &Value, lowercase: &mut Option<bool>, strip: &mut Option<bool>) {
    match n.get("type").and_then(Value::as_str) {
        Some("Lowercase") => *lowercase = Some(true),
        Some("StripAccents") => *strip = Some(true),
        Some("BertNormalizer") => {
            if let Some(v) = n.get("lowercase") {
                *lowercase = v.as_bool();
            }
            if let Some(v) = n.get("strip_accents") {
                *strip = v.as_bool();
            }
        }
        Some("Sequence") => {
            for m in n
                .get("normalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                parse_normalizer(m, lowercase, strip);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(files: &[(&str, Value)]) -> Vec<(String, OwnedValue)> {
        let dir = tempfile::tempdir().unwrap();
        for (name, v) in files {
            std::fs::write(dir.path().join(name), v.to_string()).unwrap();
        }
        let mut entries = Vec::new();
        special_vocab(dir.path(), Some(1000), false, &mut entries).unwrap();
        entries
    }

    fn bert_tokenizer() -> Value {
        let added: Vec<Value> = [
            (0, "[PAD]"),
            (100, "[UNK]"),
            (101, "[CLS]"),
            (102, "[SEP]"),
            (103, "[MASK]"),
        ]
        .iter()
        .map(|(id, c)| serde_json::json!({"id": id, "content": c, "special": true}))
        .collect();
        serde_json::json!({
            "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]"}}, {"Sequence": {"id": "A"}},
                           {"SpecialToken": {"id": "[SEP]"}}],
                "pair": [{"SpecialToken": {"id": "[CLS]"}}, {"Sequence": {"id": "A"}},
                         {"SpecialToken": {"id": "[SEP]"}}, {"Sequence": {"id": "B"}},
                         {"SpecialToken": {"id": "[SEP]"}}]}
        })
    }

    /// all-MiniLM-L6-v2's files give what convert_hf_to_gguf.py wrote for it:
    /// [CLS]/[SEP] stand in for BOS/EOS, and no cls_token_id key exists.
    #[test]
    fn bert_cls_and_sep_become_bos_and_eos() {
        let tc = serde_json::json!({"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "cls_token": "[CLS]", "mask_token": "[MASK]", "do_lower_case": true});
        let cfg = serde_json::json!({"pad_token_id": 0});
        let got = run(&[
            ("tokenizer.json", bert_tokenizer()),
            ("tokenizer_config.json", tc),
            ("config.json", cfg),
        ]);
        let want = [
            ("tokenizer.ggml.bos_token_id", OwnedValue::U32(101)),
            ("tokenizer.ggml.eos_token_id", OwnedValue::U32(102)),
            ("tokenizer.ggml.unknown_token_id", OwnedValue::U32(100)),
            ("tokenizer.ggml.seperator_token_id", OwnedValue::U32(102)),
            ("tokenizer.ggml.padding_token_id", OwnedValue::U32(0)),
            ("tokenizer.ggml.mask_token_id", OwnedValue::U32(103)),
            ("tokenizer.ggml.add_bos_token", OwnedValue::Bool(true)),
            ("tokenizer.ggml.add_eos_token", OwnedValue::Bool(true)),
            ("tokenizer.ggml.add_sep_token", OwnedValue::Bool(false)),
            (
                "tokenizer.ggml.normalizer.lowercase",
                OwnedValue::Bool(true),
            ),
        ];
        let want: Vec<(String, OwnedValue)> =
            want.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        assert_eq!(got, want);
    }

    /// XLM-R's `<s> A </s></s> B </s>` pair template sets add_sep.
    #[test]
    fn xlmr_pair_template_adds_sep() {
        let tok = serde_json::json!({
            "added_tokens": [{"id": 0, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true}],
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "</s>"}}],
                "pair": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "</s>"}},
                         {"SpecialToken": {"id": "</s>"}}, {"Sequence": {"id": "B"}}, {"SpecialToken": {"id": "</s>"}}]}
        });
        let tc = serde_json::json!({"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>"});
        let got = run(&[("tokenizer.json", tok), ("tokenizer_config.json", tc)]);
        assert!(got.contains(&(
            "tokenizer.ggml.add_sep_token".into(),
            OwnedValue::Bool(true)
        )));
        assert!(got.contains(&(
            "tokenizer.ggml.seperator_token_id".into(),
            OwnedValue::U32(2)
        )));
    }

    /// A trailing special token other than eos_token (Qwen3-Embedding's
    /// <|endoftext|>) becomes EOS and the old one EOT.
    #[test]
    fn appended_token_becomes_eos() {
        let tok = serde_json::json!({
            "added_tokens": [{"id": 7, "content": "<|endoftext|>", "special": true}, {"id": 8, "content": "<|im_end|>", "special": true}],
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "<|endoftext|>"}}]}
        });
        let tc = serde_json::json!({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"});
        let got = run(&[("tokenizer.json", tok), ("tokenizer_config.json", tc)]);
        let want: Vec<(String, OwnedValue)> = [
            ("tokenizer.ggml.eos_token_id", OwnedValue::U32(7)),
            ("tokenizer.ggml.padding_token_id", OwnedValue::U32(7)),
            ("tokenizer.ggml.eot_token_id", OwnedValue::U32(8)),
            ("tokenizer.ggml.add_eos_token", OwnedValue::Bool(true)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
    }
}
