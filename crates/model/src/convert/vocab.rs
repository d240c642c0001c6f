//! Tokenizer metadata: SentencePiece vocabularies from `tokenizer.model`,
//! byte-level BPE vocabularies from `tokenizer.json`, and gguf-py's
//! `SpecialVocab` (special ids, add_bos/add_eos, chat template).

use std::path::Path;

use lamina_gguf::{GgufBuilder, OwnedValue, ValueType};
use serde_json::{Map, Value};

use super::arch::{Arch, Model, read_json};
use super::spm_proto::{self, piece_type};
use super::{Error, Result, io_err};

mod phi3;
mod pre;

use pre::bpe_pre;

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// The vocabulary and the tokenizer metadata to write, in order.
pub struct Vocab {
    n_tokens: usize,
    entries: Vec<(String, OwnedValue)>,
}

impl Vocab {
    pub fn len(&self) -> usize {
        self.n_tokens
    }

    pub fn write(&self, b: &mut GgufBuilder, _model: &Model) -> Result<()> {
        for (k, v) in &self.entries {
            b.set(k.clone(), v.clone())?;
        }
        Ok(())
    }
}

fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<｜") && t.ends_with("｜>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

fn read_opt_json(path: &Path) -> Result<Option<Value>> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

fn bytes_array(items: Vec<Vec<u8>>) -> OwnedValue {
    OwnedValue::Array(
        ValueType::String,
        items.into_iter().map(OwnedValue::String).collect(),
    )
}

pub fn build(dir: &Path, model: &Model) -> Result<Vocab> {
    let mut entries = Vec::new();
    let n_tokens;
    let spm_path = dir.join("tokenizer.model");
    match model.arch {
        Arch::Gemma3 | Arch::GemmaEmbedding | Arch::Gemma2 => {
            if !spm_path.is_file() {
                return Err(Error::Tokenizer(format!(
                    "no tokenizer.model in {}: Gemma conversion needs the SentencePiece model",
                    dir.display()
                )));
            }
            n_tokens = sentencepiece(dir, model, &mut entries)?;
            special_vocab(dir, Some(n_tokens), false, &mut entries)?;
            entries.push((
                "tokenizer.ggml.add_space_prefix".into(),
                OwnedValue::Bool(false),
            ));
        }
        Arch::Qwen2 | Arch::Qwen3 => {
            if spm_path.is_file() {
                n_tokens = sentencepiece(dir, model, &mut entries)?;
                special_vocab(dir, Some(n_tokens), false, &mut entries)?;
            } else {
                n_tokens = bpe(dir, model, &mut entries)?;
                special_vocab(dir, None, true, &mut entries)?;
            }
        }
        Arch::Phi3 => {
            if phi3::uses_gpt2(dir)? {
                n_tokens = bpe(dir, model, &mut entries)?;
                special_vocab(dir, None, true, &mut entries)?;
            } else {
                n_tokens = phi3::sentencepiece(dir, model, &mut entries)?;
                special_vocab(dir, Some(n_tokens), false, &mut entries)?;
            }
        }
        Arch::Llama | Arch::Granite => {
            let tc = read_opt_json(&dir.join("tokenizer_config.json"))?;
            if let Some(p) = tc
                .as_ref()
                .and_then(|t| t.get("add_prefix_space"))
                .and_then(Value::as_bool)
            {
                entries.push((
                    "tokenizer.ggml.add_space_prefix".into(),
                    OwnedValue::Bool(p),
                ));
            }
            if spm_path.is_file() {
                n_tokens = sentencepiece(dir, model, &mut entries)?;
                special_vocab(dir, Some(n_tokens), false, &mut entries)?;
            } else {
                n_tokens = bpe(dir, model, &mut entries)?;
                special_vocab(dir, None, true, &mut entries)?;
            }
            if model.vocab_size(&["vocab_size"]) == Some(32016) {
                return Err(Error::Unsupported(
                    "CodeLlama vocabularies (32016 tokens) are not supported".into(),
                ));
            }
            if model.vocab_size(&["vocab_size"]) == Some(49152) {
                entries.retain(|(k, _)| k != "tokenizer.ggml.add_bos_token");
                entries.push((
                    "tokenizer.ggml.add_bos_token".into(),
                    OwnedValue::Bool(false),
                ));
            }
        }
    }
    Ok(Vocab { n_tokens, entries })
}

