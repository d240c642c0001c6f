//! Checking a downloaded file against the checksum the hub named it by.
//!
//! The cache stores each file as `blobs/<etag>`: for a large (LFS) file the
//! etag is the SHA-256 of its bytes, for a small one the SHA-1 git gives
//! the blob (`blob <len>\0` then the bytes).

use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::HubError;

/// Which hash an etag is, by its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algo {
    Sha256,
    GitSha1,
}

impl Algo {
    /// The hash `etag` is, or `None` when it is no checksum at all.
    pub(crate) fn of(etag: &str) -> Option<Algo> {
        let hex = etag.bytes().all(|b| b.is_ascii_hexdigit());
        match etag.len() {
            64 if hex => Some(Algo::Sha256),
            40 if hex => Some(Algo::GitSha1),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "SHA-256",
            Algo::GitSha1 => "git SHA-1",
        }
    }
}

/// Hashes the blob at `blob` (named by its etag) and checks it.
pub(crate) fn check(repo: &str, file: &str, blob: &Path) -> Result<(), HubError> {
    let etag = blob
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let algo = Algo::of(&etag).ok_or_else(|| HubError::BadListing {
        repo: repo.to_string(),
        why: format!("{file} came with etag {etag:?}, which is no checksum"),
    })?;
    let got = hash(algo, blob)?;
    if got == etag {
        return Ok(());
    }
    Err(HubError::Checksum {
        repo: repo.to_string(),
        file: file.to_string(),
        algo: algo.name(),
        want: etag,
        got,
    })
}

fn hash(algo: Algo, path: &Path) -> Result<String, HubError> {
    let mut f = std::fs::File::open(path).map_err(HubError::io(path))?;
    let len = f.metadata().map_err(HubError::io(path))?.len();
    let mut sha256 = Sha256::new();
    let mut sha1 = Sha1::new();
    if algo == Algo::GitSha1 {
        sha1.update(format!("blob {len}\0").as_bytes());
    }
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(HubError::io(path))?;
        if n == 0 {
            break;
        }
        match algo {
            Algo::Sha256 => sha256.update(&buf[..n]),
            Algo::GitSha1 => sha1.update(&buf[..n]),
        }
    }
    let digest = match algo {
        Algo::Sha256 => sha256.finalize().to_vec(),
        Algo::GitSha1 => sha1.finalize().to_vec(),
    };
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_and_lfs_checksums() {
        let dir = tempfile::tempdir().unwrap();
        // `git hash-object` of "hello\n", and sha256sum of the same bytes.
        for etag in [
            "ce013625030ba8dba906f756967f9e9ca394464a",
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
        ] {
            let blob = dir.path().join(etag);
            std::fs::write(&blob, "hello\n").unwrap();
            check("a/m", "f", &blob).unwrap();
            std::fs::write(&blob, "hellO\n").unwrap();
            let err = check("a/m", "f", &blob).unwrap_err();
            assert!(matches!(err, HubError::Checksum { .. }), "{err}");
        }
        let blob = dir.path().join("not-a-hash");
        std::fs::write(&blob, "x").unwrap();
        assert!(matches!(
            check("a/m", "f", &blob),
            Err(HubError::BadListing { .. })
        ));
    }
}
