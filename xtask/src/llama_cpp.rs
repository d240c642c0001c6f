//! `cargo xtask llama-cpp`: fetch and build llama.cpp, the reference that
//! `validate --live` and `bench` compare against.
//!
//! llama.cpp is published on PyPI as the source package of
//! `llama-cpp-python` (the only network this project's machines reach);
//! version [`PY_VERSION`] vendors llama.cpp commit [`COMMIT`] under
//! `vendor/llama.cpp`, complete with its CMake build. This module downloads
//! that source package with pip, extracts it with `tar`, configures it with
//! [`CMAKE_FLAGS`] and builds [`TARGETS`] into `<target>/llama.cpp/build/bin`,
//! once: a stamp file records what was built, and later runs reuse the build
//! while the stamp matches (`--force` rebuilds from scratch).
//!
//! `LAMINA_LLAMA_CPP=/path/to/bin` points every command at an existing build
//! instead (a folder holding `llama-bench`, `llama-embedding`, ...).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::{run, target_dir};

/// The `llama-cpp-python` source package that vendors the reference llama.cpp.
pub(crate) const PY_VERSION: &str = "0.3.36";
/// The llama.cpp commit vendored by [`PY_VERSION`].
pub(crate) const COMMIT: &str = "0c1e57098bba43ac29e6e3b677cdceebdd22334f";
/// The tools built.
pub(crate) const TARGETS: &[&str] = &[
    "llama-bench",
    "llama-embedding",
    "llama-quantize",
    "llama-tokenize",
    "llama-simple",
    "llama-cli",
    "llama-completion",
    "llama-server",
];
const CMAKE_FLAGS: &[&str] = &[
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    // `-march=native` turns on ggml's AMX matmul on CPUs that have AMX, and on
    // VMs that do not grant the AMX tile state (this project's machines) it
    // crashes in `ggml_backend_amx_mul_mat`. The AVX-512 VNNI paths stay on.
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
];
/// Environment variable naming an existing llama.cpp `bin` folder.
pub(crate) const ENV_BIN: &str = "LAMINA_LLAMA_CPP";

/// `<target>/llama.cpp`: download, sources, build and stamp.
fn cache_dir() -> PathBuf {
    target_dir().join("llama.cpp")
}

pub(crate) fn cached_bin_dir() -> PathBuf {
    cache_dir().join("build/bin")
}

/// What the stamp file holds for a complete build of this configuration.
fn stamp_text() -> String {
    format!(
        "llama-cpp-python {PY_VERSION}\nllama.cpp commit {COMMIT}\ncmake {}\ntargets {}\n",
        CMAKE_FLAGS.join(" "),
        TARGETS.join(" ")
    )
}

fn stamp_path() -> PathBuf {
    cache_dir().join("stamp.txt")
}

/// The override folder from [`ENV_BIN`], if set.
fn override_dir() -> Option<PathBuf> {
    std::env::var_os(ENV_BIN)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// Whether the cache holds a complete build matching this configuration.
fn cache_is_complete() -> bool {
    let stamp_ok = fs::read_to_string(stamp_path()).is_ok_and(|s| s == stamp_text());
    stamp_ok && TARGETS.iter().all(|t| cached_bin_dir().join(t).is_file())
}

/// The folder holding the llama.cpp tools: [`ENV_BIN`] when set, else the
/// cache under `target/`, built first if it is not there yet.
pub(crate) fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = override_dir() {
        ensure!(
            dir.is_dir(),
            "{ENV_BIN}={} is not a folder (it should hold llama-bench, llama-embedding, ...)",
            dir.display()
        );
        return Ok(dir);
    }
    if cache_is_complete() {
        return Ok(cached_bin_dir());
    }
    eprintln!(
        "llama.cpp is not built yet: building it once now (15-25 minutes on 2 cores; \
         set {ENV_BIN}=/path/to/llama.cpp/build/bin to use an existing build)"
    );
    build(false)
}

/// The tools' folder if there is one already (never builds).
pub(crate) fn existing_bin_dir() -> Option<PathBuf> {
    match override_dir() {
        Some(d) => Some(d),
        None => cache_is_complete().then(cached_bin_dir),
    }
}

/// The path of one llama.cpp tool, e.g. `llama_cpp_bin("llama-bench")`.
pub(crate) fn llama_cpp_bin(name: &str) -> Result<PathBuf> {
    let path = bin_dir()?.join(name);
    ensure!(
        path.is_file(),
        "{} is missing (run `cargo xtask llama-cpp`, or fix {ENV_BIN})",
        path.display()
    );
    Ok(path)
}

/// The llama.cpp commit a build reports (`llama-bench --version` prints
/// `version: N (commit abc1234)` or `... (build N, commit abc1234)`).
pub(crate) fn reported_commit(bin_dir: &Path) -> Option<String> {
    let out = Command::new(bin_dir.join("llama-bench"))
        .arg("--version")
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_version_commit(&text)
}

/// The commit from llama.cpp's `--version` text.
pub(crate) fn parse_version_commit(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("version:"))?;
    let after = &line[line.find("commit ")? + "commit ".len()..];
    let commit: String = after
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    (!commit.is_empty()).then_some(commit)
}