/// The keys of a SentencePiece vocabulary, in the Python converter's order.
pub(super) fn push_piece_table(entries: &mut Vec<(String, OwnedValue)>, table: PieceTable) {
    let (tokens, scores, types) = table;
    entries.push(("tokenizer.ggml.model".into(), OwnedValue::string("llama")));
    entries.push(("tokenizer.ggml.pre".into(), OwnedValue::string("default")));
    entries.push(("tokenizer.ggml.tokens".into(), bytes_array(tokens)));
    entries.push((
        "tokenizer.ggml.scores".into(),
        OwnedValue::f32_array(scores),
    ));
    entries.push((
        "tokenizer.ggml.token_type".into(),
        OwnedValue::i32_array(types),
    ));
}

/// Per id: token bytes, score and token type.
pub(super) type PieceTable = (Vec<Vec<u8>>, Vec<f32>, Vec<i32>);

/// Tokens, scores and types of `vocab_size` ids: the SentencePiece pieces,
/// `[PAD<i>]` past them, then `added_tokens.json` over them (the Python
/// converter's `_create_vocab_sentencepiece`).
pub(super) fn piece_table(
    sp: &spm_proto::SpmModel,
    vocab_size: usize,
    dir: &Path,
) -> Result<PieceTable> {
    let mut tokens: Vec<Vec<u8>> = (0..vocab_size)
        .map(|i| format!("[PAD{i}]").into_bytes())
        .collect();
    let mut scores = vec![-10000.0f32; vocab_size];
    let mut types = vec![UNUSED; vocab_size];
    for (id, p) in sp.pieces.iter().enumerate().take(vocab_size) {
        tokens[id] = p.piece.as_bytes().to_vec();
        scores[id] = p.score;
        types[id] = match p.kind {
            piece_type::UNKNOWN | piece_type::CONTROL | piece_type::UNUSED | piece_type::BYTE => {
                p.kind
            }
            _ => piece_type::NORMAL,
        };
    }
    if let Some(Value::Object(added)) = read_opt_json(&dir.join("added_tokens.json"))? {
        for (key, id) in added {
            let Some(id) = id.as_u64().map(|i| i as usize).filter(|&i| i < vocab_size) else {
                continue;
            };
            tokens[id] = key.into_bytes();
            scores[id] = -1000.0;
            types[id] = USER_DEFINED;
        }
    }
    Ok((tokens, scores, types))
}

/// `_create_vocab_sentencepiece` + the list part of `_set_vocab_sentencepiece`.
fn sentencepiece(
    dir: &Path,
    model: &Model,
    entries: &mut Vec<(String, OwnedValue)>,
) -> Result<usize> {
    let path = dir.join("tokenizer.model");
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    let sp = spm_proto::parse(&bytes)?;
    let vocab_size = model
        .vocab_size(&["vocab_size_per_layer_input", "vocab_size"])
        .filter(|&v| v > 0)
        .unwrap_or(sp.pieces.len());
    if vocab_size > 16 << 20 {
        return Err(Error::Config(format!(
            "config.json: vocab_size {vocab_size} is implausibly large"
        )));
    }
    let (mut tokens, mut scores, mut types) = piece_table(&sp, vocab_size, dir)?;
    if let Some(tc) = read_opt_json(&dir.join("tokenizer_config.json"))?
        && let Some(Value::Object(decoder)) = tc.get("added_tokens_decoder")
    {
        for (id, data) in decoder {
            let Ok(id) = id.parse::<usize>() else {
                return Err(Error::Tokenizer(format!(
                    "tokenizer_config.json: added_tokens_decoder key {id:?} is not a token id"
                )));
            };
            if id >= vocab_size {
                continue;
            }
            let Some(content) = data.get("content").and_then(Value::as_str) else {
                return Err(Error::Tokenizer(format!(
                    "tokenizer_config.json: added token {id} has no content"
                )));
            };
            let mut content = content.to_string();
            if data
                .get("special")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                || looks_special(&content)
            {
                types[id] = CONTROL;
            } else {
                content = content.replace('\u{2581}', " ");
                types[id] = USER_DEFINED;
            }
            scores[id] = -1000.0;
            tokens[id] = content.into_bytes();
        }
    }
    let n = tokens.len();
    push_piece_table(entries, (tokens, scores, types));
    Ok(n)
}

