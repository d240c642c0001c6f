//! Project automation: `cargo xtask <command>`.
//!
//! * `cargo xtask models [--dir DIR] [--list]` fetches and verifies the
//!   project's real test models (see [`models`]).
//! * `cargo xtask tidy` checks the repository rules (see [`tidy`]); the same
//!   checks run as tests under `cargo test -p xtask`.

mod models;
mod tidy;

use std::path::{Path, PathBuf};

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
    }
}

/// The workspace root: the parent of xtask's own manifest directory.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}
