//! Model files with an empty or mismatched vocabulary, a hostile
//! `context_length`, and huge contexts: clean errors, never a panic, an
//! overflow or an aborting allocation.

use std::io::Write;
use std::path::Path;

use lamina_gguf::{GgmlType, Gguf, GgufBuilder, OwnedValue};
use lamina_model::embed::Embedder;
use lamina_model::generate::Session;
use lamina_model::tokenizer::{Tokenizer, TokenizerError};
use lamina_model::{KvType, Model, ModelError};

const D: u64 = 8;
const FF: u64 = 16;

/// A one-layer Llama with `rows` embedding rows, the given vocabulary and
/// `context_length`.
fn write_model(path: &Path, rows: u64, tokens: &[&str], ctx: u64, arch: &str) {
    let mut b = GgufBuilder::new();
    let key = |k: &str| format!("{arch}.{k}");
    b.set("general.architecture", OwnedValue::string(arch))
        .unwrap();
    b.set(key("block_count"), OwnedValue::U32(1)).unwrap();
    b.set(key("embedding_length"), OwnedValue::U32(D as u32))
        .unwrap();
    b.set(key("feed_forward_length"), OwnedValue::U32(FF as u32))
        .unwrap();
    b.set(key("attention.head_count"), OwnedValue::U32(2))
        .unwrap();
    b.set(
        key("attention.layer_norm_rms_epsilon"),
        OwnedValue::F32(1e-6),
    )
    .unwrap();
    b.set(key("context_length"), OwnedValue::U64(ctx)).unwrap();
    b.set("tokenizer.ggml.model", OwnedValue::string("llama"))
        .unwrap();
    b.set(
        "tokenizer.ggml.tokens",
        OwnedValue::string_array(tokens.iter().copied()),
    )
    .unwrap();
    let mut tensors: Vec<(String, Vec<u64>)> = vec![
        ("token_embd.weight".into(), vec![D, rows]),
        ("output_norm.weight".into(), vec![D]),
    ];
    for (n, shape) in [
        ("attn_norm", vec![D]),
        ("attn_q", vec![D, D]),
        ("attn_k", vec![D, D]),
        ("attn_v", vec![D, D]),
        ("attn_output", vec![D, D]),
        ("ffn_norm", vec![D]),
        ("ffn_gate", vec![D, FF]),
        ("ffn_up", vec![D, FF]),
        ("ffn_down", vec![FF, D]),
    ] {
        tensors.push((format!("blk.0.{n}.weight"), shape));
    }
    if arch != "llama" {
        for (n, len) in [
            ("attn_q_norm", D / 2),
            ("attn_k_norm", D / 2),
            ("post_attention_norm", D),
            ("post_ffw_norm", D),
        ] {
            tensors.push((format!("blk.0.{n}.weight"), vec![len]));
        }
    }
    for (name, shape) in &tensors {
        b.add_tensor(name.clone(), GgmlType::F32, shape).unwrap();
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = b.write_header(file).unwrap();
    while let Some(spec) = w.next_tensor() {
        let n = spec.n_bytes as usize / 4;
        let data: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
            .collect();
        w.write_tensor(&data).unwrap();
    }
    w.finish().unwrap().flush().unwrap();
}

const VOCAB: [&str; 6] = ["<unk>", "<s>", "</s>", "▁", "a", "b"];

#[test]
fn an_empty_vocabulary_is_refused_when_loading() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.gguf");
    write_model(&p, 6, &[], 64, "llama");
    let model = Model::open(&p).unwrap();
    match Tokenizer::from_gguf(&model.file) {
        Err(TokenizerError::EmptyVocab) => {}
        other => panic!("want EmptyVocab, got {other:?}"),
    }
    // No embedding rows at all.
    write_model(&p, 0, &VOCAB, 64, "llama");
    let err = Model::open(&p).unwrap_err().to_string();
    assert!(err.contains("empty vocabulary"), "{err}");
}

