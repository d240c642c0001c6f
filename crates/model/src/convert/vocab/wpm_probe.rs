//! `tokenizer.ggml.pre` for WordPiece vocabularies: the Python converter
//! hashes the ids Hugging Face's tokenizer gives the probe text, so this
//! module encodes that one fixed text the way `tokenizers` does
//! (BertNormalizer, BertPreTokenizer, WordPiece, the post-processor's special
//! tokens) and looks the hash up in the converter's table.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use unicode_general_category::{GeneralCategory as G, get_general_category};
use unicode_normalization::UnicodeNormalization;

use super::pre_hash::{KNOWN, PROBE};
use crate::convert::{Error, Result};

/// The llama.cpp pre-tokenizer name for a WordPiece `tokenizer.json`.
pub(super) fn wordpiece_pre(tok: &Value) -> Result<&'static str> {
    let hash = probe_hash(tok)?;
    KNOWN
        .iter()
        .find(|(h, _)| *h == hash)
        .map(|(_, name)| *name)
        .ok_or_else(|| {
            Error::Tokenizer(format!(
                "tokenizer.json: the WordPiece pre-tokenizer was not recognised (probe hash {hash}); \
                 the pinned convert_hf_to_gguf.py refuses it too"
            ))
        })
}

/// The hex SHA-256 of Python's `str(token_ids)` for the probe text.
fn probe_hash(tok: &Value) -> Result<String> {
    let ids = encode_probe(tok)?;
    let text = format!(
        "[{}]",
        ids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn bad(what: &str) -> Error {
    Error::Tokenizer(format!("tokenizer.json: {what}"))
}

/// The probe text's ids, special tokens included (`tokenizer.encode(chktxt)`).
fn encode_probe(tok: &Value) -> Result<Vec<u32>> {
    let model = tok.get("model").ok_or_else(|| bad("no model"))?;
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no model.vocab"))?;
    let id_of = |t: &str| -> Option<u32> {
        vocab
            .get(t)
            .and_then(Value::as_u64)
            .and_then(|i| u32::try_from(i).ok())
    };
    let unk = model
        .get("unk_token")
        .and_then(Value::as_str)
        .unwrap_or("[UNK]");
    let unk_id =
        id_of(unk).ok_or_else(|| bad(&format!("unk_token {unk:?} is not in the vocabulary")))?;
    let prefix = model
        .get("continuing_subword_prefix")
        .and_then(Value::as_str)
        .unwrap_or("##");
    let max_chars = model
        .get("max_input_chars_per_word")
        .and_then(Value::as_u64)
        .unwrap_or(100) as usize;
    let norm = normalizer(tok.get("normalizer").unwrap_or(&Value::Null))?;
    match tok
        .get("pre_tokenizer")
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
    {
        Some("BertPreTokenizer") => {}
        other => {
            return Err(Error::Unsupported(format!(
                "tokenizer.json: WordPiece with pre_tokenizer {other:?} is not supported \
                 (BertPreTokenizer is)"
            )));
        }
    }
    let text = norm.apply(PROBE);
    let mut ids = Vec::new();
    for word in split_words(&text) {
        wordpiece(&word, max_chars, prefix, unk_id, &id_of, &mut ids);
    }
    let (first, last) = post_processor_specials(tok)?;
    Ok(first.into_iter().chain(ids).chain(last).collect())
}

/// BertNormalizer's switches.
struct Normalizer {
    clean_text: bool,
    chinese_chars: bool,
    strip_accents: bool,
    lowercase: bool,
}

fn normalizer(n: &Value) -> Result<Normalizer> {
    if n.get("type").and_then(Value::as_str) != Some("BertNormalizer") {
        return Err(Error::Unsupported(format!(
            "tokenizer.json: WordPiece with normalizer {n} is not supported (BertNormalizer is)"
        )));
    }
    let flag = |k: &str, default: bool| n.get(k).and_then(Value::as_bool).unwrap_or(default);
    let lowercase = flag("lowercase", true);
    Ok(Normalizer {
        clean_text: flag("clean_text", true),
        chinese_chars: flag("handle_chinese_chars", true),
        // null means "as lowercase".
        strip_accents: n
            .get("strip_accents")
            .and_then(Value::as_bool)
            .unwrap_or(lowercase),
        lowercase,
    })
}

fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r')
        && matches!(
            get_general_category(c),
            G::Control | G::Format | G::Unassigned | G::PrivateUse | G::Surrogate
        )
}

fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(
            get_general_category(c),
            G::ConnectorPunctuation
                | G::DashPunctuation
                | G::ClosePunctuation
                | G::FinalPunctuation
                | G::InitialPunctuation
                | G::OtherPunctuation
                | G::OpenPunctuation
        )
}

