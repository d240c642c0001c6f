//! A text's vector does not depend on the company it is embedded in: 96
//! mixed-length texts embedded in one call (packed several per forward, or all
//! in a single forward) equal the same texts embedded one at a time.
//!
//! Reads `embeddinggemma-300m-Q8_0.gguf` (else the F32 file) from the models
//! directory; without either it says so on stderr and passes.

mod common;

use lamina_kernels::pool::Rayon;
use lamina_model::LoadOptions;
use lamina_model::embed::{EmbedOptions, Embedder};

const WORDS: &[&str] = &[
    "the",
    "engine",
    "reads",
    "weights",
    "from",
    "a",
    "mapped",
    "file,",
    "and",
    "every",
    "token",
    "attends",
    "only",
    "to",
    "its",
    "own",
    "sequence.",
    "Embeddings",
    "are",
    "mean-pooled",
    "then",
    "projected",
    "by",
    "two",
    "dense",
    "layers",
    "机器学习",
    "是",
    "人工智能",
    "الذكاء",
    "الاصطناعي",
    "🍕",
    "naïve",
    "café",
    "fn main() {",
    "}",
    "\t",
    "42",
    "https://example.com/?q=1",
    "Москва",
];

/// 96 texts: 1 to 55 words, and four of 200 words (past the ±256 window).
fn texts() -> Vec<String> {
    const LENS: [usize; 9] = [1, 2, 3, 5, 8, 13, 21, 34, 55];
    (0..96)
        .map(|i| {
            let n = if i % 24 == 5 {
                200
            } else {
                LENS[(i * 7) % LENS.len()]
            };
            (0..n)
                .map(|j| WORDS[(i * 31 + j * 17) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn batch_of_96_equals_one_at_a_time() {
    let Some(path) = common::embedding_model() else {
        return;
    };
    let mut e = Embedder::open(&path).unwrap();
    let texts = texts();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let default = EmbedOptions::default();

    let alone: Vec<_> = refs
        .iter()
        .map(|t| e.embed(&[t], &default, &Rayon).unwrap().remove(0))
        .collect();
    let total: usize = alone.iter().map(|a| a.n_tokens).sum();
    let longest = alone.iter().map(|a| a.n_tokens).max().unwrap();
    assert!(total > default.batch_tokens * 4 && longest > 256);

    let one_forward = EmbedOptions {
        batch_tokens: total,
        ..Default::default()
    };
    for (what, opts) in [
        ("default batch_tokens", &default),
        ("all in one forward", &one_forward),
    ] {
        let batch = e.embed(&refs, opts, &Rayon).unwrap();
        assert_eq!(batch.len(), alone.len());
        let mut worst = (0.0f32, 0);
        for (i, (a, b)) in alone.iter().zip(&batch).enumerate() {
            assert_eq!(a.n_tokens, b.n_tokens);
            for (x, y) in a.vector.iter().zip(&b.vector) {
                let d = (x - y).abs();
                if d > worst.0 {
                    worst = (d, i);
                }
            }
        }
        println!(
            "{what}: {} texts, {total} tokens, longest {longest}; max |diff| {:.2e} (text {})",
            refs.len(),
            worst.0,
            worst.1
        );
        assert!(
            worst.0 <= 1e-5,
            "{what}: text {} differs by {} from its embedding alone",
            worst.1,
            worst.0
        );
    }
}

/// An embedding model stored as panels (as `lamina serve` and `lamina bench
/// embed` load it, where the ISA has them) gives the file's rows' vectors bit
/// for bit, alone and in a batch.
#[test]
fn stored_panels_give_the_rows_vectors() {
    let Some(path) = common::embedding_model() else {
        return;
    };
    // `embedding_model` gives the Q8_0 file, else the F32 one.
    let ty = if path.to_string_lossy().contains("Q8_0") {
        lamina_kernels::GgmlType::Q8_0
    } else {
        lamina_kernels::GgmlType::F32
    };
    if !common::panels_stored_here(ty, "stored_panels_give_the_rows_vectors") {
        return;
    }
    let mut rows = Embedder::new(LoadOptions::new().panels(false).open(&path).unwrap()).unwrap();
    let mut panels = Embedder::new(LoadOptions::new().panels(true).open(&path).unwrap()).unwrap();
    let texts = texts();
    let refs: Vec<&str> = texts.iter().take(24).map(String::as_str).collect();
    let opts = EmbedOptions::default();
    let mut calls: Vec<&[&str]> = refs.iter().take(3).map(std::slice::from_ref).collect();
    calls.push(&refs);
    for call in calls {
        let (a, b) = (
            rows.embed(call, &opts, &Rayon).unwrap(),
            panels.embed(call, &opts, &Rayon).unwrap(),
        );
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert!(
                a.vector
                    .iter()
                    .map(|v| v.to_bits())
                    .eq(b.vector.iter().map(|v| v.to_bits())),
                "text {i} of {}: stored panels' vector differs from the rows'",
                call.len()
            );
        }
    }
}
