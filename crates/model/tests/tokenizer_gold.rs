//! The tokenizers against llama.cpp's own `llama-tokenize` (gold files in
//! `testdata/tokenizer/`, made by `make_gold.py`), on the project's real
//! models. A missing model fails the test with instructions; it is never
//! skipped.

use std::path::PathBuf;

use lamina_gguf::Gguf;
use lamina_model::tokenizer::{StreamDecoder, Tokenizer};
use lamina_testkit::required as model;
use proptest::prelude::*;
use serde_json::Value;

const GEMMA: &str = "gemma-3-270m-Q4_K_M.gguf";
const SMOLLM: &str = "SmolLM2-135M-Instruct-Q4_1.gguf";

fn tokenizer(name: &str) -> Tokenizer {
    let g = Gguf::open(model(name)).expect("open model");
    Tokenizer::from_gguf(&g).expect("build tokenizer")
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
    let tok = tokenizer(model_name);
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
