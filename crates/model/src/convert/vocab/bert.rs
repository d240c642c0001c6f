//! Encoder vocabularies (`conversion/bert.py`): WordPiece from
//! `tokenizer.json` rewritten to llama.cpp's phantom-space form
//! (`BertModel.set_vocab`), and XLM-R's SentencePiece Unigram model
//! (`_xlmroberta_set_vocab`, tokenizer model "t5").

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use lamina_gguf::{OwnedValue, ValueType};
use serde_json::Value;

use super::spm_proto::{self, piece_type};
use super::{
    CONTROL, NORMAL, UNUSED, USER_DEFINED, added_tokens, bytes_array, looks_special, push_pieces,
    read_opt_json, vocab_size, wpm_probe::wordpiece_pre,
};
use crate::convert::arch::Model;
use crate::convert::{Error, Result, io_err};

/// `tokenizer.ggml.token_type_count`: the rows of the token-type embedding.
fn token_type_count(model: &Model) -> Result<OwnedValue> {
    let n = model
        .hparams
        .get("type_vocab_size")
        .map(|v| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    Error::Config(format!("config.json: type_vocab_size {v} is not a u32"))
                })
        })
        .transpose()?
        .unwrap_or(1);
    Ok(OwnedValue::U32(n))
}

/// The llama.cpp form of a WordPiece token: continuation pieces lose `##`,
/// word-initial pieces gain `▁`, control tokens stay as they are.
pub(super) fn phantom(token: &str, toktype: i32) -> String {
    if toktype == CONTROL {
        token.to_string()
    } else if let Some(rest) = token.strip_prefix("##") {
        rest.to_string()
    } else {
        format!("\u{2581}{token}")
    }
}

/// `get_vocab_base` for a WordPiece `tokenizer.json`, then `BertModel.set_vocab`.
pub(super) fn wordpiece(
    dir: &Path,
    model: &Model,
    entries: &mut Vec<(String, OwnedValue)>,
) -> Result<usize> {
    let path = dir.join("tokenizer.json");
    let tok = read_opt_json(&path)?.ok_or_else(|| {
        Error::Tokenizer(format!(
            "no tokenizer.json in {}: BERT conversion reads the WordPiece vocabulary from it",
            dir.display()
        ))
    })?;
    let m = tok.get("model");
    if m.and_then(|m| m.get("type")).and_then(Value::as_str) != Some("WordPiece") {
        return Err(Error::Tokenizer(
            "tokenizer.json: this model needs a WordPiece tokenizer (model.type \"WordPiece\")"
                .into(),
        ));
    }
    let vocab = m
        .and_then(|m| m.get("vocab"))
        .and_then(Value::as_object)
        .ok_or_else(|| Error::Tokenizer("tokenizer.json: no model.vocab".into()))?;
    let mut by_id: BTreeMap<usize, String> = BTreeMap::new();
    for (t, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            Error::Tokenizer(format!("tokenizer.json: token {t:?} has no integer id"))
        })?;
        by_id.insert(id as usize, t.clone());
    }
    // Added tokens: id -> special.
    let mut added: HashMap<usize, bool> = HashMap::new();
    for (id, content, a) in added_tokens(&tok) {
        by_id.insert(id, content.to_string());
        added.insert(
            id,
            a.get("special").and_then(Value::as_bool).unwrap_or(false),
        );
    }
    let vocab_size = vocab_size(model, &by_id)?;
    let pre = wordpiece_pre(&tok)?;
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for i in 0..vocab_size {
        let (t, ty) = match by_id.get(&i) {
            None => (format!("[PAD{i}]"), UNUSED),
            Some(t) => match added.get(&i) {
                Some(&special) if special || looks_special(t) => (t.clone(), CONTROL),
                Some(_) => (t.replace('\u{2581}', " "), USER_DEFINED),
                None => (t.clone(), NORMAL),
            },
        };
        tokens.push(phantom(&t, ty).into_bytes());
        types.push(ty);
    }
    entries.push((
        "tokenizer.ggml.token_type_count".into(),
        token_type_count(model)?,
    ));
    entries.push(("tokenizer.ggml.model".into(), OwnedValue::string("bert")));
    entries.push(("tokenizer.ggml.pre".into(), OwnedValue::string(pre)));
    entries.push(("tokenizer.ggml.tokens".into(), bytes_array(tokens)));
    entries.push((
        "tokenizer.ggml.token_type".into(),
        OwnedValue::i32_array(types),
    ));
    Ok(vocab_size)
}

