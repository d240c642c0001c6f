//! Encodes arbitrary text with two small vocabularies built in memory: a
//! SentencePiece one shaped like Gemma's (byte fallback, control tokens and
//! user-defined whitespace runs) and a GPT-2-style byte-level BPE one. Each
//! text goes through with special-token parsing on and off, and the ids are
//! decoded again.
#![no_main]

use std::sync::OnceLock;

use lamina_gguf::{Gguf, GgufBuilder, OwnedValue};
use lamina_model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fn build(kvs: Vec<(&str, OwnedValue)>) -> Tokenizer {
    let mut b = GgufBuilder::new();
    for (k, v) in kvs {
        b.set(k, v).expect("valid metadata");
    }
    let bytes = b.write_header(Vec::new()).unwrap().finish().unwrap();
    Tokenizer::from_gguf(&Gguf::from_bytes(bytes).unwrap()).expect("valid vocabulary")
}

/// Gemma-like: <pad> <eos> <bos> <unk>, turn markers, whitespace runs as
/// user-defined tokens, byte tokens, and a few merged pieces.
fn spm() -> Tokenizer {
    let mut tokens: Vec<String> = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<start_of_turn>",
        "<end_of_turn>",
        "<mask>",
    ]
    .map(String::from)
    .to_vec();
    let mut types = vec![3, 3, 3, 2, 3, 3, 4];
    for n in 1..=31 {
        tokens.push("\n".repeat(n));
        types.push(4);
        tokens.push("▁".repeat(n));
        types.push(4);
        tokens.push("\t".repeat(n));
        types.push(4);
    }
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let pieces = [
        "a", "b", "c", "e", "h", "t", "ab", "▁a", "▁ab", "▁the", "th", "he", "the", "▁t", "é", "€",
        "<", ">", "<s", "s>",
    ];
    for p in pieces {
        tokens.push(p.to_string());
        types.push(1);
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32) / 8.0).collect();
    build(vec![
        ("tokenizer.ggml.model", OwnedValue::string("llama")),
        ("tokenizer.ggml.tokens", OwnedValue::string_array(&tokens)),
        ("tokenizer.ggml.scores", OwnedValue::f32_array(scores)),
        ("tokenizer.ggml.token_type", OwnedValue::i32_array(types)),
        ("tokenizer.ggml.bos_token_id", OwnedValue::U32(2)),
        ("tokenizer.ggml.eos_token_id", OwnedValue::U32(1)),
        ("tokenizer.ggml.add_space_prefix", OwnedValue::Bool(false)),
    ])
}

/// GPT-2's byte-to-character map, so every byte has a token.
fn byte_chars() -> Vec<char> {
    let printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars = vec!['\0'; 256];
    for &b in &printable {
        chars[b as usize] = char::from_u32(b).unwrap();
    }
    let mut next = 256;
    for (b, c) in chars.iter_mut().enumerate() {
        if !printable.contains(&(b as u32)) {
            *c = char::from_u32(next).unwrap();
            next += 1;
        }
    }
    chars
}

fn bpe() -> Tokenizer {
    let bytes = byte_chars();
    let mut tokens: Vec<String> = bytes.iter().map(|c| c.to_string()).collect();
    let mut types = vec![1; tokens.len()];
    let merges = [
        "Ġ t",
        "h e",
        "t he",
        "Ġt he",
        "Ġ Ġ",
        "ĠĠ ĠĠ",
        "Ċ Ċ",
        "a b",
        "Ġ ab",
        "i n",
        "Ġ in",
    ];
    for m in merges {
        tokens.push(m.replace(' ', ""));
        types.push(1);
    }
    for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] {
        tokens.push(special.to_string());
        types.push(3);
    }
    let n = tokens.len() as u32;
    build(vec![
        ("tokenizer.ggml.model", OwnedValue::string("gpt2")),
        ("tokenizer.ggml.pre", OwnedValue::string("gpt-2")),
        ("tokenizer.ggml.tokens", OwnedValue::string_array(&tokens)),
        ("tokenizer.ggml.token_type", OwnedValue::i32_array(types)),
        ("tokenizer.ggml.merges", OwnedValue::string_array(merges)),
        ("tokenizer.ggml.bos_token_id", OwnedValue::U32(n - 3)),
        ("tokenizer.ggml.eos_token_id", OwnedValue::U32(n - 3)),
    ])
}

static TOKENIZERS: OnceLock<[Tokenizer; 2]> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let tokenizers = TOKENIZERS.get_or_init(|| [spm(), bpe()]);
    // The first byte picks flags; the rest is the text (lossy, as the server decodes).
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    for t in tokenizers {
        for parse_special in [false, true] {
            let ids = t.encode(&text, flags & 1 != 0, parse_special);
            assert!(ids.iter().all(|&id| (id as usize) < t.n_vocab()));
            let back = t.detokenize(&ids, flags & 2 != 0, parse_special);
            std::hint::black_box(back);
        }
        let raw = t.encode_bytes(rest, false, flags & 4 != 0);
        assert!(raw.iter().all(|&id| (id as usize) < t.n_vocab()));
    }
});
