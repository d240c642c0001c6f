//! Tokenizers built from small synthetic GGUF files: llama.cpp's defaults,
//! and hostile metadata that must give errors, never panics.

use lamina_gguf::{Gguf, GgufBuilder, OwnedValue, ValueType};
use lamina_model::tokenizer::{Tokenizer, TokenizerError};

fn gguf(kvs: Vec<(&str, OwnedValue)>) -> Gguf<Vec<u8>> {
    let mut b = GgufBuilder::new();
    for (k, v) in kvs {
        b.set(k, v).unwrap();
    }
    let bytes = b.write_header(Vec::new()).unwrap().finish().unwrap();
    Gguf::from_bytes(bytes).unwrap()
}

/// A tiny SentencePiece vocabulary: unk, bos, eos, a few pieces, and byte
/// tokens for "\n" and 0xE2 0x82 0xAC ("€").
fn spm_kvs() -> Vec<(&'static str, OwnedValue)> {
    let tokens = [
        "<unk>", "<s>", "</s>", "▁", "a", "b", "ab", "▁ab", "<0x0A>", "<0xE2>", "<0x82>", "<0xAC>",
        "<ctrl>",
    ];
    let scores = [
        0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    let types = [2, 3, 3, 1, 1, 1, 1, 1, 6, 6, 6, 6, 3];
    vec![
        ("tokenizer.ggml.model", OwnedValue::string("llama")),
        ("tokenizer.ggml.tokens", OwnedValue::string_array(tokens)),
        ("tokenizer.ggml.scores", OwnedValue::f32_array(scores)),
        ("tokenizer.ggml.token_type", OwnedValue::i32_array(types)),
    ]
}

fn bpe_kvs() -> Vec<(&'static str, OwnedValue)> {
    let tokens = ["a", "b", "Ġ", "ab", "Ġab", "<|eot|>", "Ċ"];
    vec![
        ("tokenizer.ggml.model", OwnedValue::string("gpt2")),
        ("tokenizer.ggml.pre", OwnedValue::string("gpt-2")),
        ("tokenizer.ggml.tokens", OwnedValue::string_array(tokens)),
        (
            "tokenizer.ggml.token_type",
            OwnedValue::i32_array([1, 1, 1, 1, 1, 3, 1]),
        ),
        (
            "tokenizer.ggml.merges",
            OwnedValue::string_array(["a b", "Ġ ab"]),
        ),
    ]
}

fn with(
    mut kvs: Vec<(&'static str, OwnedValue)>,
    key: &'static str,
    v: OwnedValue,
) -> Vec<(&'static str, OwnedValue)> {
    kvs.retain(|(k, _)| *k != key);
    kvs.push((key, v));
    kvs
}

fn without(mut kvs: Vec<(&'static str, OwnedValue)>, key: &str) -> Vec<(&'static str, OwnedValue)> {
    kvs.retain(|(k, _)| *k != key);
    kvs
}

fn build(kvs: Vec<(&'static str, OwnedValue)>) -> Result<Tokenizer, TokenizerError> {
    Tokenizer::from_gguf(&gguf(kvs))
}

#[test]
fn spm_defaults_and_merges() {
    let t = build(spm_kvs()).unwrap();
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(2)));
    assert!(t.add_bos() && !t.add_eos());
    // add_space_prefix defaults to true for SPM: "ab ab" -> "▁ab▁ab".
    assert_eq!(t.encode("ab ab", true, false), [1, 7, 7]);
    // Unknown characters fall back to bytes; missing byte tokens to <unk>.
    assert_eq!(t.encode("€\n", false, false), [3, 9, 10, 11, 8]);
    assert_eq!(t.encode("c", false, false), [3, 0]);
    assert_eq!(t.decode(&[1, 7, 7, 9, 10, 11]), " ab ab€");
    assert_eq!(t.detokenize(&[7, 7], false, false), b"ab ab");
    // Control tokens split the text only with parse_special, and a fragment
    // after one gets the space prefix again.
    assert_eq!(t.encode("ab<ctrl>ab", false, true), [7, 12, 7]);
}

#[test]
fn bpe_merges_by_rank() {
    let t = build(bpe_kvs()).unwrap();
    assert!(!t.add_bos());
    assert_eq!(t.encode("ab ab", true, false), [3, 4]);
    assert_eq!(t.encode("ab<|eot|>", false, true), [3, 5]);
    assert_eq!(t.decode(&[3, 4, 6]), "ab ab\n");
}

#[test]
fn unsupported_model_is_named() {
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.model",
        OwnedValue::string("rwkv"),
    ))
    .unwrap_err();
    assert!(
        matches!(&e, TokenizerError::UnsupportedModel(m) if m == "rwkv"),
        "{e}"
    );
    assert!(e.to_string().contains("\"rwkv\""));
    let e = build(with(
        bpe_kvs(),
        "tokenizer.ggml.pre",
        OwnedValue::string("nonesuch"),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::UnsupportedPre(_)), "{e}");
}