/// `get_vocab_base` + `_set_vocab_gpt2` (list part) for a byte-level BPE `tokenizer.json`.
fn bpe(dir: &Path, model: &Model, entries: &mut Vec<(String, OwnedValue)>) -> Result<usize> {
    let path = dir.join("tokenizer.json");
    let tok = read_opt_json(&path)?.ok_or_else(|| {
        Error::Tokenizer(format!(
            "no tokenizer.model or tokenizer.json in {}: the tokenizer files are needed",
            dir.display()
        ))
    })?;
    if tok
        .get("model")
        .and_then(|m| m.get("type"))
        .and_then(Value::as_str)
        != Some("BPE")
    {
        return Err(Error::Tokenizer(
            "tokenizer.json: only BPE tokenizers are supported without tokenizer.model".into(),
        ));
    }
    let vocab = tok
        .get("model")
        .and_then(|m| m.get("vocab"))
        .and_then(Value::as_object)
        .ok_or_else(|| Error::Tokenizer("tokenizer.json: no model.vocab".into()))?;
    let mut by_id: std::collections::BTreeMap<usize, String> = std::collections::BTreeMap::new();
    for (t, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            Error::Tokenizer(format!("tokenizer.json: token {t:?} has no integer id"))
        })?;
        by_id.insert(id as usize, t.clone());
    }
    let mut added: std::collections::HashMap<usize, (bool, bool)> = Default::default();
    for a in tok
        .get("added_tokens")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(id), Some(content)) = (
            a.get("id").and_then(Value::as_u64),
            a.get("content").and_then(Value::as_str),
        ) else {
            continue;
        };
        by_id.insert(id as usize, content.to_string());
        let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
        let normalized = a
            .get("normalized")
            .and_then(Value::as_bool)
            .unwrap_or(!special);
        added.insert(id as usize, (special, normalized));
    }
    let max_id = by_id.keys().next_back().copied().unwrap_or(0);
    let vocab_size = model.vocab_size(&["vocab_size"]).unwrap_or(by_id.len());
    if max_id >= vocab_size {
        return Err(Error::Tokenizer(format!(
            "tokenizer.json has token id {max_id}, but config.json says vocab_size is {vocab_size}"
        )));
    }
    let pre = bpe_pre(&tok)?;
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for i in 0..vocab_size {
        match by_id.get(&i) {
            None => {
                tokens.push(format!("[PAD{i}]").into_bytes());
                types.push(UNUSED);
            }
            Some(t) => match added.get(&i) {
                Some(&(special, _)) if special || looks_special(t) => {
                    tokens.push(t.clone().into_bytes());
                    types.push(CONTROL);
                }
                Some(_) => {
                    tokens.push(t.replace('\u{2581}', " ").into_bytes());
                    types.push(USER_DEFINED);
                }
                None => {
                    tokens.push(t.clone().into_bytes());
                    types.push(NORMAL);
                }
            },
        }
    }
    entries.push(("tokenizer.ggml.model".into(), OwnedValue::string("gpt2")));
    entries.push(("tokenizer.ggml.pre".into(), OwnedValue::string(pre)));
    entries.push(("tokenizer.ggml.tokens".into(), bytes_array(tokens)));
    entries.push((
        "tokenizer.ggml.token_type".into(),
        OwnedValue::i32_array(types),
    ));
    Ok(vocab_size)
}

const SPECIAL_TYPES: [&str; 7] = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];

fn special_key(typ: &str) -> String {
    match typ {
        "unk" => "tokenizer.ggml.unknown_token_id".into(),
        "sep" => "tokenizer.ggml.seperator_token_id".into(),
        "pad" => "tokenizer.ggml.padding_token_id".into(),
        t => format!("tokenizer.ggml.{t}_token_id"),
    }
}

