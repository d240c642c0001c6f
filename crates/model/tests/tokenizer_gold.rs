//! The tokenizers against llama.cpp's own `llama-tokenize` (gold files in
//! `testdata/tokenizer/`, made by `make_gold.py`), on the project's real
//! models and on llama.cpp's vocabulary-only files of the families whose
//! weights are not downloaded (Llama 3, Qwen 2.5/3, Phi-3, Llama 2/Mistral).
//! A missing model fails the test with instructions; a missing vocabulary
//! file skips its test unless `LAMINA_REQUIRE_MODELS` is set.

use std::path::PathBuf;

use lamina_gguf::Gguf;
use lamina_model::tokenizer::{StreamDecoder, Tokenizer};
use lamina_testkit::{present, required as model};
use proptest::prelude::*;
use serde_json::Value;

const GEMMA: &str = "gemma-3-270m-Q4_K_M.gguf";
const SMOLLM: &str = "SmolLM2-135M-Instruct-Q4_1.gguf";

fn tokenizer(name: &str) -> Tokenizer {
    tokenizer_at(&model(name))
}

fn tokenizer_at(path: &std::path::Path) -> Tokenizer {
    let g = Gguf::open(path).expect("open model");
    Tokenizer::from_gguf(&g).expect("build tokenizer")
}

/// llama.cpp's vocab-only files (`cargo xtask models` extracts them from the
/// pinned llama-cpp-python sdist); a missing one skips unless
/// `LAMINA_REQUIRE_MODELS` is set.
const VOCABS: [&str; 4] = ["llama-bpe", "qwen2", "phi-3", "llama-spm"];

fn vocab(name: &str) -> Option<Tokenizer> {
    present(&format!("ggml-vocab-{name}.gguf")).map(|p| tokenizer_at(&p))
}

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/tokenizer")
        .join(file)
}

fn corpus() -> Vec<String> {
    let text = std::fs::read_to_string(testdata("corpus.json")).expect("read corpus.json");
    serde_json::from_str(&text).expect("parse corpus.json")
}

/// Compare every string x setting of a gold file; returns the number of
/// comparisons and panics listing every mismatch.
fn check_gold(model_name: &str, gold_file: &str) -> usize {
    check_gold_with(&tokenizer(model_name), model_name, gold_file)
}

