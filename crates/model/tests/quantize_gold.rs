//! `lamina quantize` writes the same bytes as llama.cpp's `llama-quantize`
//! (gold: testdata/quantize/llama-quantize.sha256), and a failed run leaves
//! neither the output nor its temporary file.

use std::path::{Path, PathBuf};

use lamina_model::quantize::{Target, quantize_file};
use sha2::{Digest, Sha256};

fn gold() -> Vec<(String, String, String)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/quantize/llama-quantize.sha256");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

fn sha256(path: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn output_is_byte_identical_to_llama_quantize() {
    let dir = lamina_gguf::models_dir();
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
        let got = sha256(&out);
        assert_eq!(
            got, want,
            "{input} → {target}: bytes differ from llama-quantize's"
        );
        eprintln!("{input} → {target}: identical to llama-quantize ({got})");
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
    let e = Target::parse("q4_k_m").unwrap_err().to_string();
    assert!(e.contains("not implemented"), "{e}");
}
