//! Tokenizer metadata: SentencePiece vocabularies from `tokenizer.model`,
//! byte-level BPE and WordPiece vocabularies from `tokenizer.json`, XLM-R's
//! `sentencepiece.bpe.model`, and gguf-py's
//! `SpecialVocab` (special ids, add_bos/add_eos, chat template).

use std::path::Path;

use lamina_gguf::{GgufBuilder, OwnedValue, ValueType};
use serde_json::Value;

use super::arch::{Arch, Model, read_json};
use super::spm_proto::{self, piece_type};
use super::{Error, Result, io_err};

mod bert;
mod phi3;
mod pre;
mod pre_hash;
mod special;
mod wpm_probe;

use pre::bpe_pre;

/// config.json's `vocab_size` (else the number of ids), checked to hold
/// every id of tokenizer.json and to be a size worth allocating for.
fn vocab_size(model: &Model, by_id: &std::collections::BTreeMap<usize, String>) -> Result<usize> {
    let max_id = by_id.keys().next_back().copied().unwrap_or(0);
    let vocab_size = model.vocab_size(&["vocab_size"]).unwrap_or(by_id.len());
    if max_id >= vocab_size || vocab_size > crate::tokenizer::MAX_VOCAB {
        return Err(Error::Tokenizer(format!(
            "tokenizer.json has token id {max_id}, but config.json says vocab_size is {vocab_size}"
        )));
    }
    Ok(vocab_size)
}

/// tokenizer.json's `added_tokens` with an id and content: (id, content,
/// the entry for its other fields).
fn added_tokens(tok: &Value) -> impl Iterator<Item = (usize, &str, &Value)> {
    tok.get("added_tokens")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let id = a.get("id").and_then(Value::as_u64)?;
            let content = a.get("content").and_then(Value::as_str)?;
            Some((usize::try_from(id).ok()?, content, a))
        })
}
use special::special_vocab;

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
        Arch::Bert | Arch::NomicBert => {
            n_tokens = if model.hf_arch.starts_with("XLMRoberta") {
                bert::xlmr_unigram(dir, model, &mut entries)?
            } else {
                bert::wordpiece(dir, model, &mut entries)?
            };
            special_vocab(dir, Some(n_tokens), false, &mut entries)?;
        }
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
    push_pieces(entries, "llama", table);
}

/// `tokenizer.ggml.model` = `model`, then the pieces, scores and types.
fn push_pieces(entries: &mut Vec<(String, OwnedValue)>, model: &str, table: PieceTable) {
    let (tokens, scores, types) = table;
    entries.push(("tokenizer.ggml.model".into(), OwnedValue::string(model)));
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
    for (id, content, a) in added_tokens(&tok) {
        by_id.insert(id, content.to_string());
        let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
        let normalized = a
            .get("normalized")
            .and_then(Value::as_bool)
            .unwrap_or(!special);
        added.insert(id, (special, normalized));
    }
    let vocab_size = vocab_size(model, &by_id)?;
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
