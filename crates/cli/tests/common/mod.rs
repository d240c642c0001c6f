//! What the CLI tests share: the built binary, the models directory and the
//! checks on its exit.
#![allow(dead_code, unused_imports)] // each test file uses its own subset

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A model file, or `None` after saying the test skipped; under `cargo xtask
/// test` (`LAMINA_REQUIRE_MODELS`) a missing file fails the test instead.
pub use lamina_testkit::present as model;

pub fn testdata(dir: &str, file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(dir)
        .join(file)
}

/// Runs `lamina ARGS` with `stdin` on its standard input.
pub fn lamina(args: &[&str], stdin: &[u8]) -> Output {
    lamina_env(args, stdin, &[])
}

/// [`lamina`] with `env` set (an empty value removes the variable).
pub fn lamina_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lamina"));
    for (k, v) in env {
        match v.is_empty() {
            true => cmd.env_remove(k),
            false => cmd.env(k, v),
        };
    }
    let mut child = cmd
        .args(args)
        .env("LAMINA_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lamina");
    // The binary may exit before reading (a bad argument): ignore a broken pipe.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "lamina failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// A failure with a message on stderr, not a panic.
pub fn err(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "want a clean failure: {stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// The `embedding` of one `lamina embed --json` line.
pub fn vector(v: &serde_json::Value) -> Vec<f32> {
    v["embedding"]
        .as_array()
        .expect("an embedding array")
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// The gold of a conformance checkpoint in `testdata/embedders/NAME/`.
pub fn embedders_gold(name: &str) -> serde_json::Value {
    let path = testdata("embedders", &format!("{name}/gold.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A conformance checkpoint of `testdata/embedders/` rebuilt from its
/// manifest and converted to an F32 GGUF by `lamina convert` in `dir`, with
/// BERT's pooler kept so a cross-encoder scores as PyTorch does.
pub fn checkpoint_gguf(name: &str, dir: &std::path::Path) -> PathBuf {
    let folder = lamina_testkit::checkpoint::write_embedder(name, dir)
        .unwrap_or_else(|e| panic!("rebuilding {name}: {e}"));
    let output = dir.join(format!("{name}-F32.gguf"));
    let (folder, out) = (folder.to_str().unwrap(), output.to_str().unwrap());
    ok(&lamina(&["convert", folder, out, "--type", "f32"], b""));
    output
}