fn token_content(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// gguf-py's `SpecialVocab(dir, load_merges, n_vocab).add_to_gguf(...)`.
fn special_vocab(
    dir: &Path,
    n_vocab: Option<usize>,
    load_merges: bool,
    entries: &mut Vec<(String, OwnedValue)>,
) -> Result<()> {
    let tok = read_opt_json(&dir.join("tokenizer.json"))?;
    let mut tc: Option<Map<String, Value>> =
        read_opt_json(&dir.join("tokenizer_config.json"))?.and_then(|v| v.as_object().cloned());
    let mut ids: Vec<(String, u32)> = Vec::new();
    let mut add: Vec<(String, bool)> = Vec::new();
    let mut merges: Vec<String> = Vec::new();
    let mut lowercase = None;
    let mut strip_accents = None;
    let set_add = |add: &mut Vec<(String, bool)>, typ: &str, v: bool, overwrite: bool| {
        if let Some(e) = add.iter_mut().find(|(t, _)| t == typ) {
            if overwrite {
                e.1 = v;
            }
        } else {
            add.push((typ.to_string(), v));
        }
    };
    let set_id = |ids: &mut Vec<(String, u32)>, typ: &str, id: Option<i64>| -> Result<()> {
        let Some(id) = id else { return Ok(()) };
        if id < 0 {
            return Err(Error::Tokenizer(format!("invalid {typ} token id {id}")));
        }
        if n_vocab.is_none_or(|n| (id as u64) < n as u64) && !ids.iter().any(|(t, _)| t == typ) {
            ids.push((typ.to_string(), id as u32));
        }
        Ok(())
    };
    let mut added_tokens: Vec<Value> = Vec::new();
    if let Some(tok) = &tok {
        if load_merges && let Some(Value::Array(m)) = tok.get("model").and_then(|m| m.get("merges"))
        {
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
        }
        if let Some(n) = tok.get("normalizer").filter(|n| !n.is_null()) {
            parse_normalizer(n, &mut lowercase, &mut strip_accents);
        }
        added_tokens = tok
            .get("added_tokens")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let special_bos = tc.as_ref().and_then(|t| token_content(t.get("bos_token")));
        let special_eos = tc.as_ref().and_then(|t| token_content(t.get("eos_token")));
        if let Some(pp) = tok.get("post_processor").filter(|p| !p.is_null()) {
            let procs: Vec<Value> = pp
                .get("processors")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_else(|| vec![pp.clone()]);
            for p in procs {
                match p.get("type").and_then(Value::as_str) {
                    Some("ByteLevel") => {
                        set_add(&mut add, "bos", false, false);
                        set_add(&mut add, "eos", false, false);
                    }
                    Some("TemplateProcessing") => {
                        let single = p
                            .get("single")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        let sid = |v: &Value| {
                            v.get("SpecialToken")
                                .and_then(|s| s.get("id"))
                                .and_then(Value::as_str)
                                .map(str::to_string)
                        };
                        if single.len() > 1 {
                            let first = sid(&single[0]);
                            let last = sid(&single[single.len() - 1]);
                            if let Some(f) = &first {
                                if tc.is_none() || special_bos.as_deref() == Some(f.as_str()) {
                                    set_add(&mut add, "bos", true, true);
                                } else {
                                    return Err(Error::Unsupported(format!(
                                        "tokenizer.json: unusual leading special token {f:?}"
                                    )));
                                }
                            }
                            if let Some(l) = &last {
                                if tc.is_none() || special_eos.as_deref() == Some(l.as_str()) {
                                    set_add(&mut add, "eos", true, true);
                                } else {
                                    return Err(Error::Unsupported(format!(
                                        "tokenizer.json: unusual trailing special token {l:?}"
                                    )));
                                }
                            }
                            let pair = p
                                .get("pair")
                                .and_then(Value::as_array)
                                .cloned()
                                .unwrap_or_default();
                            if !pair.is_empty() {
                                let start = usize::from(first.is_some() && sid(&pair[0]) == first);
                                let stop = pair.len()
                                    - usize::from(
                                        last.is_some() && sid(&pair[pair.len() - 1]) == last,
                                    );
                                let inner = if start < stop {
                                    &pair[start..stop]
                                } else {
                                    &[][..]
                                };
                                let seq = |v: &Value| {
                                    v.get("Sequence")
                                        .and_then(|s| s.get("id"))
                                        .and_then(Value::as_str)
                                        .map(str::to_string)
                                };
                                if inner.len() > 2
                                    && seq(&inner[0]).as_deref() == Some("A")
                                    && seq(&inner[inner.len() - 1]).as_deref() == Some("B")
                                {
                                    let mid = &inner[1..inner.len() - 1];
                                    let special_sep =
                                        tc.as_ref().and_then(|t| token_content(t.get("sep_token")));
                                    let is_sep = |e: &Option<String>| {
                                        e.is_some() && (*e == special_sep || *e == special_eos)
                                    };
                                    let mut add_sep = false;
                                    let e0 = sid(&mid[0]);
                                    if is_sep(&e0) && last.is_none() {
                                        add_sep = true;
                                    }
                                    if mid.len() == 2 && is_sep(&sid(&mid[1])) {
                                        add_sep = true;
                                    }
                                    set_add(&mut add, "sep", add_sep, true);
                                }
                            }
                        }
                    }
                    Some("RobertaProcessing") => {
                        return Err(Error::Unsupported(
                            "tokenizer.json: RobertaProcessing is not supported".into(),
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
    let Some(tcm) = tc.as_mut() else {
        return finish_special(
            entries,
            merges,
            ids,
            add,
            None,
            lowercase,
            strip_accents,
            dir,
            n_vocab,
            load_merges,
        );
    };
    let mut chat_template = None;
    let jinja = dir.join("chat_template.jinja");
    let alt = if jinja.is_file() {
        Some(Value::String(
            std::fs::read_to_string(&jinja).map_err(io_err(&jinja))?,
        ))
    } else {
        read_opt_json(&dir.join("chat_template.json"))?
            .and_then(|v| v.get("chat_template").cloned())
    };
    match tcm.get("chat_template").cloned().or(alt) {
        Some(Value::String(s)) => chat_template = Some(s),
        Some(Value::Null) | None => {}
        Some(_) => {
            return Err(Error::Unsupported(
                "tokenizer_config.json: lists of named chat templates are not supported yet".into(),
            ));
        }
    }
    for typ in SPECIAL_TYPES {
        if let Some(Value::Bool(v)) = tcm.get(&format!("add_{typ}_token")) {
            set_add(&mut add, typ, *v, false);
        }
        let Some(content) = token_content(tcm.get(&format!("{typ}_token"))) else {
            continue;
        };
        let id = added_tokens
            .iter()
            .find(|a| a.get("content").and_then(Value::as_str) == Some(content.as_str()))
            .and_then(|a| a.get("id"))
            .and_then(Value::as_i64);
        set_id(&mut ids, typ, id)?;
    }
    finish_special(
        entries,
        merges,
        ids,
        add,
        chat_template,
        lowercase,
        strip_accents,
        dir,
        n_vocab,
        load_merges,
    )
}

#[allow(clippy::too_many_arguments)]
fn finish_special(
    entries: &mut Vec<(String, OwnedValue)>,
    merges: Vec<String>,
    mut ids: Vec<(String, u32)>,
    add: Vec<(String, bool)>,
    chat_template: Option<String>,
    lowercase: Option<bool>,
    strip_accents: Option<bool>,
    dir: &Path,
    n_vocab: Option<usize>,
    load_merges: bool,
) -> Result<()> {
    // _try_load_from_config_json
    if let Some(cfg) = read_opt_json(&dir.join("config.json"))? {
        for typ in SPECIAL_TYPES {
            let key = format!("{typ}_token_id");
            let v = cfg
                .get(&key)
                .or_else(|| cfg.get("text_config").and_then(|t| t.get(&key)));
            if let Some(id) = v.and_then(Value::as_i64) {
                if id < 0 {
                    return Err(Error::Tokenizer(format!("config.json: invalid {key} {id}")));
                }
                if n_vocab.is_none_or(|n| (id as u64) < n as u64)
                    && !ids.iter().any(|(t, _)| t == typ)
                {
                    ids.push((typ.to_string(), id as u32));
                }
            }
        }
    }
    let _ = load_merges;
    if !merges.is_empty() {
        entries.push((
            "tokenizer.ggml.merges".into(),
            OwnedValue::string_array(merges),
        ));
    }
    for (typ, id) in ids {
        entries.push((special_key(&typ), OwnedValue::U32(id)));
    }
    for (typ, v) in add {
        if matches!(typ.as_str(), "bos" | "eos" | "sep") {
            entries.push((
                format!("tokenizer.ggml.add_{typ}_token"),
                OwnedValue::Bool(v),
            ));
        }
    }
    if let Some(t) = chat_template {
        entries.push(("tokenizer.chat_template".into(), OwnedValue::string(t)));
    }
    if let Some(v) = lowercase {
        entries.push((
            "tokenizer.ggml.normalizer.lowercase".into(),
            OwnedValue::Bool(v),
        ));
    }
    if let Some(v) = strip_accents {
        entries.push((
            "tokenizer.ggml.normalizer.strip_accents".into(),
            OwnedValue::Bool(v),
        ));
    }
    Ok(())
}

fn parse_normalizer(n: &Value, lowercase: &mut Option<bool>, strip: &mut Option<bool>) {
    match n.get("type").and_then(Value::as_str) {
        Some("Lowercase") => *lowercase = Some(true),
        Some("StripAccents") => *strip = Some(true),
        Some("BertNormalizer") => {
            if let Some(v) = n.get("lowercase").and_then(Value::as_bool) {
                *lowercase = Some(v);
            }
            if let Some(v) = n.get("strip_accents").and_then(Value::as_bool) {
                *strip = Some(v);
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
