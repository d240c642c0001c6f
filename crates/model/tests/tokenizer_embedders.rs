//! WordPiece and Unigram against each model's own Hugging Face tokenizer
//! (`tokenizers` 0.22.2) and llama.cpp's `llama-tokenize`, on the tricky
//! corpus: gold in testdata/tokenizer/hf/, made by make_hf_gold.py from
//! all-MiniLM-L6-v2's tokenizer.json, a cased WordPiece vocabulary and a
//! small XLM-R-style SentencePiece Unigram model. Also pairs, decoding and
//! hostile vocabularies.

use std::path::PathBuf;

use lamina_gguf::{Gguf, GgufBuilder, OwnedValue, ValueType};
use lamina_model::tokenizer::{Tokenizer, TokenizerError};
use serde_json::Value;

fn hf_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tokenizer/hf")
}

fn load(name: &str) -> (Tokenizer, Value) {
    load_from(&hf_dir().join(format!("{name}-vocab.gguf")), name)
}

fn load_from(gguf: &std::path::Path, name: &str) -> (Tokenizer, Value) {
    let g = Gguf::open(gguf).expect("open vocab GGUF");
    let tok = Tokenizer::from_gguf(&g).expect("build tokenizer");
    let text = std::fs::read_to_string(hf_dir().join(format!("gold-{name}.json"))).expect("gold");
    (tok, serde_json::from_str(&text).expect("parse gold"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Every corpus string gives HF's ids, except `like_lcpp` (strings whose
/// HF ids need a token the GGUF does not have), which give llama.cpp's;
/// llama.cpp's ids differ from HF exactly on `lcpp_differs` (the documented
/// departures) and match everywhere else. Strings are named by their first
/// 24 characters.
fn check(name: &str, lcpp_differs: &[&str], like_lcpp: &[&str]) {
    let (tok, gold) = load(name);
    check_with(&tok, &gold, name, lcpp_differs, like_lcpp);
}

fn check_with(
    tok: &Tokenizer,
    gold: &Value,
    name: &str,
    lcpp_differs: &[&str],
    like_lcpp: &[&str],
) {
    let mut bad = Vec::new();
    let mut differs = Vec::new();
    let cases = gold["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 74, "{name}: the corpus and the extra strings");
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let short = text.chars().take(24).collect::<String>();
        let got = tok.encode(text, true, true);
        let hf = ids(&case["hf"]);
        let lcpp = ids(&case["lcpp"]);
        let want = if like_lcpp.contains(&short.as_str()) {
            &lcpp
        } else {
            &hf
        };
        if got != *want {
            bad.push(format!("{text:?}\n  got {got:?}\n  hf  {hf:?}"));
        }
        if lcpp != hf {
            differs.push(short);
        }
        let decoded = String::from_utf8(tok.detokenize(&hf, false, false)).expect("utf-8");
        if decoded != case["decoded"].as_str().expect("decoded") {
            bad.push(format!(
                "decode {text:?}: {decoded:?} vs {}",
                case["decoded"]
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{name}: {} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert_eq!(
        differs, lcpp_differs,
        "{name}: where llama.cpp departs from HF"
    );
}

#[test]
fn minilm_matches_hf_and_llama_cpp() {
    check(
        "minilm",
        &[
            "한국어 텍스트",
            "नमस्ते दुनिया",
            "aaaaaaaaaaaaaaaaaaaaaaaa",
            "Mixed: English, français",
            // Extra strings: keycaps (llama.cpp drops the enclosing mark
            // U+20E3), over 100 characters, Devanagari, Hangul.
            "1\u{fe0f}\u{20e3} 2\u{fe0f}\u{20e3} #\u{fe0f}\u{20e3} *\u{fe0f}\u{20e3} keycaps",
            "xxxxxxxxxxxxxxxxxxxxxxxx",
            "हिन\u{94d}दी म\u{947}\u{902} क\u{94d}ष त\u{94d}र",
            "e\u{301}\u{323} \u{1100}\u{1161}\u{11a8} \u{d55c}\u{ae00} \u{e01}\u{e33}",
        ],
        &[],
    );
}

#[test]
fn cased_wordpiece_matches_hf_and_llama_cpp() {
    let long = ["aaaaaaaaaaaaaaaaaaaaaaaa", "xxxxxxxxxxxxxxxxxxxxxxxx"];
    check("bert-cased", &long, &[]);
}

#[test]
fn xlmr_unigram_matches_hf_and_llama_cpp() {
    // The pinned converter writes no `<mask>` (HF's last id holds a
    // `[PAD…]` filler), so "<mask>" in a text is ordinary text here.
    let mask = "<unused0> <mask> [multim";
    let combining = "e\u{301} a\u{300} o\u{308}\u{304} (combining acc";
    // Grapheme clusters mapped by their shortest prefix (HF) or longest.
    let clusters = "e\u{301}\u{323} \u{1100}\u{1161}\u{11a8} \u{d55c}\u{ae00} \u{e01}\u{e33}";
    check("xlmr-unigram", &[combining, mask, clusters], &[mask]);
}

/// XLM-R's real 250k-piece vocabulary as llama.cpp ships it (its
/// `models/ggml-vocab-nomic-bert-moe.gguf`, which `cargo xtask models` puts
/// in the models folder).
#[test]
fn xlmr_real_vocabulary_matches_hf_and_llama_cpp() {
    const NAME: &str = "ggml-vocab-nomic-bert-moe.gguf";
    let Some(path) = lamina_testkit::present(NAME) else {
        return;
    };
    let (tok, gold) = load_from(&path, "xlmr-real");
    check_with(&tok, &gold, "xlmr-real", XLMR_REAL_DIFFERS, &[]);
}

/// Where llama.cpp departs from HF on XLM-R's real vocabulary: grapheme
/// clusters mapped by their shortest prefix (HF) or longest (llama.cpp).
const XLMR_REAL_DIFFERS: &[&str] = &[
    "e\u{301} a\u{300} o\u{308}\u{304} (combining acc",
    "e\u{301}\u{323} \u{1100}\u{1161}\u{11a8} \u{d55c}\u{ae00} \u{e01}\u{e33}",
];

/// The cased vocabulary keeps case and accents; the uncased one folds both.
#[test]
fn case_follows_the_vocabulary() {
    let (cased, _) = load("bert-cased");
    let (uncased, _) = load("minilm");
    let text = "The Café";
    let pieces = |t: &Tokenizer| {
        let ids = t.encode(text, false, false);
        String::from_utf8(t.detokenize(&ids, false, false)).unwrap()
    };
    assert_eq!(pieces(&uncased), "the cafe");
    assert!(pieces(&cased).starts_with("The"), "{}", pieces(&cased));
}

#[test]
fn pairs_match_hf() {
    for name in ["minilm", "bert-cased", "xlmr-unigram"] {
        let (tok, gold) = load(name);
        for p in gold["pairs"].as_array().expect("pairs") {
            let (a, b) = (p["a"].as_str().unwrap(), p["b"].as_str().unwrap());
            let (got, segment_b) = tok.encode_pair(a, b);
            assert_eq!(got, ids(&p["ids"]), "{name}: {a:?} / {b:?}");
            let types: Vec<u32> = (0..got.len()).map(|i| u32::from(i >= segment_b)).collect();
            assert_eq!(
                types,
                ids(&p["type_ids"]),
                "{name}: type ids of {a:?} / {b:?}"
            );
        }
    }
}

#[test]
fn decoding_keeps_special_tokens_on_request() {
    let (tok, _) = load("minilm");
    let ids = tok.encode("Hello, world!", true, true);
    let text = String::from_utf8(tok.detokenize(&ids, false, true)).unwrap();
    assert_eq!(text, "[CLS] hello, world! [SEP]");
    let (tok, _) = load("xlmr-unigram");
    let ids = tok.encode("both", true, true);
    let text = String::from_utf8(tok.detokenize(&ids, false, true)).unwrap();
    assert_eq!(text, "<s> both</s>");
}

fn gguf(kvs: Vec<(&str, OwnedValue)>) -> Gguf<Vec<u8>> {
    let mut b = GgufBuilder::new();
    for (k, v) in kvs {
        b.set(k, v).unwrap();
    }
    Gguf::from_bytes(b.write_header(Vec::new()).unwrap().finish().unwrap()).unwrap()
}

fn ugm_kvs(charsmap: Option<Vec<u8>>) -> Vec<(&'static str, OwnedValue)> {
    let tokens = ["<s>", "<pad>", "</s>", "<unk>", "▁", "▁a", "b", "▁ab"];
    let mut kvs = vec![
        ("tokenizer.ggml.model", OwnedValue::string("t5")),
        ("tokenizer.ggml.tokens", OwnedValue::string_array(tokens)),
        (
            "tokenizer.ggml.scores",
            OwnedValue::f32_array([0.0, 0.0, 0.0, 0.0, -2.0, -1.0, -1.5, -1.0]),
        ),
        (
            "tokenizer.ggml.token_type",
            OwnedValue::i32_array([3, 3, 3, 2, 1, 1, 1, 1]),
        ),
        ("tokenizer.ggml.add_space_prefix", OwnedValue::Bool(true)),
        (
            "tokenizer.ggml.remove_extra_whitespaces",
            OwnedValue::Bool(true),
        ),
        ("tokenizer.ggml.unknown_token_id", OwnedValue::U32(3)),
    ];
    if let Some(map) = charsmap {
        kvs.push((
            "tokenizer.ggml.precompiled_charsmap",
            OwnedValue::Array(ValueType::U8, map.into_iter().map(OwnedValue::U8).collect()),
        ));
    }
    kvs
}

#[test]
fn unigram_without_charsmap() {
    let tok = Tokenizer::from_gguf(&gguf(ugm_kvs(None))).unwrap();
    // "▁ab" (-1) beats "▁a" + "b" (-2.5); unknown characters fuse into one.
    assert_eq!(tok.encode("ab  a", false, false), [7, 5]);
    assert_eq!(tok.encode("xyz b", false, false), [4, 3, 4, 6]);
    assert_eq!(tok.encode("  ", false, false), Vec::<u32>::new());
}

#[test]
fn hostile_charsmaps_are_errors() {
    let cases: [Vec<u8>; 4] = [
        vec![1, 2],
        // A trie size past the end.
        vec![200, 0, 0, 0, 1, 2, 3, 4],
        // A trie size that is not whole entries.
        vec![3, 0, 0, 0, 1, 2, 3, 4],
        // Replacement strings that are not UTF-8.
        vec![4, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0],
    ];
    for map in cases {
        let e = Tokenizer::from_gguf(&gguf(ugm_kvs(Some(map.clone())))).unwrap_err();
        assert!(matches!(e, TokenizerError::BadCharsmap(_)), "{map:?}: {e}");
    }
    // A trie whose indices point nowhere maps nothing and does not panic.
    let map = vec![
        8, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, b'x', 0,
    ];
    let tok = Tokenizer::from_gguf(&gguf(ugm_kvs(Some(map)))).unwrap();
    assert_eq!(tok.encode("ab", false, false), [7]);
}

#[test]
fn hostile_wordpiece_vocabularies_do_not_panic() {
    // Empty pieces, a piece far longer than any word, no [UNK] at all.
    let long = "▁".to_string() + &"x".repeat(100_000);
    let tokens = vec![
        "[PAD]".to_string(),
        String::new(),
        long,
        "▁a".into(),
        "b".into(),
    ];
    let tok = Tokenizer::from_gguf(&gguf(vec![
        ("tokenizer.ggml.model", OwnedValue::string("bert")),
        ("tokenizer.ggml.tokens", OwnedValue::string_array(tokens)),
        (
            "tokenizer.ggml.token_type",
            OwnedValue::i32_array([3, 1, 1, 1, 1]),
        ),
    ]))
    .unwrap();
    // Default ids of "bert" (101, 100, 102) are outside this vocabulary.
    assert_eq!(tok.encode("ab a zz", true, false), [3, 4, 3]);
    let huge = "x".repeat(200_000);
    assert!(tok.encode(&huge, true, false).is_empty());
}