/// `_xlmroberta_set_vocab` from `sentencepiece.bpe.model`: the SentencePiece
/// pieces realigned to the fairseq ids HF uses (`<s> <pad> </s> <unk>` first).
pub(super) fn xlmr_unigram(
    dir: &Path,
    model: &Model,
    entries: &mut Vec<(String, OwnedValue)>,
) -> Result<usize> {
    let path = dir.join("sentencepiece.bpe.model");
    if !path.is_file() {
        return Err(Error::Unsupported(format!(
            "no sentencepiece.bpe.model in {}: XLM-RoBERTa conversion reads the SentencePiece \
             model (the tokenizer.json-only route is not supported)",
            dir.display()
        )));
    }
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    let sp = spm_proto::parse(&bytes)?;
    if sp.model_type != 1 {
        return Err(Error::Tokenizer(format!(
            "sentencepiece.bpe.model: model_type {} is not Unigram (1)",
            sp.model_type
        )));
    }
    let vocab_size = model
        .vocab_size(&["vocab_size"])
        .unwrap_or(0)
        .max(sp.pieces.len());
    if vocab_size > 16 << 20 {
        return Err(Error::Config(format!(
            "config.json: vocab_size {vocab_size} is implausibly large"
        )));
    }
    if vocab_size < 4 {
        return Err(Error::Tokenizer(
            "sentencepiece.bpe.model: fewer than 4 pieces".into(),
        ));
    }
    let mut tokens: Vec<Vec<u8>> = (0..vocab_size)
        .map(|i| format!("[PAD{i}]").into_bytes())
        .collect();
    let mut scores = vec![-10000.0f32; vocab_size];
    let mut types = vec![UNUSED; vocab_size];
    for (id, p) in sp.pieces.iter().enumerate() {
        tokens[id] = p.piece.as_bytes().to_vec();
        scores[id] = p.score;
        types[id] = match p.kind {
            piece_type::UNKNOWN | piece_type::CONTROL | piece_type::UNUSED | piece_type::BYTE => {
                p.kind
            }
            _ => NORMAL,
        };
    }
    // The Python code drops the last entry while realigning, keeping the length.
    let head: [&[u8]; 4] = [b"<s>", b"<pad>", b"</s>", b"<unk>"];
    let tokens: Vec<Vec<u8>> = head
        .iter()
        .map(|t| t.to_vec())
        .chain(tokens[3..vocab_size - 1].iter().cloned())
        .collect();
    let scores: Vec<f32> = [0.0; 4]
        .into_iter()
        .chain(scores[3..vocab_size - 1].iter().copied())
        .collect();
    let types: Vec<i32> = [CONTROL, CONTROL, CONTROL, piece_type::UNKNOWN]
        .into_iter()
        .chain(types[3..vocab_size - 1].iter().copied())
        .collect();
    let n = tokens.len();
    push_pieces(entries, "t5", (tokens, scores, types));
    entries.push((
        "tokenizer.ggml.add_space_prefix".into(),
        OwnedValue::Bool(sp.add_dummy_prefix),
    ));
    entries.push((
        "tokenizer.ggml.token_type_count".into(),
        token_type_count(model)?,
    ));
    entries.push((
        "tokenizer.ggml.remove_extra_whitespaces".into(),
        OwnedValue::Bool(sp.remove_extra_whitespaces),
    ));
    if !sp.precompiled_charsmap.is_empty() {
        entries.push((
            "tokenizer.ggml.precompiled_charsmap".into(),
            OwnedValue::Array(
                ValueType::U8,
                sp.precompiled_charsmap
                    .into_iter()
                    .map(OwnedValue::U8)
                    .collect(),
            ),
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phantom_space_rewrite() {
        assert_eq!(phantom("hello", NORMAL), "\u{2581}hello");
        assert_eq!(phantom("##ing", NORMAL), "ing");
        assert_eq!(phantom("[CLS]", CONTROL), "[CLS]");
        assert_eq!(phantom("[PAD7]", UNUSED), "\u{2581}[PAD7]");
        assert_eq!(phantom("##", NORMAL), "");
    }
}

#[cfg(test)]
mod xlmr_tests {
    use super::*;
    use crate::convert::arch::test_model;

    /// A serialized SentencePiece piece (ModelProto field 1).
    fn piece(text: &str, score: f32, kind: u8) -> Vec<u8> {
        let mut p = vec![0x0a, text.len() as u8];
        p.extend_from_slice(text.as_bytes());
        p.push(0x15);
        p.extend_from_slice(&score.to_le_bytes());
        p.extend([0x18, kind]);
        let mut out = vec![0x0a, p.len() as u8];
        out.extend(p);
        out
    }

    #[test]
    fn unigram_pieces_are_realigned_to_fairseq_ids() {
        let (dir, m) = test_model(serde_json::json!({
            "architectures": ["XLMRobertaModel"], "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "vocab_size": 7, "type_vocab_size": 1
        }))
        .unwrap();
        let mut spm = piece("<unk>", 0.0, 2);
        spm.extend(piece("<s>", 0.0, 3));
        spm.extend(piece("</s>", 0.0, 3));
        spm.extend(piece("\u{2581}a", -1.5, 1));
        spm.extend(piece("b", -2.5, 1));
        // normalizer_spec { precompiled_charsmap: "\x05", remove_extra_whitespaces: false }
        spm.extend([0x1a, 0x05, 0x12, 0x01, 0x05, 0x20, 0x00]);
        std::fs::write(dir.path().join("sentencepiece.bpe.model"), spm).unwrap();
        let mut e = Vec::new();
        assert_eq!(xlmr_unigram(dir.path(), &m, &mut e).unwrap(), 7);
        let get = |k: &str| {
            e.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        let tokens: Vec<&[u8]> = [
            &b"<s>"[..],
            b"<pad>",
            b"</s>",
            b"<unk>",
            "\u{2581}a".as_bytes(),
            b"b",
            b"[PAD5]",
        ]
        .to_vec();
        assert_eq!(
            get("tokenizer.ggml.tokens"),
            bytes_array(tokens.iter().map(|t| t.to_vec()).collect())
        );
        assert_eq!(
            get("tokenizer.ggml.scores"),
            OwnedValue::f32_array([0.0, 0.0, 0.0, 0.0, -1.5, -2.5, -10000.0])
        );
        assert_eq!(
            get("tokenizer.ggml.token_type"),
            OwnedValue::i32_array([3, 3, 3, 2, 1, 1, 5])
        );
        assert_eq!(get("tokenizer.ggml.model"), OwnedValue::string("t5"));
        assert_eq!(get("tokenizer.ggml.token_type_count"), OwnedValue::U32(1));
        assert_eq!(
            get("tokenizer.ggml.add_space_prefix"),
            OwnedValue::Bool(true)
        );
        assert_eq!(
            get("tokenizer.ggml.remove_extra_whitespaces"),
            OwnedValue::Bool(false)
        );
        assert_eq!(
            get("tokenizer.ggml.precompiled_charsmap"),
            OwnedValue::Array(ValueType::U8, vec![OwnedValue::U8(5)])
        );
    }
}
