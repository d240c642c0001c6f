//! Tidy rule: the CLI's and the Python module's release builds ask for the
//! same features of every crate they share.
//!
//! CI builds the `lamina` binary, then the wheel. Cargo compiles a crate again
//! when its features differ, and every crate above it too, so one feature
//! apart recompiles the whole engine for the wheel. `crates/workspace-hack`
//! asks for the union; this rule says what to add there when they part.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::tidy::Violation;

/// Where the union of the two builds' features is asked for.
const HACK_MANIFEST: &str = "crates/workspace-hack/Cargo.toml";

/// Each package (`name vX.Y.Z`) of a `cargo tree -f "{p} [{f}]" --prefix none`
/// listing and the feature lists it is built with: two when it is built for
/// the host (proc-macros, build scripts) and the target with different ones.
pub(crate) fn feature_sets(tree: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in tree.lines() {
        let line = line.trim().trim_end_matches(" (*)");
        let Some((package, rest)) = line.split_once(" [") else {
            continue;
        };
        let Some(features) = rest.split_once(']').map(|(f, _)| f) else {
            continue;
        };
        // `name vX.Y.Z (path)` for workspace crates: the name and version.
        let package: String = package.split(' ').take(2).collect::<Vec<_>>().join(" ");
        sets.entry(package).or_default().insert(features.to_owned());
    }
    sets
}

/// One violation per package both listings hold with different features.
pub(crate) fn check_aligned(cli: &str, python: &str) -> Vec<Violation> {
    let (cli, python) = (feature_sets(cli), feature_sets(python));
    let mut violations = Vec::new();
    for (package, a) in &cli {
        let Some(b) = python.get(package) else {
            continue;
        };
        if a != b {
            let show = |s: &BTreeSet<String>| {
                s.iter()
                    .map(|f| format!("[{f}]"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            };
            violations.push(Violation {
                file: HACK_MANIFEST.to_owned(),
                line: 1,
                message: format!(
                    "lamina-cli builds {package} with features {} and lamina-python with {}: \
                     ask for the union here (under [build-dependencies] for a proc-macro's \
                     dependency), or the wheel's build compiles the engine again",
                    show(a),
                    show(b)
                ),
            });
        }
    }
    violations
}

/// `cargo tree` of one package's normal and build dependencies, with features.
fn tree(root: &Path, args: &[&str]) -> Result<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--locked", "-e", "normal,build"])
        .args(["-f", "{p} [{f}]", "--prefix", "none"])
        .args(args)
        .output()
        .context("running cargo tree")?;
    ensure!(
        out.status.success(),
        "cargo tree {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Runs the rule on the workspace at `root`.
pub(crate) fn check_builds(root: &Path) -> Result<Vec<Violation>> {
    let cli = tree(root, &["-p", "lamina-cli"])?;
    // The features maturin builds the module with (crates/python/pyproject.toml).
    let python = tree(
        root,
        &["-p", "lamina-python", "--features", "extension-module"],
    )?;
    Ok(check_aligned(&cli, &python))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_features_pass_and_parted_ones_are_named() {
        let cli = "libc v0.2.191 [default,extra_traits,std]\n\
                   syn v3.0.9 [default,full] (*)\n\
                   lamina-cli v0.1.0 (/w/crates/cli) []\n\
                   clap v4.5.0 [default]\n";
        let python = "libc v0.2.191 [default,std]\n\
                      syn v3.0.9 [default,full]\n\
                      lamina-python v0.1.0 (/w/crates/python) [extension-module]\n";
        let v = check_aligned(cli, python);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].message.contains("libc v0.2.191"), "{}", v[0].message);
        assert!(v[0].message.contains("[default,extra_traits,std]"));
        assert!(check_aligned(python, python).is_empty());
    }

    #[test]
    fn host_and_target_builds_are_kept_apart() {
        let two = "syn v3.0.9 [full]\nsyn v3.0.9 [full,visit-mut]\n";
        let sets = feature_sets(two);
        assert_eq!(sets["syn v3.0.9"].len(), 2);
        assert_eq!(check_aligned(two, "syn v3.0.9 [full]\n").len(), 1);
    }
}
