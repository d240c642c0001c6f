//! `lamina rerank`: score documents against a query with a cross-encoder
//! and print them from the most relevant down.
//!
//! A score is the sigmoid of the model's relevance logit (0..1, as the
//! server's `/v1/rerank` `relevance_score`), or the logit itself with
//! `--raw-scores` (as the server's `"raw_scores": true`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lamina_model::Load;
use lamina_model::embed::{EmbedOptions, Embedder};
use lamina_server::rerank::{ranking, sigmoid};
use serde_json::json;

use crate::embed::{read_texts, thread_pool};
use crate::models;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Reranker model (a cross-encoder): a file, a name in the models
    /// directory, or hf://ORG/REPO[:QUANT].
    #[arg(short, long)]
    model: String,
    /// The query the documents are scored against.
    #[arg(short, long)]
    query: String,
    /// Documents to score (else --file, else one per line from stdin).
    documents: Vec<String>,
    /// Read documents from a file, one per line.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Print only the N most relevant documents.
    #[arg(long)]
    top_n: Option<usize>,
    /// Print raw relevance logits instead of their sigmoid.
    #[arg(long)]
    raw_scores: bool,
    /// Cut the end of documents that do not fit the context with the query
    /// instead of refusing them.
    #[arg(long)]
    truncate: bool,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Tokens per forward pass when scoring many documents.
    #[arg(long, default_value_t = 512)]
    batch_tokens: usize,
    /// One JSON object per document, most relevant first: {"index", "score", "text"}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let pool = thread_pool(args.threads)?;
    if args.query.is_empty() {
        bail!("--query is empty");
    }
    if args.top_n == Some(0) {
        bail!("--top-n must be at least 1");
    }
    let path = models::resolve(&args.model)?;
    // Read the input before loading the model, so bad input fails fast.
    let docs = read_texts(args.documents, args.file.as_ref())?;
    if docs.is_empty() {
        bail!("no document to score: pass documents as arguments, --file, or lines on stdin");
    }
    let t0 = Instant::now();
    let model = models::load_options(Load::Map, None)
        .open(&path)
        .with_context(|| format!("loading {}", path.display()))?;
    let mut embedder = Embedder::new(model)?;
    if !embedder.is_reranker() {
        bail!(
            "{} is an embedding model, not a reranker (a cross-encoder whose GGUF has \
             pooling type rank): use `lamina embed` with it",
            path.display()
        );
    }
    tracing::info!(
        "loaded {} in {:.0} ms; kernels {:?}, {} threads",
        path.display(),
        t0.elapsed().as_secs_f64() * 1e3,
        embedder.model.isa(),
        pool.threads()
    );
    let opts = EmbedOptions {
        truncate: args.truncate,
        batch_tokens: args.batch_tokens.max(1),
        ..EmbedOptions::default()
    };
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let t1 = Instant::now();
    let logits = embedder.rerank(&args.query, &refs, &opts, pool.as_ref())?;
    tracing::info!(
        "scored {} documents in {:.1} ms",
        logits.len(),
        t1.elapsed().as_secs_f64() * 1e3
    );
    let scores: Vec<f32> = if args.raw_scores {
        logits
    } else {
        logits.into_iter().map(sigmoid).collect()
    };
    let top_n = args.top_n.unwrap_or(docs.len());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for i in ranking(&scores, top_n) {
        if args.json {
            let line = json!({"index": i, "score": scores[i], "text": docs[i]});
            writeln!(out, "{line}")?;
        } else {
            writeln!(out, "{i}\t{:.6}\t{}", scores[i], docs[i])?;
        }
    }
    out.flush()?;
    Ok(())
}
