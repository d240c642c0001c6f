//! `lamina quantize` writes the same bytes as llama.cpp's `llama-quantize`
//! (gold: testdata/quantize/llama-quantize.sha256, whole files, and
//! testdata/quantize/tensors/*.sha256, tensor by tensor), and a failed run
//! leaves neither the output nor its temporary file. `cargo xtask test`
//! skips the byte-identity test: its `validate` step checks the same
//! whole-file SHA-256s through the release CLI.

use std::path::{Path, PathBuf};

use lamina_gguf::Gguf;
use lamina_model::requantize::{Target, quantize_file};
use sha2::{Digest, Sha256};

fn gold_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/quantize")
}

/// `(input, target, whole-file sha256)` lines of the gold file.
fn gold() -> Vec<(String, String, String)> {
    std::fs::read_to_string(gold_dir().join("llama-quantize.sha256"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(path: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    hex(&h.finalize())
}

/// `SHA256  TYPE  NAME` per tensor, the format of `lamina inspect --sha256`.
fn tensor_lines(path: &Path) -> Vec<String> {
    let g = Gguf::open(path).unwrap();
    g.tensors()
        .iter()
        .map(|t| {
            let h = hex(&Sha256::digest(g.tensor_data(t)));
            format!("{h}  {}  {}", t.ggml_type.name(), t.name)
        })
        .collect()
}

/// Compares tensor by tensor with a gold list, naming every tensor that differs.
fn check_tensors(out: &Path, list: &Path, label: &str) -> usize {
    let want: Vec<String> = std::fs::read_to_string(list)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let got = tensor_lines(out);
    let differ: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("  want {w}\n  got  {g}"))
        .collect();
    assert!(
        differ.is_empty() && want.len() == got.len(),
        "{label}: {} of {} tensors differ from llama-quantize's ({} vs {} tensors):\n{}",
        differ.len(),
        want.len(),
        got.len(),
        want.len(),
        differ.join("\n")
    );
    want.len()
}

#[test]
fn output_is_byte_identical_to_llama_quantize() {
    let dir = lamina_testkit::models_dir();
    let out_dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (input, target, want) in gold() {
        let src = dir.join(&input);
        assert!(
            src.exists(),
            "{} is missing: run `cargo xtask models`",
            src.display()
        );
        let out: PathBuf = out_dir.path().join(format!("{input}.{target}.gguf"));
        let t = Target::parse(&target).unwrap();
        quantize_file(&src, &out, t, &mut |_, _, _| {}).unwrap();
        let label = format!("{input} → {target}");
        let stem = input.trim_end_matches(".gguf");
        let list = gold_dir().join(format!("tensors/{stem}.{target}.sha256"));
        if list.exists() {
            let n = check_tensors(&out, &list, &label);
            eprintln!("{label}: {n} tensors identical to llama-quantize's (types and bytes)");
        }
        let got = sha256(&out);
        assert_eq!(got, want, "{label}: bytes differ from llama-quantize's");
        eprintln!("{label}: file identical to llama-quantize's ({got})");
        std::fs::remove_file(&out).unwrap();
        checked += 1;
    }
    assert_eq!(checked, gold().len());
}

#[test]
fn failed_run_leaves_nothing_and_bad_targets_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00 definitely not a model").unwrap();
    let out = dir.path().join("out.gguf");
    assert!(quantize_file(&bad, &out, Target::Q8_0, &mut |_, _, _| {}).is_err());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("bad.gguf")],
        "leftover files: {left:?}"
    );
    let e = Target::parse("Q9_9").unwrap_err().to_string();
    assert!(e.contains("Q9_9") && e.contains("Q4_K_M"), "{e}");
    assert_eq!(Target::parse("q4_k_m").unwrap(), Target::Q4_K_M);
}
