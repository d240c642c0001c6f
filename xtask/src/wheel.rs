//! `cargo xtask wheel`: the `lamina` Python package (`crates/python`), built
//! by maturin into `<target>/wheels/`; and its pytest suite, run on the
//! wheel installed into a fresh venv, against the CLI of the same tree.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::{lamina_bin, models, run, target_dir, workspace_root};

/// The maturin that builds the wheel (pinned: the wheel's layout is its).
const MATURIN: &str = "maturin==1.16.0";

/// Ray Data and what `examples/ray_embed.py` reads and writes with it
/// (pinned: Ray's API moves between releases).
const RAY: &[&str] = &[
    "ray[data]==2.60.0",
    "pyarrow==26.0.1",
    "pandas==3.1.1",
    "pytest",
];

/// The first Python 3 on PATH.
fn python() -> Result<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .context("no python3 on PATH: the Python package needs one to build and test")
}

/// A venv at `dir` (made if missing) with `packages` pip-installed; returns
/// its interpreter.
fn venv(dir: &Path, packages: &[&str]) -> Result<PathBuf> {
    let py = dir.join("bin/python");
    if !py.is_file() {
        run(Command::new(python()?).args(["-m", "venv"]).arg(dir))
            .context("making a venv (install python3-venv)")?;
    }
    run(Command::new(&py)
        .args(["-m", "pip", "install", "--quiet"])
        .args(packages))?;
    Ok(py)
}

/// Builds the release wheel and returns its path.
pub(crate) fn build() -> Result<PathBuf> {
    let py = venv(&target_dir().join("maturin-venv"), &[MATURIN])?;
    let out = target_dir().join("wheels");
    if out.is_dir() {
        for e in std::fs::read_dir(&out)? {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "whl") {
                std::fs::remove_file(p)?;
            }
        }
    }
    run(Command::new(&py)
        .args(["-m", "maturin", "build", "--release", "--quiet", "-m"])
        .arg(workspace_root().join("crates/python/Cargo.toml"))
        .arg("-o")
        .arg(&out))?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    ensure!(
        wheels.len() == 1,
        "maturin left {} wheels in {}",
        wheels.len(),
        out.display()
    );
    Ok(wheels[0].clone())
}

/// Builds the wheel, installs it into a fresh venv with pytest, and runs
/// `crates/python/tests` with the project's models and CLI; then runs
/// `examples/test_ray_embed.py` (the Ray Data example on a local Ray
/// instance) in a venv with Ray.
pub(crate) fn python_test() -> Result<()> {
    let wheel = build()?;
    let bin = lamina_bin()?;
    let dir = target_dir().join("python-test-venv");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let wheel_arg = wheel.display().to_string();
    let py = venv(&dir, &[wheel_arg.as_str(), "pytest"])?;
    run(Command::new(&py)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(workspace_root().join("crates/python/tests"))
        // Not the source tree: the installed package is what is tested.
        .current_dir(target_dir())
        .env("LAMINA_MODELS", models::default_dir()?)
        .env("LAMINA_BIN", &bin))?;
    ray_example(&wheel)
}

/// `examples/test_ray_embed.py` in `<target>/ray-venv`, kept between runs
/// since Ray is large, with the wheel reinstalled.
fn ray_example(wheel: &Path) -> Result<()> {
    let py = venv(&target_dir().join("ray-venv"), RAY)?;
    run(Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--force-reinstall",
            "--no-deps",
        ])
        .arg(wheel))?;
    run(Command::new(&py)
        // -s: each run prints the example's throughput.
        .args(["-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"])
        .arg(workspace_root().join("examples/test_ray_embed.py"))
        .current_dir(target_dir())
        .env("LAMINA_MODELS", models::default_dir()?)
        .env("RAY_USAGE_STATS_ENABLED", "0"))
}
