//! `cargo xtask bench generate --synth SHAPE[,SHAPE...]`: the generation
//! benchmark on random-weight files of real shapes ([`crate::synth`]),
//! written under `target/synth/` on first use and reused after (one file per
//! shape, type and seed).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

use crate::bench_rules as rules;
use crate::synth::{self, DEFAULT_SEED, Shape, SynthType};

/// The longest wait for the load average to settle after writing files.
const SETTLE: Duration = Duration::from_secs(180);

#[derive(clap::Args, Debug)]
pub(crate) struct SynthArgs {
    /// Measure random-weight files of these real shapes, comma-separated
    /// (the names `cargo xtask synth` takes, e.g. Llama-3.2-1B,Qwen2.5-7B).
    #[arg(long, value_delimiter = ',')]
    synth: Vec<String>,
    /// Weight types of the --synth files.
    #[arg(
        long = "type",
        value_enum,
        default_value = "q4_k_m",
        requires = "synth"
    )]
    synth_type: SynthType,
    /// Seed of the --synth files' weights.
    #[arg(long, default_value_t = DEFAULT_SEED, requires = "synth")]
    synth_seed: u64,
}

impl SynthArgs {
    /// Whether any --synth shape was named.
    pub(crate) fn is_set(&self) -> bool {
        !self.synth.is_empty()
    }
}

/// The shapes --synth names, all checked before anything is written.
fn shapes(args: &SynthArgs) -> Result<Vec<&'static Shape>> {
    let shapes = args
        .synth
        .iter()
        .map(|s| synth::find(s.trim()))
        .collect::<Result<Vec<_>>>()?;
    ensure!(!shapes.is_empty(), "--synth names no shape");
    Ok(shapes)
}

/// Writes the --synth files that are missing, before the measured window:
/// writing one keeps every core busy for minutes, so afterwards this waits
/// (at most [`SETTLE`]) for the load average to fall below the busy mark.
pub(crate) fn prepare(args: &SynthArgs, threads: usize, cores: usize) -> Result<()> {
    if !args.is_set() {
        return Ok(());
    }
    let mut wrote = false;
    for shape in shapes(args)? {
        let path = synth::default_path(shape, args.synth_type, args.synth_seed);
        if !path.is_file() {
            eprintln!("bench generate: writing {}", path.display());
            synth::ensure(shape, args.synth_type, args.synth_seed)?;
            wrote = true;
        }
    }
    if wrote {
        let start = Instant::now();
        while rules::busy(rules::load_average(), &[], threads, cores).is_some()
            && start.elapsed() < SETTLE
        {
            std::thread::sleep(Duration::from_secs(5));
        }
    }
    Ok(())
}

/// The --synth files (written first where missing), or `None` without --synth.
pub(crate) fn files(args: &SynthArgs) -> Result<Option<Vec<PathBuf>>> {
    if !args.is_set() {
        return Ok(None);
    }
    let mut files = Vec::new();
    for shape in shapes(args)? {
        let path = synth::ensure(shape, args.synth_type, args.synth_seed)?;
        eprintln!(
            "bench generate: {} {}: {}",
            shape.name,
            args.synth_type.name(),
            path.display()
        );
        files.push(path);
    }
    Ok(Some(files))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        synth: SynthArgs,
    }

    #[test]
    fn shapes_types_and_seed_parse() {
        let cli =
            Cli::try_parse_from(["x", "--synth", "Llama-3.2-1B,qwen3-0.6b", "--type", "q8_0"])
                .unwrap();
        assert_eq!(cli.synth.synth, ["Llama-3.2-1B", "qwen3-0.6b"]);
        assert_eq!(cli.synth.synth_type, SynthType::Q8_0);
        assert_eq!(cli.synth.synth_seed, DEFAULT_SEED);
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert!(!cli.synth.is_set());
        assert_eq!(files(&cli.synth).unwrap(), None);
        assert!(
            Cli::try_parse_from(["x", "--type", "q4_k_m"]).is_err(),
            "--type without --synth"
        );
        assert!(Cli::try_parse_from(["x", "--synth", "gemma-2-2b", "--type", "q5_k"]).is_err());
    }

    #[test]
    fn unknown_shapes_fail_before_anything_is_written() {
        let cli = Cli::try_parse_from(["x", "--synth", "Llama-3.2-1B,llama-65b"]).unwrap();
        let err = files(&cli.synth).unwrap_err().to_string();
        assert!(err.contains("llama-65b"), "{err}");
    }
}
