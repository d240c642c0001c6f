//! Parses arbitrary bytes as the bodies of `/v1/embeddings` and
//! `/v1/completions` / `/v1/chat/completions`, then runs the validation a
//! request goes through before it reaches a model.
#![no_main]

use lamina_server::api::{self, EmbeddingsRequest, GenRequest};
use lamina_server::input::{Input, InputLimits, parse_inputs};
use libfuzzer_sys::fuzz_target;

/// Limits like a small model's.
const N_CTX: usize = 8192;
const LIMITS: InputLimits = InputLimits {
    n_vocab: 49152,
    max_inputs: 64,
    max_tokens: 8192,
};

fn check_inputs(param: &str, raw: &serde_json::value::RawValue) {
    if let Ok(inputs) = parse_inputs(param, raw, LIMITS) {
        assert!(!inputs.items.is_empty() && inputs.items.len() <= LIMITS.max_inputs);
        for input in &inputs.items {
            match input {
                Input::Text(s) => assert!(!s.is_empty()),
                Input::Tokens(ids) => {
                    assert!(!ids.is_empty());
                    assert!(ids.iter().all(|&id| (id as usize) < LIMITS.n_vocab));
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = api::parse::<EmbeddingsRequest>(data) {
        check_inputs("input", &req.input);
        let _ = api::encoding(req.encoding_format.as_deref());
        let _ = api::dimensions(req.dimensions, 768);
    }
    if let Ok(req) = api::parse::<GenRequest>(data) {
        if let Ok(params) = req.params(N_CTX) {
            assert!(params.max_tokens.is_none_or(|n| n <= N_CTX));
        }
        let _ = req.chat_messages();
        if let Some(prompt) = &req.prompt {
            check_inputs("prompt", prompt);
        }
    }
});
