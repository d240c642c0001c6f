//! Output files written beside their destination under a temporary name and
//! renamed into place only when complete, so a failed, panicking or
//! interrupted run never leaves a half-written file or a stray temporary.
//!
//! The temporary is created exclusively (`O_EXCL`, never following a symlink
//! or replacing a file) under an unpredictable name in the destination's
//! directory. It is removed when the [`StagedFile`] is dropped unless
//! [`StagedFile::commit`] renamed it, and every live one is listed so a
//! Ctrl-C handler can remove them with [`remove_all_staged`] before exiting.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The paths of the temporaries not yet committed or dropped.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // A panic while the list was held leaves it intact: keep using it.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A temporary file that becomes `dest` on [`StagedFile::commit`].
#[derive(Debug)]
pub struct StagedFile {
    file: File,
    path: PathBuf,
    dest: PathBuf,
}

impl StagedFile {
    /// Creates `.NAME.RANDOM.tmp` beside `dest` (`NAME` being `dest`'s file name).
    pub fn create(dest: &Path) -> io::Result<StagedFile> {
        let name = dest.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} does not name a file", dest.display()),
            )
        })?;
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp").rand_bytes(12);
        #[cfg(unix)]
        {
            // The mode `File::create` uses (before the umask), not tempfile's 0600:
            // the result is an ordinary output file.
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        // Registered while the list is held, so a Ctrl-C handler that runs
        // between creation and registration cannot miss the file.
        let mut live = live();
        let (file, path) = builder.tempfile_in(dir)?.keep().map_err(|e| e.error)?;
        live.push(path.clone());
        Ok(StagedFile {
            file,
            path,
            dest: dest.to_path_buf(),
        })
    }

    /// The temporary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file to write (`&File` is a writer).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Flushes the data to disk, renames the temporary to the destination and
    /// flushes the directory, so the new name survives a crash.
    pub fn commit(self) -> io::Result<()> {
        self.file.sync_all()?;
        {
            let mut live = live();
            std::fs::rename(&self.path, &self.dest)?;
            live.retain(|p| p != &self.path);
        }
        sync_dir(&self.dest)
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        let mut live = live();
        if let Some(i) = live.iter().position(|p| p == &self.path) {
            live.swap_remove(i);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(unix)]
fn sync_dir(dest: &Path) -> io::Result<()> {
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dest: &Path) -> io::Result<()> {
    Ok(())
}

/// Removes every temporary not yet committed or dropped (for a Ctrl-C
/// handler that is about to exit the process). Returns how many it removed.
pub fn remove_all_staged() -> usize {
    let mut live = live();
    let n = live.len();
    for p in live.drain(..) {
        let _ = std::fs::remove_file(&p);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `remove_all_staged` reaches every test's files: tests take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn temporaries(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn commit_renames_and_drop_removes() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.gguf");
        let s = StagedFile::create(&dest).unwrap();
        let name = s.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".out.gguf.") && name.ends_with(".tmp"),
            "{name}"
        );
        s.file().write_all(b"hello").unwrap();
        assert_eq!(temporaries(dir.path()), [name]);
        s.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"hello");
        assert!(temporaries(dir.path()).is_empty());

        let s = StagedFile::create(&dest).unwrap();
        s.file().write_all(b"half").unwrap();
        drop(s);
        assert!(temporaries(dir.path()).is_empty());
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            b"hello",
            "the old file stays"
        );
    }

    #[test]
    fn names_differ_and_remove_all_clears_the_live_ones() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x");
        let a = StagedFile::create(&dest).unwrap();
        let b = StagedFile::create(&dest).unwrap();
        assert_ne!(a.path(), b.path());
        assert!(remove_all_staged() >= 2);
        assert!(temporaries(dir.path()).is_empty());
        // Dropping after the handler ran is harmless.
        drop((a, b));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn output_gets_the_mode_file_create_gives() {
        use std::os::unix::fs::PermissionsExt;
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("m");
        StagedFile::create(&dest).unwrap().commit().unwrap();
        let plain = dir.path().join("plain");
        File::create(&plain).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dest), mode(&plain));
    }
}
