//! Project automation: `cargo xtask <command>`.
//!
//! * `cargo xtask models [--dir DIR] [--list]` fetches and verifies the
//!   project's real test models (see [`models`]).
//! * `cargo xtask tidy` checks the repository rules (see [`tidy`]); the same
//!   checks run as tests under `cargo test -p xtask`.
//! * `cargo xtask test` runs every test: models, the workspace tests (less
//!   those whose gold `validate` checks again, see `CHECKED_BY_VALIDATE`), a
//!   check that the release binary inlines every SIMD intrinsic (see
//!   [`inlined`]), the official `openai` Python client against `lamina serve` (see [`serve`];
//!   skipped, saying why, without Python or pip), every fidelity check
//!   (`validate --require-models`) and the cross-ISA kernel tests
//!   (`.ci/isa-tests.sh`). `.ci/run` calls it. It sets
//!   `LAMINA_REQUIRE_MODELS=1`, so a test or check that cannot find its
//!   model, or finds another file than its gold's, fails instead of skipping.
//! * `cargo xtask openai-client` runs only the `openai` client test.
//! * `cargo xtask quickstart` fetches the default model and inspects it.
//! * `cargo xtask llama-cpp [--force]` builds the reference llama.cpp tools
//!   into `target/llama.cpp/` (see [`llama_cpp`]).
//! * `cargo xtask bench [embed|generate|kernels|criterion|serve|all]` measures lamina and
//!   llama.cpp side by side (see [`bench`](mod@bench)).
//! * `cargo xtask profile WORKLOAD` records a CPU profile (see [`profile`]).
//! * `cargo xtask synth SHAPE TYPE [OUT]` writes a random-weight GGUF of a
//!   real model's shape (see [`synth`]).
//! * `cargo xtask wheel [--test]` builds the Python package's wheel (and
//!   runs its tests; see [`wheel`]).
//! * `cargo xtask validate [--live] [--require-models] [--fast | --only CHECKS]` runs the
//!   fidelity checks against llama.cpp's gold (see [`validate`]).

mod bench;
mod bench_rules;
mod bench_synth;
mod inlined;
mod llama_cpp;
mod models;
mod profile;
mod serve;
mod serve_gen;
mod synth;
mod tidy;
mod tidy_features;
mod validate;
mod wheel;

use std::path::{Path, PathBuf};
use std::process::Command as Cmd;

use anyhow::Result;
use clap::{Parser, Subcommand};
use lamina_testkit as require_models;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Lamina project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fetch the real models into the models directory and verify them.
    Models {
        /// Models directory (default: $LAMINA_MODELS, else ~/.cache/lamina/models).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Only list what is present; download and hash nothing.
        #[arg(long)]
        list: bool,
    },
    /// Check the repository rules (layering, `unsafe` placement, SAFETY comments, ISA modules,
    /// library file length).
    Tidy,
    /// Run every test: fetch models, workspace tests, NEON (qemu) and AVX-512 (Miri) kernel tests.
    Test {
        /// Skip the cross-ISA kernel tests (qemu-aarch64, Miri).
        #[arg(long)]
        no_isa: bool,
    },
    /// The official `openai` Python client against `lamina serve` (pip-installed into a venv).
    OpenaiClient,
    /// Build the `lamina` Python package's wheel into target/wheels/ (with maturin).
    Wheel {
        /// Also install it into a fresh venv and run its pytest suite.
        #[arg(long)]
        test: bool,
    },
    /// Fetch the default model if missing and run the main job on it.
    Quickstart,
    /// Fetch and build the reference llama.cpp tools (once) and print their folder.
    LlamaCpp {
        /// Download and rebuild from scratch.
        #[arg(long)]
        force: bool,
    },
    /// Benchmark lamina and llama.cpp side by side.
    Bench(bench::Args),
    /// CPU profile of a workload: top functions and a flamegraph under target/profile/.
    Profile(profile::Args),
    /// Fidelity checks against the gold files (and llama.cpp with --live).
    Validate(validate::Args),
    /// Write a random-weight GGUF of a real model's shape (Llama 3, Qwen 2.5/3, Phi-3, Gemma 2,
    /// Granite, SmolLM2).
    Synth(synth::Args),
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Models { dir, list } => {
            let dir = match dir {
                Some(dir) => dir,
                None => models::default_dir()?,
            };
            if list {
                models::list(&dir)
            } else {
                models::fetch_all(&dir)
            }
        }
        Command::Tidy => tidy::run(&workspace_root()),
        Command::Test { no_isa } => {
            let dir = models::default_dir()?;
            models::fetch_all(&dir)?;
            let root = workspace_root();
            // Every test that cannot find its model fails instead of skipping.
            // Criterion's bench harness takes no `--skip`, so the benches'
            // smoke runs come second, from the same build.
            run(cargo()
                .args([
                    "test",
                    "--workspace",
                    "--lib",
                    "--bins",
                    "--tests",
                    "--examples",
                ])
                .args(["--", "--exact"])
                .args(CHECKED_BY_VALIDATE.iter().flat_map(|t| ["--skip", t]))
                .env("LAMINA_MODELS", &dir)
                .env(require_models::REQUIRE_MODELS, "1"))?;
            run(cargo()
                .args(["test", "--workspace", "--benches"])
                .env("LAMINA_MODELS", &dir)
                .env(require_models::REQUIRE_MODELS, "1"))?;
            inlined::check(&lamina_bin()?)?;
            serve::openai_client_test(true)?;
            wheel::python_test()?;
            validate::run_cmd(validate::Args::ci())?;
            if !no_isa {
                run(Cmd::new("bash").arg(root.join(".ci/isa-tests.sh")))?;
            }
            Ok(())
        }
        Command::OpenaiClient => serve::openai_client_test(require_models::models_required()),
        Command::Wheel { test: true } => wheel::python_test(),
        Command::Wheel { test: false } => {
            println!("{}", wheel::build()?.display());
            Ok(())
        }
        Command::Quickstart => {
            let dir = models::default_dir()?;
            models::fetch_all(&dir)?;
            run(cargo()
                .args([
                    "run",
                    "--release",
                    "--quiet",
                    "-p",
                    "lamina-cli",
                    "--",
                    "inspect",
                ])
                .arg(dir.join("gemma-3-270m-Q4_K_M.gguf")))
        }
        Command::LlamaCpp { force } => {
            let bin = llama_cpp::build(force)?;
            println!("{}", bin.display());
            Ok(())
        }
        Command::Bench(args) => bench::run_cmd(args),
        Command::Profile(args) => profile::run_cmd(args),
        Command::Validate(args) => validate::run_cmd(args),
        Command::Synth(args) => synth::run_cmd(args),
    }
}

