//! `lamina quantize` and `lamina inspect --sha256` as a user runs them.
//!
//! Tests that need a model read it from the models directory
//! (`LAMINA_MODELS`); when it is absent they say so on stderr and pass.

mod common;

use common::{err, lamina, model, ok, testdata};

const SMOLLM2: &str = "SmolLM2-135M-Instruct-Q4_1.gguf";

/// A K mix through the CLI: the file llama-quantize writes (gold in
/// testdata/quantize), its tensor types reported, and `inspect --sha256`
/// listing every tensor.
#[test]
fn quantize_a_k_mix_and_list_tensor_hashes() {
    let Some(src) = model(SMOLLM2) else { return };
    let gold = std::fs::read_to_string(testdata("quantize", "llama-quantize.sha256")).unwrap();
    let want = gold
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() == 3 && f[0] == SMOLLM2 && f[1] == "Q4_K_M")
        .map(|f| f[2].to_string())
        .expect("a SmolLM2 Q4_K_M gold line");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.gguf");
    let (src, out_s) = (src.to_str().unwrap(), out.to_str().unwrap());
    let report: serde_json::Value = serde_json::from_str(&ok(&lamina(
        &["quantize", src, out_s, "q4_k_m", "--json"],
        b"",
    )))
    .unwrap();
    assert_eq!(report["tensors"], 272);
    assert_eq!(report["types"]["Q4_K"], 16, "{report}");
    assert_eq!(report["types"]["Q6_K"], 14, "{report}");

    let lines = ok(&lamina(&["inspect", out_s, "--sha256"], b""));
    let rows: Vec<Vec<&str>> = lines
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 272);
    for r in &rows {
        assert!(r.len() == 3 && r[0].len() == 64, "{r:?}");
    }
    // The tied embedding gets the output's type: Q6_K, or Q8_0 as here where
    // its 576-value rows are not whole 256-value blocks.
    let embd = rows.iter().find(|r| r[2] == "token_embd.weight").unwrap();
    assert_eq!(embd[1], "Q8_0");

    use sha2::{Digest, Sha256};
    let got: String = Sha256::digest(std::fs::read(&out).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(got, want, "not the file llama-quantize writes");
}

#[test]
fn quantize_errors_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.gguf");
    let out = dir.path().join("out.gguf");
    let (m, o) = (missing.to_str().unwrap(), out.to_str().unwrap());
    let e = err(&lamina(&["quantize", m, o, "Q9_K"], b""));
    assert!(e.contains("Q9_K") && e.contains("Q4_K_M"), "{e}");
    let e = err(&lamina(&["quantize", m, o, "Q4_K_M"], b""));
    assert!(e.contains("missing.gguf"), "{e}");
    assert!(!out.exists());
}
