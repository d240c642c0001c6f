//! Whether a test may skip when its model is missing or is not the file its
//! gold was made from: shared, through `#[path]`, by every crate's test
//! helpers (`crates/*/tests/common/mod.rs`) and by `cargo xtask validate`.
//!
//! `cargo xtask test` (and so CI) sets `LAMINA_REQUIRE_MODELS=1`: there such
//! a test fails, naming the file and the command that makes it, since a skip
//! would pass without checking anything. A plain `cargo test` skips it and
//! says so on the terminal.

use std::io::Write;

/// The variable `cargo xtask test` sets.
pub const REQUIRE_MODELS: &str = "LAMINA_REQUIRE_MODELS";

/// True when `LAMINA_REQUIRE_MODELS` is set to anything but empty or `0`.
pub fn models_required() -> bool {
    std::env::var_os(REQUIRE_MODELS).is_some_and(|v| !v.is_empty() && v != "0")
}

/// A test that cannot find its model: panics with `why` under
/// `LAMINA_REQUIRE_MODELS`, else says it skipped ([`say_skipped`]).
pub fn skip_or_fail(why: &str) {
    assert!(
        !models_required(),
        "{why} ({REQUIRE_MODELS} is set, so a missing or wrong model fails the test)"
    );
    say_skipped(why);
}

/// Writes `SKIPPED: why` to the process's stderr itself, past the test
/// harness's capture, which hides what a passing test prints.
pub fn say_skipped(why: &str) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}
