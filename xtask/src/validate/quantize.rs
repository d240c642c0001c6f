//! Quantizer bytes: `lamina quantize` against the whole-file SHA-256s of
//! llama.cpp's `llama-quantize` in `testdata/quantize/` (one
//! `INPUT TARGET SHA256` line per case): `llama-quantize.sha256`, the cases
//! the tests run, and `llama-quantize-sweep.sha256`, every other target on
//! every model, which only this check runs. With `--live`, llama-quantize
//! is also rerun now and compared with its gold (drift upstream).

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

use super::{Ctx, Row, Status};
use crate::models::hash_file;

/// One gold line.
pub(super) struct Case {
    pub input: String,
    pub target: String,
    pub sha256: String,
}

pub(super) fn parse_cases(text: &str) -> Result<Vec<Case>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            ensure!(
                f.len() == 3 && f[2].len() == 64,
                "bad line in llama-quantize.sha256: {l:?}"
            );
            Ok(Case {
                input: f[0].into(),
                target: f[1].into(),
                sha256: f[2].into(),
            })
        })
        .collect()
}

fn quantize_with(cmd: &mut Command, what: &str) -> Result<()> {
    let o = cmd.stdin(Stdio::null()).output()?;
    ensure!(
        o.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    Ok(())
}

/// The gold files, in the order their cases run.
const GOLD_FILES: [&str; 2] = ["llama-quantize.sha256", "llama-quantize-sweep.sha256"];

pub(super) fn quantizer(ctx: &Ctx) -> Result<Vec<Row>> {
    let mut cases = Vec::new();
    for name in GOLD_FILES {
        let gold = ctx.root.join("testdata/quantize").join(name);
        cases.extend(parse_cases(
            &std::fs::read_to_string(&gold)
                .with_context(|| format!("reading {}", gold.display()))?,
        )?);
    }
    let dir = crate::target_dir().join("validate");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("quantized.gguf");
    let rows = quantize_cases(ctx, &cases, &out);
    // A failed case must not leave hundreds of megabytes behind on a full disk.
    std::fs::remove_file(&out).ok();
    rows
}

fn quantize_cases(ctx: &Ctx, cases: &[Case], out: &Path) -> Result<Vec<Row>> {
    const CHECK: &str = "quantized file vs llama-quantize (SHA-256)";
    let mut rows = Vec::new();
    for c in cases {
        let input = ctx.models.join(&c.input);
        let label = format!("{} → {}", c.input, c.target);
        if !input.is_file() {
            rows.push(Row::skip(
                CHECK,
                &label,
                format!("{} is missing (cargo xtask models)", input.display()),
            ));
            continue;
        }
        quantize_with(
            Command::new(&ctx.lamina)
                .arg("quantize")
                .arg(&input)
                .arg(out)
                .arg(&c.target),
            "lamina quantize",
        )?;
        let ours = hash_file(out, "lamina's output")?;
        rows.push(Row {
            check: CHECK.into(),
            model: label.clone(),
            figure: short(&ours),
            threshold: format!("= {}", short(&c.sha256)),
            status: if ours == c.sha256 {
                Status::Pass
            } else {
                Status::Fail
            },
        });
        if ctx.live {
            rows.push(live(&input, out, c, &label)?);
        }
    }
    Ok(rows)
}

fn live(input: &Path, out: &Path, c: &Case, label: &str) -> Result<Row> {
    quantize_with(
        Command::new(crate::llama_cpp::llama_cpp_bin("llama-quantize")?)
            .arg("--allow-requantize")
            .arg(input)
            .arg(out)
            .arg(&c.target),
        "llama-quantize",
    )?;
    let now = hash_file(out, "llama-quantize's output")?;
    Ok(Row {
        check: "llama-quantize live vs its gold (drift)".into(),
        model: label.into(),
        figure: short(&now),
        threshold: format!("= {}", short(&c.sha256)),
        status: if now == c.sha256 {
            Status::Pass
        } else {
            Status::Fail
        },
    })
}

/// The first 12 hex digits: enough to tell files apart in a table.
fn short(sha: &str) -> String {
    sha.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_lines_are_parsed() {
        let sha = "ab".repeat(32);
        let text = format!("# comment\n\nin.gguf  Q8_0  {sha}\n");
        let cases = parse_cases(&text).unwrap();
        assert_eq!(cases.len(), 1);
        assert_eq!(
            (cases[0].input.as_str(), cases[0].target.as_str()),
            ("in.gguf", "Q8_0")
        );
        assert!(parse_cases("in.gguf Q8_0 short").is_err());
        // The files in the repository parse.
        let root = crate::workspace_root();
        for name in GOLD_FILES {
            let real = std::fs::read_to_string(root.join("testdata/quantize").join(name)).unwrap();
            assert!(!parse_cases(&real).unwrap().is_empty(), "{name}");
        }
    }
}
