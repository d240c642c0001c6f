//! `lamina quantize IN OUT TYPE`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use lamina_model::requantize::{Target, quantize_file};
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input GGUF file.
    input: PathBuf,
    /// Output GGUF file (written to a temporary file first, renamed when complete).
    output: PathBuf,
    /// Target, by llama-quantize's names: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
    /// Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S,
    /// Q5_K_M, Q6_K (the K mixes choose per tensor as llama-quantize does).
    #[arg(value_name = "TYPE")]
    target: String,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let target = Target::parse(&args.target)?;
    if let Some(n) = args.threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    if args.input == args.output {
        bail!("the output must be a different file from the input");
    }
    let t0 = Instant::now();
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} tensors {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = quantize_file(&args.input, &args.output, target, &mut |i, n, name| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
        bar.set_message(name.to_string());
    })
    .with_context(|| format!("quantizing {} to {}", args.input.display(), args.target))?;
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    if args.json {
        println!(
            "{}",
            json!({"output": args.output.display().to_string(), "target": args.target,
                   "tensors": report.tensors, "converted": report.converted,
                   "requantized": report.requantized, "types": report.types,
                   "bytes_in": report.bytes_in,
                   "bytes_out": report.bytes_out, "seconds": secs})
        );
    } else {
        let types: Vec<String> = report
            .types
            .iter()
            .map(|(ty, n)| format!("{n} {ty}"))
            .collect();
        eprintln!(
            "wrote {} as {} ({} tensors: {}; {} converted, {:.1} MB → {:.1} MB) in {secs:.1} s",
            args.output.display(),
            target.name(),
            report.tensors,
            types.join(", "),
            report.converted,
            report.bytes_in as f64 / 1e6,
            report.bytes_out as f64 / 1e6,
        );
    }
    Ok(())
}
