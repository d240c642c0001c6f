//! Checking files against their pins: hashing (while writing, or after),
//! and the stamps that spare hashing an unchanged file again.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use super::catalog::{Model, Pinned};

/// Checks a model that is already in place: every pinned file present with
/// the pinned size, and its SHA-256 either trusted from the stamp (size and
/// mtime unchanged) or recomputed. Returns the hashes for the new stamp.
pub(super) fn verify_present(dir: &Path, model: &Model) -> Result<Vec<String>> {
    let stamp = Stamp::read(&stamp_path(dir, model));
    let mut hashes = Vec::new();
    for file in model.files {
        let path = dir.join(file.path);
        let meta = fs::metadata(&path).with_context(|| {
            format!(
                "{} is incomplete: {} is missing; delete {} and run again",
                model.name,
                path.display(),
                dir.join(model.name).display()
            )
        })?;
        ensure!(
            meta.len() == file.size,
            "{}: size {} bytes, expected {} bytes; delete it and run again",
            path.display(),
            meta.len(),
            file.size
        );
        if !stamp.trusts(file, &meta) {
            let actual = hash_file(&path, file.path)?;
            check_hash(&path, file.sha256, &actual)
                .with_context(|| format!("{} is corrupt; delete it and run again", file.path))?;
        }
        hashes.push(file.sha256.to_owned());
    }
    Ok(hashes)
}

/// Writes a file while hashing it, so nothing is read twice.
pub(super) struct HashingWriter {
    file: BufWriter<File>,
    hasher: Sha256,
    len: u64,
}

impl HashingWriter {
    pub(super) fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            file: BufWriter::with_capacity(1 << 20, file),
            hasher: Sha256::new(),
            len: 0,
        })
    }

    /// Flushes and syncs the file; returns its length and hex SHA-256.
    pub(super) fn finish(self) -> Result<(u64, String)> {
        let file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok((self.len, hex(&self.hasher.finalize())))
    }
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

pub(crate) fn hash_file(path: &Path, label: &str) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let bar = bytes_bar(file.metadata()?.len(), format!("hashing {label}"));
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(hex(&hasher.finalize()))
}

pub(super) fn check_hash(path: &Path, expected: &str, actual: &str) -> Result<()> {
    ensure!(
        expected == actual,
        "SHA-256 mismatch for {}:\n  expected {expected}\n  actual   {actual}",
        path.display()
    );
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn bytes_bar(len: u64, message: String) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{spinner} {msg:40!} [{bar:30}] {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12} {eta}",
    )
    .expect("valid template")
    .progress_chars("=> ");
    ProgressBar::new(len)
        .with_style(style)
        .with_message(message)
}

pub(super) fn stamp_path(dir: &Path, model: &Model) -> PathBuf {
    dir.join(format!(".{}.verified", model.name))
}

/// Per-model record of verified files: `size<TAB>mtime_ns<TAB>sha256<TAB>path`
/// per line. A file is trusted while its size and mtime match its line and
/// the line's hash is the pinned one.
pub(super) struct Stamp(BTreeMap<String, (u64, u128, String)>);

impl Stamp {
    pub(super) fn read(path: &Path) -> Self {
        let text = fs::read_to_string(path).unwrap_or_default();
        Self(text.lines().filter_map(Self::parse_line).collect())
    }

    pub(super) fn parse_line(line: &str) -> Option<(String, (u64, u128, String))> {
        let mut fields = line.splitn(4, '\t');
        let size = fields.next()?.parse().ok()?;
        let mtime = fields.next()?.parse().ok()?;
        let sha = fields.next()?.to_owned();
        let path = fields.next()?.to_owned();
        Some((path, (size, mtime, sha)))
    }

    pub(super) fn trusts(&self, file: &Pinned, meta: &fs::Metadata) -> bool {
        self.0.get(file.path).is_some_and(|(size, mtime, sha)| {
            *size == meta.len() && Some(*mtime) == mtime_ns(meta) && sha == file.sha256
        })
    }

    /// Records the verified `hashes` (one per pinned file, in order), via a
    /// temporary file and a rename.
    pub(super) fn write(dir: &Path, model: &Model, hashes: &[String]) -> Result<()> {
        let mut text = String::from("# cargo xtask models: size, mtime (ns), sha256, path\n");
        for (file, sha) in model.files.iter().zip(hashes) {
            let meta = fs::metadata(dir.join(file.path))?;
            let mtime = mtime_ns(&meta).unwrap_or(0);
            text.push_str(&format!("{}\t{mtime}\t{sha}\t{}\n", meta.len(), file.path));
        }
        let path = stamp_path(dir, model);
        let tmp = path.with_extension("verified.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, &path)?;
        Ok(())
    }
}

pub(super) fn mtime_ns(meta: &fs::Metadata) -> Option<u128> {
    Some(
        meta.modified()
            .ok()?
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_nanos(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trip() {
        let line = "98362432\t1700000000123456789\tabc\tSmolLM2.gguf";
        let (path, (size, mtime, sha)) = Stamp::parse_line(line).unwrap();
        assert_eq!(
            (path.as_str(), size, mtime, sha.as_str()),
            ("SmolLM2.gguf", 98362432, 1700000000123456789, "abc")
        );
        assert!(Stamp::parse_line("# comment").is_none());
    }
}
