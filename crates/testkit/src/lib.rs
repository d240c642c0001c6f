//! What lamina's tests and benches share: finding the project's real models
//! and deciding whether a test without its model skips or fails.
//!
//! The models live in [`models_dir`] (`$LAMINA_MODELS`, else
//! `~/.cache/lamina/models`, where `cargo xtask models` puts them).
//! `cargo xtask test` (and so CI) sets [`REQUIRE_MODELS`]: there a test that
//! cannot find its model fails, naming the file and the command that makes
//! it, since a skip would pass without checking anything. A plain
//! `cargo test` skips it and says so on the terminal. A failure names the
//! line of the test that asked for the model (`#[track_caller]`).
//!
//! [`checkpoint`] rebuilds the conformance checkpoints of `testdata/`
//! (families, embedders) from their manifests.
//!
//! This crate depends on no lamina crate, so every lamina crate can use it
//! as a dev-dependency without a cycle.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

pub mod checkpoint;
pub mod fake_hub;
pub mod texts;

/// The variable `cargo xtask test` sets.
pub const REQUIRE_MODELS: &str = "LAMINA_REQUIRE_MODELS";

/// The variable naming the models directory.
pub const MODELS_ENV: &str = "LAMINA_MODELS";

/// The directory holding model files: `$LAMINA_MODELS` when set and not
/// empty, else `~/.cache/lamina/models` (where `cargo xtask models` puts them).
pub fn models_dir() -> PathBuf {
    dir_from(std::env::var_os(MODELS_ENV), std::env::var_os("HOME"))
}

/// [`models_dir`] given the two variables it reads.
fn dir_from(models: Option<OsString>, home: Option<OsString>) -> PathBuf {
    match models {
        Some(dir) if !dir.is_empty() => dir.into(),
        _ => PathBuf::from(home.unwrap_or_default()).join(".cache/lamina/models"),
    }
}

/// True when `LAMINA_REQUIRE_MODELS` is set to anything but empty or `0`.
pub fn models_required() -> bool {
    required_from(std::env::var_os(REQUIRE_MODELS).as_deref())
}

fn required_from(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// A test that cannot find its model: panics with `why` under
/// `LAMINA_REQUIRE_MODELS`, else says it skipped ([`say_skipped`]).
#[track_caller]
pub fn skip_or_fail(why: &str) {
    skip_or_fail_as(models_required(), why);
}

#[track_caller]
fn skip_or_fail_as(required: bool, why: &str) {
    assert!(
        !required,
        "{why} ({REQUIRE_MODELS} is set, so a missing or wrong model fails the test)"
    );
    say_skipped(why);
}

/// Writes `SKIPPED: why` to the process's stderr itself, past the test
/// harness's capture, which hides what a passing test prints.
pub fn say_skipped(why: &str) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// A model file the test cannot do without: it fails (never skips) when the
/// file is missing, saying what makes it.
#[track_caller]
pub fn required(name: &str) -> PathBuf {
    let path = models_dir().join(name);
    assert!(
        path.is_file(),
        "model {} is missing: run `cargo xtask models` (or set LAMINA_MODELS)",
        path.display()
    );
    path
}

/// A file of the models directory, or `None` after [`skip_or_fail`].
#[track_caller]
pub fn present(name: &str) -> Option<PathBuf> {
    let path = models_dir().join(name);
    if path.is_file() {
        Some(path)
    } else {
        skip_or_fail(&format!(
            "{} is missing (`cargo xtask models` makes it; LAMINA_MODELS overrides the folder)",
            path.display()
        ));
        None
    }
}

/// The first of `names` present in the models directory, without a word
/// when none is (the caller decides what a miss means).
pub fn find_first(names: &[&str]) -> Option<PathBuf> {
    first_in(&models_dir(), names)
}

fn first_in(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// The first of `names` present in the models directory, or `None` after
/// [`skip_or_fail`].
#[track_caller]
pub fn first_present(names: &[&str]) -> Option<PathBuf> {
    let found = find_first(names);
    if found.is_none() {
        skip_or_fail(&format!(
            "none of {names:?} is in {} (`cargo xtask models` makes them; LAMINA_MODELS overrides the folder)",
            models_dir().display()
        ));
    }
    found
}

/// An EmbeddingGemma GGUF (Q8_0, else F32) from `cargo xtask models`, or
/// `None` after [`skip_or_fail`].
#[track_caller]
pub fn embedding_model() -> Option<PathBuf> {
    let found = find_first(&[
        "embeddinggemma-300m-Q8_0.gguf",
        "embeddinggemma-300m-F32.gguf",
    ]);
    if found.is_none() {
        skip_or_fail(&format!(
            "no embeddinggemma-300m-{{Q8_0,F32}}.gguf in {} (`cargo xtask models` makes them; LAMINA_MODELS overrides the folder)",
            models_dir().display()
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_is_lamina_models_else_the_home_cache() {
        let home = Some(OsString::from("/home/u"));
        assert_eq!(
            dir_from(Some("/m".into()), home.clone()),
            PathBuf::from("/m")
        );
        assert_eq!(
            dir_from(Some("".into()), home.clone()),
            PathBuf::from("/home/u/.cache/lamina/models")
        );
        assert_eq!(
            dir_from(None, home),
            PathBuf::from("/home/u/.cache/lamina/models")
        );
    }

    #[test]
    fn models_are_required_unless_unset_empty_or_zero() {
        assert!(!required_from(None));
        assert!(!required_from(Some(OsStr::new(""))));
        assert!(!required_from(Some(OsStr::new("0"))));
        assert!(required_from(Some(OsStr::new("1"))));
        assert!(required_from(Some(OsStr::new("yes"))));
    }

    #[test]
    fn a_missing_model_fails_only_when_required() {
        skip_or_fail_as(false, "testkit's own test: nothing is missing");
        let failed =
            std::panic::catch_unwind(|| skip_or_fail_as(true, "x.gguf is missing")).unwrap_err();
        let msg = failed.downcast_ref::<String>().unwrap();
        assert_eq!(
            msg,
            "x.gguf is missing (LAMINA_REQUIRE_MODELS is set, so a missing or wrong model fails the test)"
        );
    }

    #[test]
    fn the_first_present_file_is_found() {
        let dir = std::env::temp_dir().join(format!("lamina-testkit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a.gguf")).unwrap();
        std::fs::write(dir.join("b.gguf"), b"GGUF").unwrap();
        std::fs::write(dir.join("c.gguf"), b"GGUF").unwrap();
        // A folder of a model's name is not the model.
        assert_eq!(
            first_in(&dir, &["a.gguf", "b.gguf", "c.gguf"]),
            Some(dir.join("b.gguf"))
        );
        assert_eq!(first_in(&dir, &["a.gguf", "d.gguf"]), None);
        assert_eq!(first_in(&dir, &[]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
