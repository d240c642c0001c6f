//! Project automation: `cargo xtask <command>`.
//!
//! * `cargo xtask models [--dir DIR] [--list]` fetches and verifies the
//!   project's real test models (see [`models`]).
//! * `cargo xtask tidy` checks the repository rules (see [`tidy`]); the same
//!   checks run as tests under `cargo test -p xtask`.
//! * `cargo xtask test` runs every test: models, the workspace tests and the
//!   cross-ISA kernel tests (`.ci/isa-tests.sh`). `.ci/run` calls it.
//! * `cargo xtask quickstart` fetches the default model and inspects it.

mod models;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::Command as Cmd;

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    /// Check the repository rules (layering, `unsafe` placement, SAFETY comments, ISA modules).
    Tidy,
    /// Run every test: fetch models, workspace tests, NEON (qemu) and AVX-512 (Miri) kernel tests.
    Test {
        /// Skip the cross-ISA kernel tests (qemu-aarch64, Miri).
        #[arg(long)]
        no_isa: bool,
    },
    /// Fetch the default model if missing and run the main job on it.
    Quickstart,
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
            run(cargo()
                .args(["test", "--workspace", "--all-targets"])
                .env("LAMINA_MODELS", &dir))?;
            if !no_isa {
                run(Cmd::new("bash").arg(root.join(".ci/isa-tests.sh")))?;
            }
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
    }
}

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

/// The workspace root: the parent of xtask's own manifest directory.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}
