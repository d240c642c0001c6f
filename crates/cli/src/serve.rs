//! `lamina serve`: the OpenAI-compatible HTTP server (lamina-server).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use lamina_server::{ServeConfig, Server};

use crate::embed::thread_pool;
use crate::generate::KvCacheArgs;
use crate::models;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file, name in the models directory, or hf://ORG/REPO[:QUANT]
    /// (repeatable). Embedding models serve /v1/embeddings, rerankers
    /// (cross-encoders) /v1/rerank, the others /v1/completions and
    /// /v1/chat/completions; every model serves /tokenize and /detokenize.
    /// Requests name a model by its file name without `.gguf`.
    #[arg(short, long = "model", required = true)]
    models: Vec<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 routes and /metrics
    /// (default: $LAMINA_API_KEY if set).
    #[arg(long)]
    api_key: Option<String>,
    /// Compute threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Most texts batched into one embedding run.
    #[arg(long, default_value_t = 64)]
    max_batch: usize,
    /// How long (ms) the embedding worker waits for more requests to batch.
    #[arg(long, default_value_t = 3)]
    batch_window_ms: u64,
    /// Tokens per embedding forward pass (texts are packed whole).
    #[arg(long, default_value_t = 512)]
    batch_tokens: usize,
    /// Generation context per slot in tokens (default: the training context, at most 4096).
    #[arg(short = 'c', long)]
    ctx: Option<usize>,
    /// Generations decoded together per generative model, in one forward
    /// pass a token; the KV cache holds --parallel × --ctx positions.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Requests that may wait per model; beyond, 503 with Retry-After.
    #[arg(long, default_value_t = 128)]
    max_queue: usize,
    /// Most choices (`n`) one completion request may ask for; each is a
    /// generation of its own, sharing the prompt's cached keys and values.
    #[arg(long, default_value_t = 8)]
    max_n: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body: usize,
    /// Most inputs in one embeddings request, or documents in one rerank request.
    #[arg(long, default_value_t = 2048)]
    max_inputs: usize,
    /// Largest rerank query or document, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    max_document_bytes: usize,
    /// The task prompt (e.g. `query`, `search_document`) of embeddings
    /// requests that name none, for the models that have it.
    #[arg(long)]
    default_task: Option<String>,
    /// Cut texts (rerank: documents) longer than the context instead of
    /// refusing them, unless a request says `"truncate": false`.
    #[arg(long)]
    truncate: bool,
    /// Seconds a client has to send a request head; also how long an idle
    /// keep-alive connection waits for its next request.
    #[arg(long, default_value_t = 10.0)]
    header_timeout: f64,
    /// Seconds a client has to send a whole request body (beyond: 408).
    #[arg(long, default_value_t = 30.0)]
    body_timeout: f64,
    /// Seconds a response write may make no progress (a client that stopped
    /// reading) before the connection is closed.
    #[arg(long, default_value_t = 60.0)]
    write_timeout: f64,
    /// Most open connections; beyond, new ones wait to be accepted.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Most POST requests handled at once; beyond, 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    max_in_flight: usize,
    /// Most tokens in one request's inputs (embeddings, completion prompt); beyond, 413.
    #[arg(long, default_value_t = 65536)]
    max_request_tokens: usize,
    /// A host name (with or without :port) answered besides localhost,
    /// loopback addresses and the --host address (repeatable). Bound to a
    /// non-loopback address, the Host header is checked only when given.
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String>,
    /// An origin allowed cross-origin requests (repeatable; `*`: any).
    /// Without it, CORS is off.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Parse special-token text inside chat message content as special
    /// tokens (by default it is tokenized as plain text).
    #[arg(long)]
    chat_special_in_content: bool,
    /// A Jinja chat template file used instead of each model's own (for
    /// example one whose model writes tool calls).
    #[arg(long, value_name = "FILE")]
    chat_template_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    kv: KvCacheArgs,
    #[command(flatten)]
    load: crate::generate::LoadArg,
}

pub fn run(args: Args) -> Result<()> {
    let pool = thread_pool(args.threads)?;
    let api_key = args
        .api_key
        .or_else(|| std::env::var("LAMINA_API_KEY").ok());
    if api_key.as_deref().is_some_and(str::is_empty) {
        bail!("--api-key (or LAMINA_API_KEY) is empty");
    }
    let models = args
        .models
        .iter()
        .map(|m| models::resolve(m))
        .collect::<Result<Vec<_>>>()?;
    let chat_template = match &args.chat_template_file {
        Some(f) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("reading chat template {}", f.display()))?,
        ),
        None => None,
    };
    let cfg = ServeConfig {
        models,
        api_key,
        ctx: args.ctx,
        parallel: args.parallel,
        max_batch: args.max_batch,
        batch_window: Duration::from_millis(args.batch_window_ms),
        batch_tokens: args.batch_tokens,
        max_queue: args.max_queue,
        max_n: args.max_n,
        max_body: args.max_body,
        max_inputs: args.max_inputs,
        max_document_bytes: args.max_document_bytes,
        default_task: args.default_task,
        truncate: args.truncate,
        kv: args.kv.kv_type(),
        // A served model is loaded once: embedding models too are stored as panels.
        load: models::load_options(args.load.load(), Some(true)),
        header_timeout: secs("--header-timeout", args.header_timeout)?,
        body_timeout: secs("--body-timeout", args.body_timeout)?,
        write_timeout: secs("--write-timeout", args.write_timeout)?,
        max_connections: args.max_connections,
        max_in_flight: args.max_in_flight,
        max_request_tokens: args.max_request_tokens,
        allowed_hosts: args.allowed_hosts,
        cors_origins: args.cors_origins,
        special_in_content: args.chat_special_in_content,
        chat_template,
        ..ServeConfig::default()
    };
    let keyed = cfg.api_key.is_some();
    let server = Server::with_pool(cfg, pool)?;
    let names = server.state().names();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("lamina-http")
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let addr = SocketAddr::new(args.host, args.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "lamina serve: {} on http://{addr}/v1{} (Ctrl-C stops)",
            names.join(", "),
            if keyed { ", API key required" } else { "" }
        );
        if !args.host.is_loopback() && !keyed {
            tracing::warn!("listening on {addr} without an API key");
        }
        server
            .serve(listener, async {
                shutdown_signal().await;
                eprintln!(
                    "lamina serve: stopping (answering the requests in flight; Ctrl-C again quits now)"
                );
                tokio::spawn(async {
                    shutdown_signal().await;
                    std::process::exit(130);
                });
            })
            .await
            .context("serving HTTP")
    })
}

/// A timeout flag's value: positive and finite.
fn secs(flag: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        bail!("{flag} {v} must be above 0 and at most 86400 seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

/// Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
