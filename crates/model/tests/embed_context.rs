//! Input longer than the model's 2048-token context: a clear error, or with
//! `truncate` the first 2047 tokens and EOS; never a crash.
//!
//! Reads `embeddinggemma-300m-Q8_0.gguf` (else the F32 file) from the models
//! directory; without either it says so on stderr and passes.

mod common;

use lamina_kernels::pool::Rayon;
use lamina_model::ModelError;
use lamina_model::embed::{EmbedOptions, Embedder};

#[test]
fn long_input_errors_or_truncates() {
    let Some(path) = common::embedding_model() else {
        return;
    };
    let mut e = Embedder::open(&path).unwrap();
    assert_eq!(e.model.hp.n_ctx_train, 2048);
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(250);
    let full = e.tokenizer.encode(&long, true, true);
    assert!(full.len() > 2048);

    let plain = EmbedOptions::default();
    match e.tokenize(&long, &plain) {
        Err(ModelError::ContextExceeded {
            n_tokens, n_ctx, ..
        }) => {
            assert_eq!((n_tokens, n_ctx), (full.len(), 2048));
        }
        other => panic!("want ContextExceeded, got {other:?}"),
    }
    let msg = e.embed(&[&long], &plain, &Rayon).unwrap_err().to_string();
    assert!(
        msg.contains("exceeds the context of 2048") && msg.contains("--truncate"),
        "{msg}"
    );

    let truncate = EmbedOptions {
        truncate: true,
        ..Default::default()
    };
    let ids = e.tokenize(&long, &truncate).unwrap();
    assert_eq!(ids.len(), 2048);
    assert_eq!(ids[..2047], full[..2047]);
    assert_eq!(ids[2047], 1, "ends with EOS");
    // Exactly the context fits without truncation.
    let fits = e
        .embed_ids(std::slice::from_ref(&ids), &plain, &Rayon)
        .unwrap();
    assert_eq!(fits[0].n_tokens, 2048);
    let n: f64 = fits[0].vector.iter().map(|&x| x as f64 * x as f64).sum();
    assert!((n - 1.0).abs() < 1e-5);

    // Pre-tokenized input past the context is refused by the forward pass too.
    let mut over = ids.clone();
    over.insert(1, full[1]);
    assert!(matches!(
        e.embed_ids(&[over], &plain, &Rayon),
        Err(ModelError::ContextExceeded {
            n_tokens: 2049,
            n_ctx: 2048,
            at_least: false
        })
    ));
    // Truncated among shorter texts in one call: the same vector.
    let cut = e
        .embed(&["short", &long, "text"], &truncate, &Rayon)
        .unwrap();
    assert_eq!(
        cut.iter().map(|x| x.n_tokens).collect::<Vec<_>>(),
        [3, 2048, 3]
    );
    for (a, b) in cut[1].vector.iter().zip(&fits[0].vector) {
        assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
    }
}