#[test]
fn more_tokens_than_embedding_rows_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("short.gguf");
    write_model(&p, 4, &VOCAB, 64, "llama");
    let model = Model::open(&p).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let err = Session::new(&model, &tok, 16, KvType::F16)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("6 tokens") && err.contains("only 4 rows"),
        "{err}"
    );
    // Padded embeddings (more rows than tokens) are fine, and generate.
    write_model(&p, 9, &VOCAB, 64, "llama");
    let model = Model::open(&p).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let mut s = Session::new(&model, &tok, 16, KvType::F16).unwrap();
    s.prefill(&[1, 4, 5], &lamina_kernels::pool::Serial)
        .unwrap();
    // The embedding model path checks the same.
    write_model(&p, 4, &VOCAB, 64, "gemma-embedding");
    match Embedder::open(&p) {
        Err(e) => assert!(e.to_string().contains("only 4 rows"), "{e}"),
        Ok(_) => panic!("an embedder with 6 tokens over 4 rows loaded"),
    }
}

#[test]
fn huge_contexts_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ctx.gguf");
    write_model(&p, 6, &VOCAB, u64::MAX, "llama");
    let model = Model::open(&p).unwrap();
    assert_eq!(model.hp.n_ctx_train as u64, u64::MAX);
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    for n_ctx in [1_000_000_000_000usize, 1 << 50, usize::MAX / 2, usize::MAX] {
        for kv in [KvType::F16, KvType::F32] {
            let err = Session::new(&model, &tok, n_ctx, kv).unwrap_err();
            match &err {
                ModelError::ContextTooLarge { n_ctx: n, .. } => {
                    assert_eq!(*n, n_ctx);
                    assert!(err.to_string().contains("lower --ctx"), "{err}");
                }
                other => panic!("want a refusal, got {other:?}"),
            }
            let err = Session::with_batch(&model, &tok, n_ctx, kv, usize::MAX).unwrap_err();
            assert!(err.to_string().contains("lower --ctx"), "{err}");
        }
    }
    // A batch scheduler counts every slot's positions and logits: many small
    // slots are refused as one huge context is.
    use lamina_model::scheduler::{Scheduler, SchedulerOptions};
    for (n_ctx, slots, budget) in [
        (1, 1usize << 40, 1),
        (1 << 30, 1 << 30, 512),
        (usize::MAX, 2, 512),
        (64, 4, usize::MAX),
    ] {
        let o = SchedulerOptions {
            slots,
            n_ctx,
            kv: KvType::F16,
            budget,
        };
        let err = Scheduler::new(&model, &tok, o).unwrap_err();
        assert!(
            matches!(err, ModelError::ContextTooLarge { .. })
                && err.to_string().contains("--parallel"),
            "{slots} slots of {n_ctx}: {err}"
        );
    }
    let o = SchedulerOptions {
        slots: 4,
        n_ctx: 64,
        kv: KvType::F16,
        budget: 64,
    };
    assert!(Scheduler::new(&model, &tok, o).is_ok());
    // A context this file's sizes make small still works.
    assert!(Session::new(&model, &tok, 4096, KvType::F16).is_ok());
    let need = lamina_model::mem::session_bytes(&model.hp, 4096, KvType::F16, 512).unwrap();
    // 1 layer x K and V x 4096 positions x 8 values x 2 bytes, plus buffers.
    assert!(need >= 2 * 4096 * 8 * 2, "{need}");
    let _ = Gguf::open(&p).unwrap();
}

/// A q8_0 cache over heads that are not whole Q8_0 blocks is refused before
/// anything is allocated, by the single-sequence and the batch paths alike.
#[test]
fn a_q8_0_cache_needs_heads_of_whole_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    write_model(&p, 6, &VOCAB, 64, "llama");
    let model = Model::open(&p).unwrap();
    assert!(!model.hp.head_dim.is_multiple_of(32));
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let err = Session::new(&model, &tok, 16, KvType::Q8_0).unwrap_err();
    assert!(
        matches!(err, ModelError::Input(_)) && err.to_string().contains("multiple of 32"),
        "{err}"
    );
    use lamina_model::scheduler::{Scheduler, SchedulerOptions};
    let o = SchedulerOptions {
        slots: 2,
        n_ctx: 16,
        kv: KvType::Q8_0,
        budget: 16,
    };
    let err = Scheduler::new(&model, &tok, o).unwrap_err();
    assert!(err.to_string().contains("use an f16 cache"), "{err}");
    // The same model runs with an f16 cache.
    Session::new(&model, &tok, 16, KvType::F16).unwrap();
}