fn check_gold_with(tok: &Tokenizer, model_name: &str, gold_file: &str) -> usize {
    let text = std::fs::read_to_string(testdata(gold_file)).expect("read gold file");
    let gold: Value = serde_json::from_str(&text).expect("parse gold file");
    assert_eq!(gold["model"], model_name);
    let cases = gold["cases"].as_array().expect("cases");
    let corpus = corpus();
    assert_eq!(
        cases.len(),
        corpus.len(),
        "gold file is stale: rerun make_gold.py"
    );
    let mut mismatches = Vec::new();
    let mut n = 0;
    for (case, s) in cases.iter().zip(&corpus) {
        assert_eq!(
            case["text"].as_str(),
            Some(s.as_str()),
            "gold file is stale"
        );
        for (setting, ids) in case["ids"].as_object().expect("ids") {
            // llama-tokenize passes add_special = (model's add_bos && !--no-bos).
            let add_special = setting.starts_with("bos") && tok.add_bos();
            let parse_special = setting.ends_with("+special");
            let want: Vec<u32> = ids
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let got = tok.encode(s, add_special, parse_special);
            n += 1;
            if got != want {
                mismatches.push(format!(
                    "{setting} {s:?}\n  llama.cpp {want:?}\n  lamina    {got:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {n} differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    n
}

#[test]
fn gemma3_matches_llama_cpp() {
    assert_eq!(check_gold(GEMMA, "gold-gemma3.json"), corpus().len() * 4);
}

#[test]
fn smollm2_matches_llama_cpp() {
    assert_eq!(check_gold(SMOLLM, "gold-smollm2.json"), corpus().len() * 4);
}

fn check_vocab_gold(name: &str) {
    if let Some(tok) = vocab(name) {
        let file = format!("ggml-vocab-{name}.gguf");
        let n = check_gold_with(&tok, &file, &format!("gold-{name}.json"));
        assert_eq!(n, corpus().len() * 4);
    }
}

/// Llama 3's vocabulary (byte-level BPE, pre-tokenizer `llama-bpe`).
#[test]
fn llama_bpe_matches_llama_cpp() {
    check_vocab_gold("llama-bpe");
}

/// Qwen 2.5 / Qwen 3's vocabulary (byte-level BPE, pre-tokenizer `qwen2`).
#[test]
fn qwen2_matches_llama_cpp() {
    check_vocab_gold("qwen2");
}

/// Phi-3's vocabulary: SentencePiece over Llama 2's 32k tokens plus
/// chat tokens such as `<|user|>` and `<|endoftext|>`.
#[test]
fn phi3_matches_llama_cpp() {
    check_vocab_gold("phi-3");
}

/// Llama 2 / Mistral 7B's SentencePiece vocabulary.
#[test]
fn llama_spm_matches_llama_cpp() {
    check_vocab_gold("llama-spm");
}

/// llama.cpp's own test pairs shipped beside its vocab files
/// (`ggml-vocab-NAME.gguf.inp` / `.out`, copied to `testdata/tokenizer/lcpp/`):
/// each input is tokenized without BOS and with special-token parsing off, as
/// its `test-tokenizer-0` does.
#[test]
fn llama_cpp_vocab_test_pairs() {
    for name in VOCABS {
        let Some(tok) = vocab(name) else { continue };
        let dir = testdata("lcpp");
        let inp = std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.inp")))
            .expect("read .inp");
        let out = std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.out")))
            .expect("read .out");
        // test-tokenizer-0 splits at the separator; a trailing one ends the list.
        let sep = "\n__ggml_vocab_test__\n";
        let inputs: Vec<&str> = inp.strip_suffix(sep).unwrap_or(&inp).split(sep).collect();
        let outputs: Vec<&str> = out.lines().collect();
        assert_eq!(
            inputs.len(),
            outputs.len(),
            "{name}: .inp and .out disagree"
        );
        for (text, want) in inputs.iter().zip(&outputs) {
            let want: Vec<u32> = want
                .split_whitespace()
                .map(|t| t.parse().expect("token id"))
                .collect();
            let got = tok.encode(text, false, false);
            assert_eq!(got, want, "{name}: {text:?}");
        }
    }
}

#[test]
fn gemma3_reference_sentence() {
    let tok = tokenizer(GEMMA);
    assert_eq!(tok.bos(), Some(2));
    assert_eq!(tok.eos(), Some(1));
    assert!(tok.add_bos() && !tok.add_eos());
    assert_eq!(
        tok.encode("The quick brown fox jumps over the lazy dog.", true, true),
        [
            2, 818, 3823, 8864, 37423, 38167, 1024, 506, 31770, 4799, 236761
        ]
    );
    assert!(tok.is_eog(1));
    assert!(tok.is_eog(tok.token_id(b"<end_of_turn>").unwrap()));
}

/// Detokenizing what we tokenized gives the text back, for every corpus
/// string: Gemma has byte fallback and no space prefix, SmolLM2 is
/// byte-level with clean_spaces off, so nothing is lost either way.
#[test]
fn decode_round_trips() {
    for name in [GEMMA, SMOLLM] {
        let tok = tokenizer(name);
        for s in corpus() {
            for parse_special in [false, true] {
                let ids = tok.encode(&s, true, parse_special);
                // remove_special drops the BOS we added; unparse_special
                // renders special tokens that came from the text.
                let back = tok.detokenize(&ids, true, true);
                assert_eq!(
                    String::from_utf8_lossy(&back),
                    s,
                    "{name} parse_special={parse_special}"
                );
            }
            let plain = tok.encode(&s, false, false);
            assert_eq!(tok.decode(&plain), s, "{name}");
        }
    }
}

#[test]
fn pieces_of_special_and_byte_tokens() {
    let tok = tokenizer(GEMMA);
    assert_eq!(tok.token_to_piece(2, false), b"");
    assert_eq!(tok.token_to_piece(2, true), b"<bos>");
    let nl = tok.token_id(b"<0x0A>").unwrap();
    assert_eq!(tok.token_to_piece(nl, false), b"\n");
    assert_eq!(tok.token_to_piece(u32::MAX, true), b"");
    let smol = tokenizer(SMOLLM);
    let hello = smol.encode(" hello", false, false);
    assert_eq!(smol.decode(&hello), " hello");
}

fn stream_matches_lossy(tok: &Tokenizer, ids: &[u32], special: bool) -> Result<(), TestCaseError> {
    let mut d = StreamDecoder::new(special);
    let mut streamed = String::new();
    for &id in ids {
        let chunk = d.push(tok, id);
        // Every chunk is whole characters; none may end in a held-back lead.
        prop_assert!(std::str::from_utf8(chunk.as_bytes()).is_ok());
        streamed.push_str(&chunk);
    }
    streamed.push_str(&d.finish());
    let all: Vec<u8> = ids
        .iter()
        .flat_map(|&id| tok.token_to_piece(id, special))
        .collect();
    prop_assert_eq!(streamed, String::from_utf8_lossy(&all).into_owned());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random ids, biased towards byte tokens (Gemma 3..=258 holds the 256
    /// `<0xXX>` tokens; SmolLM2's low ids are single bytes), so characters
    /// are often split across tokens.
    #[test]
    fn stream_decoder_never_splits_characters(
        ids in prop::collection::vec(prop_oneof![0u32..300, 0u32..262_144], 0..48),
        special in any::<bool>(),
    ) {
        thread_local! {
            static TOKS: (Tokenizer, Tokenizer) = (tokenizer(GEMMA), tokenizer(SMOLLM));
        }
        TOKS.with(|(gemma, smol)| {
            stream_matches_lossy(gemma, &ids, special)?;
            let small: Vec<u32> = ids.iter().map(|&i| i % 49_152).collect();
            stream_matches_lossy(smol, &small, special)
        })?;
    }

    /// Encoding arbitrary text never panics, and decoding gives it back.
    #[test]
    fn arbitrary_text_round_trips(s in "\\PC{0,40}") {
        thread_local! {
            static TOKS: (Tokenizer, Tokenizer) = (tokenizer(GEMMA), tokenizer(SMOLLM));
        }
        TOKS.with(|(gemma, smol)| {
            for tok in [gemma, smol] {
                let ids = tok.encode(&s, false, false);
                prop_assert_eq!(tok.decode(&ids), s.clone());
            }
            Ok(())
        })?;
    }
}

/// Build and encode timings, printed for the record (`cargo test --release
/// -p lamina-model --test tokenizer_gold timings -- --nocapture`).
#[test]
fn timings() {
    for name in [GEMMA, SMOLLM] {
        let g = Gguf::open(model(name)).unwrap();
        let t0 = std::time::Instant::now();
        let tok = Tokenizer::from_gguf(&g).unwrap();
        let build = t0.elapsed();
        let text = corpus().join("\n").repeat(20);
        let t1 = std::time::Instant::now();
        let n = tok.encode(&text, true, true).len();
        let first = t1.elapsed();
        let t2 = std::time::Instant::now();
        let n2 = tok.encode(&text, true, true).len();
        let enc = t2.elapsed();
        assert_eq!(n, n2);
        eprintln!(
            "{name}: build {build:?}; encode {} bytes -> {n} tokens in {enc:?} ({:.1} MB/s; first call {first:?})",
            text.len(),
            text.len() as f64 / enc.as_secs_f64() / 1e6
        );
        // Not quadratic: 4x the text costs about 4x the time (generous bound).
        let big = text.repeat(4);
        let t3 = std::time::Instant::now();
        tok.encode(&big, true, true);
        let enc4 = t3.elapsed();
        assert!(
            enc4 < enc * 16 + std::time::Duration::from_millis(50),
            "{enc4:?} vs {enc:?}"
        );
    }
}
