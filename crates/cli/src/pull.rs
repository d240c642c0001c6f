//! `lamina pull`: a model from the Hugging Face Hub into the local cache.

use std::time::Instant;

use anyhow::Result;
use lamina_hub::{Hub, HubModel};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// ORG/REPO[:QUANT] (or hf://ORG/REPO[:QUANT]). A GGUF repo gives the
    /// file of that quantization (Q4_K_M when none is given); a safetensors
    /// checkpoint is converted to GGUF, f16 or the type given (F32, Q8_0,
    /// Q4_K_M, ...). HF_TOKEN, HF_ENDPOINT, HF_HOME, HF_HUB_CACHE and
    /// HF_HUB_OFFLINE apply.
    pub model: String,
    /// Print one JSON object (repo, commit, path, ...) instead of the path.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let model = HubModel::parse(&args.model)?;
    let start = Instant::now();
    let pulled = Hub::from_env().pull(&model)?;
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        let v = serde_json::json!({
            "model": model.to_string(),
            "repo": model.repo(),
            "commit": pulled.commit,
            "file": pulled.file,
            "converted": pulled.file.is_none(),
            "path": pulled.path,
            "downloaded_bytes": pulled.downloaded,
            "seconds": secs,
        });
        println!("{v}");
        return Ok(());
    }
    let how = match &pulled.file {
        Some(file) => file.clone(),
        None => "converted from safetensors".to_string(),
    };
    eprintln!(
        "{model} at {} ({how}): {:.1} MB downloaded in {secs:.1} s; use it as -m hf://{model}",
        &pulled.commit[..pulled.commit.len().min(12)],
        pulled.downloaded as f64 / 1e6,
    );
    println!("{}", pulled.path.display());
    Ok(())
}