#[test]
fn missing_and_mistyped_keys() {
    assert!(build(without(spm_kvs(), "tokenizer.ggml.model")).is_err());
    assert!(build(without(spm_kvs(), "tokenizer.ggml.tokens")).is_err());
    assert!(build(without(bpe_kvs(), "tokenizer.ggml.merges")).is_err());
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.tokens",
        OwnedValue::i32_array([1, 2]),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::WrongType { .. }), "{e}");
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.scores",
        OwnedValue::string("x"),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::WrongType { .. }), "{e}");
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.add_bos_token",
        OwnedValue::U32(1),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::WrongType { .. }), "{e}");
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.bos_token_id",
        OwnedValue::string("1"),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::WrongType { .. }), "{e}");
}

#[test]
fn wrong_lengths() {
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.scores",
        OwnedValue::f32_array([0.0; 3]),
    ))
    .unwrap_err();
    assert!(
        matches!(
            e,
            TokenizerError::TooShort {
                len: 3,
                n_vocab: 13,
                ..
            }
        ),
        "{e}"
    );
    let e = build(with(
        spm_kvs(),
        "tokenizer.ggml.token_type",
        OwnedValue::i32_array([1; 12]),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::TooShort { .. }), "{e}");
    let empty = OwnedValue::Array(ValueType::String, Vec::new());
    let e = build(with(spm_kvs(), "tokenizer.ggml.tokens", empty)).unwrap_err();
    assert!(matches!(e, TokenizerError::EmptyVocab), "{e}");
}

#[test]
fn ids_out_of_range() {
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
    ] {
        let e = build(with(spm_kvs(), key, OwnedValue::U32(13))).unwrap_err();
        assert!(
            matches!(e, TokenizerError::IdOutOfRange { id: 13, .. }),
            "{e}"
        );
        let e = build(with(spm_kvs(), key, OwnedValue::I32(-1))).unwrap_err();
        assert!(
            matches!(e, TokenizerError::IdOutOfRange { id: -1, .. }),
            "{e}"
        );
    }
    // Out-of-range *defaults* are dropped, as llama.cpp does: a one-token
    // vocabulary has no BOS 1 / EOS 2.
    let tiny = with(
        with(
            with(
                spm_kvs(),
                "tokenizer.ggml.tokens",
                OwnedValue::string_array(["<unk>"]),
            ),
            "tokenizer.ggml.scores",
            OwnedValue::f32_array([0.0]),
        ),
        "tokenizer.ggml.token_type",
        OwnedValue::i32_array([2]),
    );
    let t = build(tiny).unwrap();
    assert_eq!((t.bos(), t.eos()), (None, None));
    // No BOS to add, no byte tokens: every byte of "▁x" becomes <unk>.
    assert_eq!(t.encode("x", true, true), [0, 0, 0, 0]);
}

#[test]
fn bad_merges_and_duplicates() {
    let e = build(with(
        bpe_kvs(),
        "tokenizer.ggml.merges",
        OwnedValue::string_array(["a b", "ab"]),
    ))
    .unwrap_err();
    assert!(
        matches!(&e, TokenizerError::BadMerge { index: 1, text } if text == "ab"),
        "{e}"
    );
    // A leading space is not the separator (llama.cpp searches from byte 1).
    let e = build(with(
        bpe_kvs(),
        "tokenizer.ggml.merges",
        OwnedValue::string_array([" a"]),
    ))
    .unwrap_err();
    assert!(matches!(e, TokenizerError::BadMerge { .. }), "{e}");
    let dup = OwnedValue::string_array(["a", "b", "a", "ab", "Ġab", "<|eot|>", "Ċ"]);
    let e = build(with(bpe_kvs(), "tokenizer.ggml.tokens", dup)).unwrap_err();
    assert!(
        matches!(
            e,
            TokenizerError::DuplicateToken {
                first: 0,
                id: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn strange_but_valid_metadata_does_not_panic() {
    // Unknown token types, NaN scores, invalid UTF-8 token text, empty tokens.
    let tokens = OwnedValue::Array(
        ValueType::String,
        vec![
            OwnedValue::String(b"<unk>".to_vec()),
            OwnedValue::String(vec![0xFF, 0xFE]),
            OwnedValue::String(Vec::new()),
            OwnedValue::String(b"\xE2\x96\x81".to_vec()),
        ],
    );
    let kvs = vec![
        ("tokenizer.ggml.model", OwnedValue::string("llama")),
        ("tokenizer.ggml.tokens", tokens),
        (
            "tokenizer.ggml.scores",
            OwnedValue::f32_array([f32::NAN, f32::INFINITY, -0.0, f32::NAN]),
        ),
        (
            "tokenizer.ggml.token_type",
            OwnedValue::i32_array([2, 99, -7, 4]),
        ),
    ];
    let t = build(kvs).unwrap();
    assert_eq!(t.token_text(2), Some(&b"[EMPTY_2]"[..]));
    for s in ["", " ", "abc def", "\u{FFFF}\u{10FFFF}"] {
        for (a, p) in [(false, false), (true, true)] {
            let ids = t.encode(s, a, p);
            let _ = t.decode(&ids);
        }
    }
    // 0xFF announces a 4-byte sequence, so the two bytes are one symbol,
    // which is token 1; the space prefix is the user-defined token 3.
    assert_eq!(t.encode_bytes(&[0xFF, 0xFE], false, false), [3, 1]);
}
