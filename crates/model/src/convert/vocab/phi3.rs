//! `Phi3MiniModel.set_vocab`: a SentencePiece vocabulary whose added tokens
//! (added_tokens.json, tokenizer_config.json's `added_tokens_decoder` and
//! tokenizer.json's `added_tokens`) are applied as Phi-3's converter does:
//! written as given, control only when marked special.

use std::path::Path;

use lamina_gguf::OwnedValue;
use serde_json::Value;

use super::{CONTROL, USER_DEFINED, piece_table, push_piece_table, read_opt_json};
use crate::convert::arch::Model;
use crate::convert::spm_proto;
use crate::convert::{Error, Result, io_err};

/// Whether tokenizer_config.json names the GPT-2 (byte-level BPE) tokenizer, as Phi-4 does.
pub(super) fn uses_gpt2(dir: &Path) -> Result<bool> {
    Ok(read_opt_json(&dir.join("tokenizer_config.json"))?
        .and_then(|tc| tc.get("tokenizer_class").cloned())
        .is_some_and(|c| c == "GPT2Tokenizer"))
}

pub(super) fn sentencepiece(
    dir: &Path,
    model: &Model,
    entries: &mut Vec<(String, OwnedValue)>,
) -> Result<usize> {
    let path = dir.join("tokenizer.model");
    if !path.is_file() {
        return Err(Error::Tokenizer(format!(
            "no tokenizer.model in {}: Phi-3 conversion needs the SentencePiece model",
            dir.display()
        )));
    }
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    let sp = spm_proto::parse(&bytes)?;
    let vocab_size = model.vocab_size(&["vocab_size"]).unwrap_or(sp.pieces.len());
    if vocab_size > 16 << 20 || sp.pieces.len() > vocab_size {
        return Err(Error::Config(format!(
            "config.json: vocab_size {vocab_size} does not fit tokenizer.model's {} pieces",
            sp.pieces.len()
        )));
    }
    let (mut tokens, mut scores, mut types) = piece_table(&sp, vocab_size, dir)?;
    let mut set = |id: usize, data: &Value, file: &str| -> Result<()> {
        let content = data
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Tokenizer(format!("{file}: added token {id} has no content")))?;
        if id >= vocab_size {
            return Err(Error::Tokenizer(format!(
                "{file}: added token {id} is outside the vocabulary of {vocab_size}"
            )));
        }
        tokens[id] = content.as_bytes().to_vec();
        scores[id] = -1000.0;
        let special = data
            .get("special")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        types[id] = if special { CONTROL } else { USER_DEFINED };
        Ok(())
    };
    if let Some(tc) = read_opt_json(&dir.join("tokenizer_config.json"))?
        && let Some(Value::Object(decoder)) = tc.get("added_tokens_decoder")
    {
        for (id, data) in decoder {
            let id = id.parse::<usize>().map_err(|_| {
                Error::Tokenizer(format!(
                    "tokenizer_config.json: added_tokens_decoder key {id:?} is not a token id"
                ))
            })?;
            set(id, data, "tokenizer_config.json")?;
        }
    }
    if let Some(tok) = read_opt_json(&dir.join("tokenizer.json"))? {
        for data in tok
            .get("added_tokens")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = data.get("id").and_then(Value::as_u64).ok_or_else(|| {
                Error::Tokenizer("tokenizer.json: an added token has no id".into())
            })?;
            set(id as usize, data, "tokenizer.json")?;
        }
    }
    push_piece_table(entries, (tokens, scores, types));
    Ok(vocab_size)
}
