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
    let mut child = Command::new(env!("CARGO_BIN_EXE_lamina"))
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
