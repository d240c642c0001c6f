//! `Tokenizer::encode_within`: the same ids as `encode` when they fit, a
//! `ContextExceeded` error when they do not, and a lower bound that never
//! overstates the real count when it refuses early.

mod common;

use lamina_gguf::Gguf;
use lamina_model::ModelError;
use lamina_model::tokenizer::Tokenizer;

const MODELS: [&str; 2] = [
    "gemma-3-270m-Q4_K_M.gguf",
    "SmolLM2-135M-Instruct-Q4_1.gguf",
];

fn tokenizer(name: &str) -> Tokenizer {
    let g = Gguf::open(common::required(name)).unwrap();
    Tokenizer::from_gguf(&g).unwrap()
}

fn corpus() -> Vec<String> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tokenizer/corpus.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Checks one refusal against the real count `n`.
fn check_refusal(err: ModelError, n: usize, max: usize, what: &str) -> bool {
    match err {
        ModelError::ContextExceeded {
            n_tokens,
            n_ctx,
            at_least,
        } => {
            assert_eq!(n_ctx, max, "{what}");
            assert!(n_tokens > max, "{what}: {n_tokens} <= {max}");
            if at_least {
                assert!(n_tokens <= n, "{what}: bound {n_tokens} > real {n}");
            } else {
                assert_eq!(n_tokens, n, "{what}");
            }
            at_least
        }
        other => panic!("{what}: want ContextExceeded, got {other:?}"),
    }
}

#[test]
fn within_the_limit_the_ids_are_encodes() {
    let mut texts = corpus();
    texts.push(" ".repeat(5000));
    texts.push("\n".repeat(3000) + "a");
    texts.push("<start_of_turn><|im_start|>  <eos> ".repeat(40));
    texts.push("漢".repeat(2000));
    texts.push("a".repeat(4000));
    for name in MODELS {
        let tok = tokenizer(name);
        let mut early = 0;
        for text in &texts {
            for (add, parse) in [(true, true), (false, false), (true, false)] {
                let ids = tok.encode(text, add, parse);
                let n = ids.len();
                assert_eq!(tok.encode_within(text, add, parse, n).unwrap(), ids);
                assert_eq!(tok.encode_within(text, add, parse, n + 7).unwrap(), ids);
                for max in [n.saturating_sub(1), n / 2, n / 10, 0] {
                    if max >= n {
                        continue;
                    }
                    let head: String = text.chars().take(30).collect();
                    let what = format!("{name} {add} {parse} max {max} {head:?}");
                    let err = tok.encode_within(text, add, parse, max).unwrap_err();
                    early += usize::from(check_refusal(err, n, max, &what));
                }
            }
        }
        assert!(early > 0, "{name}: never refused early");
    }
}

#[test]
fn huge_inputs_are_refused_with_a_sound_bound() {
    let mib = 1 << 20;
    let inputs = [
        " ".repeat(mib),
        "a".repeat(mib),
        "漢".repeat(mib / 3),
        "\n".repeat(mib),
        "<start_of_turn>".repeat(mib / 15),
        "<|im_start|>".repeat(mib / 12),
    ];
    for name in MODELS {
        let tok = tokenizer(name);
        for text in &inputs {
            let started = std::time::Instant::now();
            let n = tok.encode(text, true, true).len();
            let what = format!("{name} {:?}", &text[..24]);
            eprintln!("{what}: {n} tokens in {:?}", started.elapsed());
            let err = tok.encode_within(text, true, true, 2048).unwrap_err();
            assert!(check_refusal(err, n, 2048, &what), "{what}");
            // 8 MiB: refused from its length, without tokenizing.
            let big = text.repeat(8);
            let started = std::time::Instant::now();
            let refused = tok.encode_within(&big, true, true, 2048);
            eprintln!(
                "{what} x8: {:?} in {:?}",
                refused.as_ref().err(),
                started.elapsed()
            );
            match tok.encode_within(&big, true, true, 2048).unwrap_err() {
                ModelError::ContextExceeded {
                    n_tokens,
                    at_least: true,
                    ..
                } => assert!(n_tokens > 2048, "{what}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}

/// A GGUF holding only a vocabulary of `n` empty strings, written sparsely:
/// the strings' zero lengths are the file's zero bytes.
fn sparse_vocab_file(path: &std::path::Path, n: u64) {
    use std::io::Write;
    let mut h = Vec::new();
    h.extend_from_slice(b"GGUF");
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes()); // tensors
    h.extend_from_slice(&2u64.to_le_bytes()); // metadata entries
    let key = |h: &mut Vec<u8>, k: &str| {
        h.extend_from_slice(&(k.len() as u64).to_le_bytes());
        h.extend_from_slice(k.as_bytes());
    };
    key(&mut h, "tokenizer.ggml.model");
    h.extend_from_slice(&8u32.to_le_bytes());
    key(&mut h, "llama");
    key(&mut h, "tokenizer.ggml.tokens");
    h.extend_from_slice(&9u32.to_le_bytes());
    h.extend_from_slice(&8u32.to_le_bytes());
    h.extend_from_slice(&n.to_le_bytes());
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&h).unwrap();
    f.set_len(h.len() as u64 + 8 * n + 64).unwrap();
}

#[test]
fn a_huge_vocabulary_is_refused_before_its_tables_are_sized() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.gguf");
    let n = lamina_model::tokenizer::MAX_VOCAB as u64 + 1;
    sparse_vocab_file(&path, n);
    let g = Gguf::open(&path).unwrap();
    let err = Tokenizer::from_gguf(&g).unwrap_err().to_string();
    assert!(err.contains(&format!("{n} tokens")), "{err}");
}
