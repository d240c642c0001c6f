//! llama.cpp's own vocabulary-only GGUFs (`models/ggml-vocab-*.gguf` of its
//! source tree), the real tokenizers of model families whose weights are out
//! of reach here (Llama 3, Qwen 2.5/3, Phi-3, Llama 2/Mistral). They ship in
//! the `llama-cpp-python` source package that `cargo xtask llama-cpp` builds
//! from, so that archive is reused when it was already downloaded, else pip
//! fetches it; only the pinned members are extracted, each checked by size
//! and SHA-256 before it is renamed into place.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

use super::derived::{DerivedState, derived_state, write_derived_stamp};
use super::verify::{HashingWriter, check_hash};
use super::{TmpDir, group};
use crate::llama_cpp::PY_VERSION;

/// One vocabulary file: its name in the models directory (and in the
/// archive's `vendor/llama.cpp/models/`), size and SHA-256.
pub(super) struct Vocab {
    pub name: &'static str,
    size: u64,
    sha256: &'static str,
}

pub(super) const VOCABS: [Vocab; 5] = [
    Vocab {
        name: "ggml-vocab-llama-bpe.gguf",
        size: 7_818_140,
        sha256: "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e",
    },
    Vocab {
        name: "ggml-vocab-qwen2.gguf",
        size: 5_928_681,
        sha256: "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c",
    },
    Vocab {
        name: "ggml-vocab-phi-3.gguf",
        size: 726_019,
        sha256: "967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326",
    },
    Vocab {
        name: "ggml-vocab-llama-spm.gguf",
        size: 723_869,
        sha256: "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69",
    },
    // XLM-R's 250k-piece Unigram vocabulary (nomic-embed-text-v2-moe uses it).
    Vocab {
        name: "ggml-vocab-nomic-bert-moe.gguf",
        size: 6_821_877,
        sha256: "90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9",
    },
];

fn member(v: &Vocab) -> String {
    format!(
        "llama_cpp_python-{PY_VERSION}/vendor/llama.cpp/models/{}",
        v.name
    )
}

fn stamp(dir: &Path, v: &Vocab) -> PathBuf {
    dir.join(format!(".{}.verified", v.name))
}

/// Verifies the present vocabularies and extracts the missing or wrong ones.
pub(super) fn fetch(dir: &Path) -> Result<()> {
    let mut todo = Vec::new();
    for v in &VOCABS {
        let out = dir.join(v.name);
        match derived_state(&out, &stamp(dir, v), v.sha256)? {
            DerivedState::Verified => report(v),
            DerivedState::Missing => todo.push(v),
            DerivedState::Differs(actual) => {
                println!(
                    "  {}: SHA-256 {actual} is not the pinned {}; extracting it again",
                    v.name, v.sha256
                );
                todo.push(v);
            }
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    let tmp = TmpDir::new(dir)?;
    let sdist = match cached_sdist() {
        Some(p) => p,
        None => pip_sdist(&tmp.0)?,
    };
    for v in todo {
        let part = tmp.0.join(v.name);
        let mut out = HashingWriter::create(&part)?;
        tar_cat(&sdist, &member(v), &mut out)?;
        let (size, actual) = out.finish()?;
        ensure!(
            size == v.size,
            "{} in {}: {size} bytes, expected {}",
            member(v),
            sdist.display(),
            v.size
        );
        check_hash(&part, v.sha256, &actual)?;
        let final_path = dir.join(v.name);
        fs::rename(&part, &final_path)
            .with_context(|| format!("renaming {} to {}", part.display(), final_path.display()))?;
        write_derived_stamp(&final_path, &stamp(dir, v), &actual)?;
        report(v);
    }
    Ok(())
}

/// `--list`: whether each vocabulary is present, hashing nothing.
pub(super) fn list(dir: &Path) {
    for v in &VOCABS {
        let state = match fs::metadata(dir.join(v.name)) {
            Ok(m) if m.len() == v.size => "present",
            Ok(_) => "wrong size (run `cargo xtask models`)",
            Err(_) => "absent",
        };
        println!("  {:<36} {:>15} bytes  {state}", v.name, group(v.size));
    }
}

fn report(v: &Vocab) {
    println!(
        "  {:<36} {:>15} bytes  verified  sha256 {}",
        v.name,
        group(v.size),
        &v.sha256[..16]
    );
}

/// The archive `cargo xtask llama-cpp` downloaded, if it is there.
fn cached_sdist() -> Option<PathBuf> {
    let p = crate::target_dir()
        .join("llama.cpp/download")
        .join(format!("llama_cpp_python-{PY_VERSION}.tar.gz"));
    p.is_file().then_some(p)
}

/// Downloads the source package into `tmp` with pip.
fn pip_sdist(tmp: &Path) -> Result<PathBuf> {
    println!("  pip download llama-cpp-python=={PY_VERSION} (source package, about 77 MB)");
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
        ])
        .args(["--progress-bar", "off", "-d"])
        .arg(tmp)
        .arg(format!("llama-cpp-python=={PY_VERSION}"))
        .stdin(Stdio::null())
        .output()
        .context("running `python3 -m pip download` (are python3 and pip installed?)")?;
    if !output.status.success() {
        bail!(
            "pip download llama-cpp-python=={PY_VERSION} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let p = tmp.join(format!("llama_cpp_python-{PY_VERSION}.tar.gz"));
    ensure!(p.is_file(), "pip ran, but {} is missing", p.display());
    Ok(p)
}

/// Streams one member of a `.tar.gz` to `out` with `tar -xzOf`.
fn tar_cat(archive: &Path, member: &str, out: &mut impl Write) -> Result<()> {
    let mut child = Command::new("tar")
        .arg("-xzOf")
        .arg(archive)
        .arg(member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running tar (is it installed?)")?;
    let mut stdout = child.stdout.take().context("tar stdout")?;
    std::io::copy(&mut stdout, out)?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "tar -xzOf {} {member} failed ({}): {}",
            archive.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Extracts the pinned files from the archive `cargo xtask llama-cpp`
    /// downloaded (when it is there), then trusts them from their stamps.
    #[test]
    fn extracts_pinned_vocabularies_from_the_cached_archive() {
        if cached_sdist().is_none() {
            eprintln!("SKIPPED: no llama-cpp-python {PY_VERSION} archive downloaded");
            return;
        }
        let dir = std::env::temp_dir().join(format!("lamina-vocab-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fetch(&dir).unwrap();
        for v in &VOCABS {
            assert_eq!(fs::metadata(dir.join(v.name)).unwrap().len(), v.size);
            let state = derived_state(&dir.join(v.name), &stamp(&dir, v), v.sha256).unwrap();
            assert_eq!(state, DerivedState::Verified, "{}", v.name);
        }
        // A damaged file is noticed and extracted again.
        fs::write(dir.join(VOCABS[2].name), b"not a vocabulary").unwrap();
        fetch(&dir).unwrap();
        assert_eq!(
            fs::metadata(dir.join(VOCABS[2].name)).unwrap().len(),
            VOCABS[2].size
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