/// `cargo xtask llama-cpp [--force]`: builds (or reuses) the cache and
/// returns its `bin` folder.
pub(crate) fn build(force: bool) -> Result<PathBuf> {
    if let Some(dir) = override_dir() {
        println!(
            "{ENV_BIN} is set: using the llama.cpp tools in {} (nothing to build)",
            dir.display()
        );
        for t in TARGETS {
            if !dir.join(t).is_file() {
                eprintln!("warning: {} has no {t}", dir.display());
            }
        }
        if let Some(c) = reported_commit(&dir) {
            println!("llama.cpp commit {c}");
        }
        return Ok(dir);
    }
    let cache = cache_dir();
    if !force && cache_is_complete() {
        println!(
            "llama.cpp {} (llama-cpp-python {PY_VERSION}) is built: {}",
            &COMMIT[..7],
            cached_bin_dir().display()
        );
        return Ok(cached_bin_dir());
    }
    fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let _ = fs::remove_file(stamp_path());
    check_toolchain()?;

    // 1. The source package.
    let dl = cache.join("download");
    if force {
        let _ = fs::remove_dir_all(&dl);
    }
    let sdist = match find_sdist(&dl) {
        Some(p) => p,
        None => {
            fs::create_dir_all(&dl)?;
            run(Command::new("python3")
                .args(["-m", "pip", "download", "--no-deps", "--no-binary"])
                .arg("llama-cpp-python")
                .arg(format!("llama-cpp-python=={PY_VERSION}"))
                .arg("-d")
                .arg(&dl))
            .context(
                "pip could not download the llama-cpp-python source package \
                 (pip and a reachable package index are needed)",
            )?;
            find_sdist(&dl).with_context(|| {
                format!(
                    "pip ran, but {} holds no llama_cpp_python-{PY_VERSION}.tar.gz",
                    dl.display()
                )
            })?
        }
    };

    // 2. Extract afresh.
    let src_root = cache.join("src");
    let _ = fs::remove_dir_all(&src_root);
    fs::create_dir_all(&src_root)?;
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&sdist)
        .arg("-C")
        .arg(&src_root))?;
    let src = find_vendored(&src_root)?;

    // 3. Configure and build.
    let build_dir = cache.join("build");
    if force {
        let _ = fs::remove_dir_all(&build_dir);
    }
    run(Command::new("cmake")
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&build_dir)
        .args(CMAKE_FLAGS))
    .context("configuring llama.cpp with cmake")?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    eprintln!(
        "building {} with {jobs} jobs (15-25 minutes on 2 cores)",
        TARGETS.join(" ")
    );
    run(Command::new("cmake")
        .arg("--build")
        .arg(&build_dir)
        .args(["--config", "Release", "-j"])
        .arg(jobs.to_string())
        .arg("--target")
        .args(TARGETS))
    .context("building llama.cpp")?;

    let bin = cached_bin_dir();
    for t in TARGETS {
        ensure!(
            bin.join(t).is_file(),
            "the build finished but {} is missing",
            bin.join(t).display()
        );
    }
    match reported_commit(&bin) {
        Some(c) if COMMIT.starts_with(&c) => {}
        Some(c) => eprintln!("warning: the build reports commit {c}, expected {COMMIT}"),
        None => eprintln!("warning: could not read the commit from llama-bench --version"),
    }
    fs::write(stamp_path(), stamp_text())?;
    println!(
        "llama.cpp {} (llama-cpp-python {PY_VERSION}) built: {}",
        &COMMIT[..7],
        bin.display()
    );
    Ok(bin)
}

/// The downloaded source archive in `dl`, if there.
fn find_sdist(dl: &Path) -> Option<PathBuf> {
    let entries = fs::read_dir(dl).ok()?;
    entries.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let name = name.replace('-', "_");
        name.starts_with(&format!("llama_cpp_python_{PY_VERSION}")) && name.ends_with(".tar.gz")
    })
}

/// `<src_root>/<one folder>/vendor/llama.cpp`, checked to hold a CMake project.
fn find_vendored(src_root: &Path) -> Result<PathBuf> {
    for entry in fs::read_dir(src_root)? {
        let dir = entry?.path().join("vendor/llama.cpp");
        if dir.join("CMakeLists.txt").is_file() {
            return Ok(dir);
        }
    }
    bail!(
        "the llama-cpp-python {PY_VERSION} source package has no vendor/llama.cpp/CMakeLists.txt under {}",
        src_root.display()
    )
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// python3, tar and a C++ compiler must be there; cmake is installed with
/// apt-get when missing.
fn check_toolchain() -> Result<()> {
    ensure!(
        have("python3"),
        "python3 (with pip) is needed to download llama.cpp"
    );
    ensure!(have("tar"), "tar is needed to extract llama.cpp");
    ensure!(
        have("c++") || have("g++") || have("clang++"),
        "a C++ compiler is needed to build llama.cpp (apt-get install -y build-essential)"
    );
    if have("cmake") {
        return Ok(());
    }
    eprintln!("cmake is missing: installing it with apt-get");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", "cmake"]) {
        // The package lists may be missing or stale.
        let _ = apt(&["update"]);
        if !apt(&["install", "-y", "cmake"]) {
            bail!(
                "cmake is missing and `apt-get install -y cmake` failed (not root, or no apt?): \
                 install CMake 3.14 or newer and run `cargo xtask llama-cpp` again"
            );
        }
    }
    ensure!(
        have("cmake"),
        "apt-get installed cmake but `cmake --version` still fails"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_commit_is_parsed() {
        let text = "load_backend: loaded CPU\nversion: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n";
        assert_eq!(parse_version_commit(text).as_deref(), Some("0c1e570"));
        assert_eq!(
            parse_version_commit("version: 6123 (abcdef12)\n"),
            None,
            "no `commit` word"
        );
        assert_eq!(
            parse_version_commit("version: 1 (commit deadbee)").as_deref(),
            Some("deadbee")
        );
        assert_eq!(parse_version_commit("nothing here"), None);
    }

    #[test]
    fn stamp_names_version_commit_and_targets() {
        let s = stamp_text();
        assert!(s.contains(PY_VERSION) && s.contains(COMMIT));
        for t in TARGETS {
            assert!(s.contains(t));
        }
    }
}
