//! `lamina embed` and `lamina tokenize`.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lamina_model::embed::{EmbedOptions, Embedder};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{Load, Rayon, SpinPool, ThreadPool};
use serde_json::json;

use crate::models;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file, a name in the models directory, or hf://ORG/REPO[:QUANT].
    #[arg(short, long)]
    model: String,
    /// Texts to embed (else --file, else one per line from stdin).
    texts: Vec<String>,
    /// Read texts from a file, one per line.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Task prompt: one of the model's prompt names (EmbeddingGemma: `query`,
    /// `document`, ...; nomic: `search_query`, ...), or any other text used
    /// as the prefix.
    #[arg(long)]
    task: Option<String>,
    /// Matryoshka dimension (e.g. 512, 256, 128): truncate and re-normalise.
    #[arg(long)]
    dim: Option<usize>,
    /// Cut texts longer than the context instead of refusing them.
    #[arg(long)]
    truncate: bool,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Tokens per forward pass when embedding many texts.
    #[arg(long, default_value_t = 512)]
    batch_tokens: usize,
    /// One JSON object per text: {"index", "n_tokens", "embedding"}.
    #[arg(long)]
    json: bool,
}

/// Sizes rayon's global pool from `--threads` (default: every core) and
/// returns that thread count.
pub fn init_threads(threads: Option<usize>) -> Result<usize> {
    let n = match threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    // Ignore "already initialised" (a second call in one process keeps the first size).
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    Ok(n)
}

/// The compute pool, with `--threads` workers (default: every core): the
/// persistent spinning pool ([`SpinPool`]), whose workers spin briefly
/// between a forward pass's short parallel regions instead of being woken
/// through the OS each time (then park, so an idle pool costs no CPU).
/// `LAMINA_POOL=rayon` uses rayon's global pool instead, which degrades less
/// on an oversubscribed machine, where spinning workers steal each other's
/// cores. rayon's global pool is sized to
/// `--threads` either way (model loading and the quantizer use it).
pub fn thread_pool(threads: Option<usize>) -> Result<Box<dyn ThreadPool + Send>> {
    let n = init_threads(threads)?;
    match std::env::var("LAMINA_POOL").as_deref() {
        Ok("rayon") => Ok(Box::new(Rayon)),
        Ok("spin") | Ok("") | Err(_) => Ok(Box::new(SpinPool::new(n))),
        Ok(other) => bail!("LAMINA_POOL={other:?}: use spin (the default) or rayon"),
    }
}

/// Texts from arguments, else a file, else stdin (one per line; `\n` or
/// `\r\n` ends a line).
pub fn read_texts(texts: Vec<String>, file: Option<&PathBuf>) -> Result<Vec<String>> {
    if !texts.is_empty() {
        return Ok(texts);
    }
    let lines = |r: &mut dyn BufRead, what: &str| -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (i, line) in r.split(b'\n').enumerate() {
            let mut line = line.with_context(|| format!("reading {what}"))?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            match String::from_utf8(line) {
                Ok(s) => out.push(s),
                Err(e) => bail!(
                    "line {} of {what} is not valid UTF-8 text ({})",
                    i + 1,
                    e.utf8_error()
                ),
            }
        }
        Ok(out)
    };
    match file {
        Some(f) => {
            let fh = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
            lines(&mut std::io::BufReader::new(fh), &f.display().to_string())
        }
        None => lines(&mut std::io::stdin().lock(), "stdin"),
    }
}

pub fn run(args: Args) -> Result<()> {
    let pool = thread_pool(args.threads)?;
    let path = models::resolve(&args.model)?;
    // Read the input before loading the model, so bad input fails fast.
    let texts = read_texts(args.texts, args.file.as_ref())?;
    if texts.is_empty() {
        bail!("no text to embed: pass texts as arguments, --file, or lines on stdin");
    }
    let t0 = Instant::now();
    let model = models::load_options(Load::Map, None)
        .open(&path)
        .with_context(|| format!("loading {}", path.display()))?;
    let mut embedder = Embedder::new(model)?;
    if embedder.is_reranker() {
        bail!(
            "{} is a reranker (a cross-encoder), not an embedding model: use `lamina rerank` with it",
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
    let prefix = match args.task.as_deref() {
        None => String::new(),
        Some(name) => match embedder.task_prefix(name) {
            Some(prefix) => prefix.to_string(),
            None => name.to_string(),
        },
    };
    let opts = EmbedOptions {
        prefix,
        dim: args.dim,
        truncate: args.truncate,
        batch_tokens: args.batch_tokens.max(1),
        ..EmbedOptions::default()
    };
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t1 = Instant::now();
    let embeddings = embedder.embed(&refs, &opts, pool.as_ref())?;
    tracing::info!(
        "embedded {} texts in {:.1} ms",
        embeddings.len(),
        t1.elapsed().as_secs_f64() * 1e3
    );
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (i, e) in embeddings.iter().enumerate() {
        if args.json {
            let line = json!({"index": i, "n_tokens": e.n_tokens, "embedding": e.vector});
            writeln!(out, "{line}")?;
        } else {
            let vals: Vec<String> = e.vector.iter().map(|v| format!("{v:.6}")).collect();
            writeln!(out, "{}", vals.join(" "))?;
        }
    }
    out.flush()?;
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    /// Model file, a name in the models directory, or hf://ORG/REPO[:QUANT].
    #[arg(short, long)]
    model: String,
    /// Text to tokenize (else --file, else stdin).
    text: Option<String>,
    #[arg(long)]
    file: Option<PathBuf>,
    /// Do not add BOS/EOS.
    #[arg(long)]
    no_bos: bool,
    /// Treat special-token text such as `<bos>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// Print {"ids": [...], "pieces": [...]}.
    #[arg(long)]
    json: bool,
}

pub fn tokenize(args: TokenizeArgs) -> Result<()> {
    let path = models::resolve(&args.model)?;
    let g =
        lamina_gguf::Gguf::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let tok = Tokenizer::from_gguf(&g)?;
    let text = match (args.text, &args.file) {
        (Some(t), _) => t,
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading {} (it must be UTF-8 text)", f.display()))?,
        (None, None) => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .context("stdin is not valid UTF-8 text")?;
            s
        }
    };
    let ids = tok.encode(&text, !args.no_bos, !args.no_parse_special);
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| String::from_utf8_lossy(&tok.token_to_piece(id, true)).into_owned())
        .collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", json!({"ids": ids, "pieces": pieces}))?;
    } else {
        for (id, p) in ids.iter().zip(&pieces) {
            writeln!(out, "{id:>6} -> '{p}'")?;
        }
    }
    Ok(())
}