/// Tests whose gold `validate` checks again, with the same thresholds,
/// through the release CLI: `cargo xtask test` runs each check once.
const CHECKED_BY_VALIDATE: &[&str] = &[
    "gemma3_f32_matches_llama_cpp",
    "smollm2_f32_matches_llama_cpp",
    "gemma3_q4_k_m_agrees_with_llama_cpp",
    "smollm2_q4_1_agrees_with_llama_cpp",
    "smollm2_q8_0_agrees_with_llama_cpp",
    "output_is_byte_identical_to_llama_quantize",
];

fn cargo() -> Cmd {
    let mut cmd = Cmd::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs a command, inheriting stdio, and fails if it fails.
fn run(cmd: &mut Cmd) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status = cmd.status()?;
    anyhow::ensure!(status.success(), "command failed ({status}): {cmd:?}");
    Ok(())
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the workspace
/// root if relative), else `<root>/target`.
pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(d) => workspace_root().join(d),
        None => workspace_root().join("target"),
    }
}

/// Builds the release `lamina` binary (a no-op when up to date) and returns
/// its path. `LAMINA_BIN` names another binary to use instead, unbuilt.
pub(crate) fn lamina_bin() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("LAMINA_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        anyhow::ensure!(bin.is_file(), "LAMINA_BIN={} is not a file", bin.display());
        return Ok(bin);
    }
    run(cargo().args(["build", "--release", "--quiet", "-p", "lamina-cli"]))?;
    let bin = target_dir().join("release/lamina");
    anyhow::ensure!(
        bin.is_file(),
        "cargo built lamina-cli but {} is missing",
        bin.display()
    );
    Ok(bin)
}

/// The workspace root: the parent of xtask's own manifest directory.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renamed test would run twice again, unnoticed: each skipped name
    /// must still be a test function of the workspace's integration tests.
    #[test]
    fn tests_left_to_validate_exist() {
        let root = workspace_root();
        let sources: Vec<String> = [
            "crates/model/tests/generate_gold.rs",
            "crates/model/tests/quantize_gold.rs",
        ]
        .iter()
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
        .collect();
        for name in CHECKED_BY_VALIDATE {
            let decl = format!("#[test]\nfn {name}() {{");
            assert!(
                sources.iter().any(|s| s.contains(&decl)),
                "{name} is no test in generate_gold.rs or quantize_gold.rs"
            );
        }
    }
}