impl Normalizer {
    /// The normalized text (accent stripping: NFD, then no nonspacing marks).
    fn apply(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            if self.clean_text {
                if c == '\0' || c == '\u{fffd}' || is_control(c) {
                    continue;
                }
                if c.is_whitespace() {
                    out.push(' ');
                    continue;
                }
            }
            if self.chinese_chars && is_chinese(c) {
                out.push(' ');
                out.push(c);
                out.push(' ');
                continue;
            }
            out.push(c);
        }
        if self.strip_accents {
            out = out
                .nfd()
                .filter(|&c| get_general_category(c) != G::NonspacingMark)
                .collect();
        }
        if self.lowercase {
            out = out.to_lowercase();
        }
        out
    }
}

/// BertPreTokenizer: whitespace-separated words, each punctuation character alone.
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_whitespace() || is_punct(c) {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            if !c.is_whitespace() {
                words.push(c.to_string());
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Greedy longest-match-first WordPiece of one word.
fn wordpiece(
    word: &str,
    max_chars: usize,
    prefix: &str,
    unk: u32,
    id_of: &dyn Fn(&str) -> Option<u32>,
    out: &mut Vec<u32>,
) {
    if word.chars().count() > max_chars {
        out.push(unk);
        return;
    }
    let bounds: Vec<usize> = word
        .char_indices()
        .map(|(i, _)| i)
        .chain([word.len()])
        .collect();
    let mut pieces = Vec::new();
    let mut start = 0;
    while start + 1 < bounds.len() {
        let found = (start + 1..bounds.len()).rev().find_map(|end| {
            let sub = &word[bounds[start]..bounds[end]];
            let id = if start > 0 {
                id_of(&format!("{prefix}{sub}"))
            } else {
                id_of(sub)
            };
            id.map(|id| (end, id))
        });
        match found {
            Some((end, id)) => {
                pieces.push(id);
                start = end;
            }
            None => {
                out.push(unk);
                return;
            }
        }
    }
    out.extend(pieces);
}

/// The special-token ids the post-processor puts around a single sequence.
fn post_processor_specials(tok: &Value) -> Result<(Vec<u32>, Vec<u32>)> {
    let Some(pp) = tok.get("post_processor").filter(|p| !p.is_null()) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let id = |v: &Value| -> Option<u32> { v.get(1)?.as_u64().and_then(|i| u32::try_from(i).ok()) };
    match pp.get("type").and_then(Value::as_str) {
        Some("BertProcessing") | Some("RobertaProcessing") => {
            let cls = pp
                .get("cls")
                .and_then(id)
                .ok_or_else(|| bad("post_processor without cls"))?;
            let sep = pp
                .get("sep")
                .and_then(id)
                .ok_or_else(|| bad("post_processor without sep"))?;
            Ok((vec![cls], vec![sep]))
        }
        Some("TemplateProcessing") => {
            let specials: Map<String, Value> = pp
                .get("special_tokens")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut first = Vec::new();
            let mut last = Vec::new();
            let mut seen_seq = false;
            for item in pp
                .get("single")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if item.get("Sequence").is_some() {
                    seen_seq = true;
                    continue;
                }
                let name = item
                    .get("SpecialToken")
                    .and_then(|s| s.get("id"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("unknown post_processor template item"))?;
                let ids = specials
                    .get(name)
                    .and_then(|s| s.get("ids"))
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad(&format!("post_processor has no ids for {name:?}")))?;
                let target = if seen_seq { &mut last } else { &mut first };
                for i in ids {
                    let i = i
                        .as_u64()
                        .and_then(|i| u32::try_from(i).ok())
                        .ok_or_else(|| bad("post_processor special token id is not a u32"))?;
                    target.push(i);
                }
            }
            Ok((first, last))
        }
        other => Err(Error::Unsupported(format!(
            "tokenizer.json: WordPiece with post_processor {other:?} is not supported"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_splits_like_bert() {
        let n = Normalizer {
            clean_text: true,
            chinese_chars: true,
            strip_accents: true,
            lowercase: true,
        };
        let text = n.apply("Б\u{200d}a\u{17b7}我x\tY's É");
        assert_eq!(text, "бa 我 x y's e");
        assert_eq!(split_words(&text), ["бa", "我", "x", "y", "'", "s", "e"]);
        // Sm and So characters stay inside words; ASCII symbols are punctuation.
        assert_eq!(split_words("a～b🚀=c"), ["a～b🚀", "=", "c"]);
    }

    /// A 68-token uncased WordPiece tokenizer.json; the expected ids and hash
    /// are what `tokenizers` 0.22 gives for the probe text with it.
    fn tiny_tokenizer() -> Value {
        let vocab = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "3", "##3", "33", "(", ")", "normal", "nor",
            "##mal", "apple", "app", "##le", "i", "'", "ve", "been", "told", "he", "s", "##s", "я",
            "на", "нещо", "б", "##ъ", "##л", "##г", "##а", "##р", "##с", "##к", "##и", "我", "天",
            "～", "re", "m", "d", "we", "a", "l", "##l", "-", "=", ".", "!", "?", "`", "\"", "ក",
            "##ា", "##ន", "you", "sure", "not", "tea", "like", "some", "make", "it", "there", ",",
            "1314151", "13", "##14",
        ];
        let vocab: Map<String, Value> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), Value::from(i)))
            .collect();
        serde_json::json!({
            "normalizer": {"type": "BertNormalizer", "clean_text": true,
                "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2]},
                                   "[SEP]": {"id": "[SEP]", "ids": [3]}}},
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                "vocab": vocab}
        })
    }

    #[test]
    fn probe_ids_and_hash_match_hugging_face() {
        let tok = tiny_tokenizer();
        #[rustfmt::skip]
        let want: [u32; 166] = [
            2, 1, 7, 9, 8, 1, 7, 1, 1, 1, 8, 1, 1, 4, 6, 6, 5, 6, 5, 5, 6, 5, 5, 5, 6, 5, 5, 5, 5,
            6, 5, 5, 5, 5, 5, 6, 5, 5, 5, 5, 5, 5, 4, 47, 4, 4, 47, 47, 4, 4, 47, 47, 47, 4, 1, 49,
            35, 1, 1, 12, 1, 1, 65, 36, 37, 45, 45, 45, 45, 45, 45, 46, 46, 46, 46, 46, 46, 46, 25,
            24, 26, 27, 28, 29, 30, 31, 32, 33, 34, 16, 16, 16, 16, 16, 16, 50, 50, 50, 50, 50, 50,
            50, 51, 51, 51, 51, 47, 47, 47, 47, 47, 47, 48, 48, 48, 48, 48, 48, 49, 49, 49, 49, 49,
            49, 15, 16, 17, 18, 16, 19, 20, 16, 21, 63, 64, 16, 38, 55, 56, 49, 16, 39, 57, 56, 15,
            16, 43, 44, 61, 62, 64, 16, 40, 55, 59, 60, 58, 49, 41, 16, 17, 42, 16, 43, 44, 3,
        ];
        assert_eq!(encode_probe(&tok).unwrap(), want);
        assert_eq!(
            probe_hash(&tok).unwrap(),
            "fa8d0e23abd874d097f50f6aab345191c8418375302cc1a854741ad15d740ae9"
        );
        // An unknown hash is refused, as the Python converter refuses it.
        let err = wordpiece_pre(&tok).unwrap_err().to_string();
        assert!(err.contains("not recognised"), "{err}");
    }

    #[test]
    fn other_normalizers_are_refused() {
        let mut tok = tiny_tokenizer();
        tok["normalizer"] = serde_json::json!({"type": "Lowercase"});
        assert!(encode_probe(&tok).is_err());
        let mut tok = tiny_tokenizer();
        tok["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"});
        assert!(encode_probe(&tok).is_err());
    }

    #[test]
    fn wordpiece_is_greedy_and_whole_word_unknown() {
        let vocab = ["un", "##aff", "##able", "[UNK]", "a"];
        let id_of = |t: &str| vocab.iter().position(|v| *v == t).map(|i| i as u32);
        let mut out = Vec::new();
        wordpiece("unaffable", 100, "##", 3, &id_of, &mut out);
        assert_eq!(out, [0, 1, 2]);
        out.clear();
        wordpiece("unaffablex", 100, "##", 3, &id_of, &mut out);
        assert_eq!(out, [3]);
        out.clear();
        wordpiece("aaa", 2, "##", 3, &id_of, &mut out);
        assert_eq!(out, [3]);
    }
}
