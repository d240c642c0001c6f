//! `lamina serve`: the OpenAI-compatible HTTP server (lamina-server).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use lamina_server::{ServeConfig, Server};

use crate::embed::init_threads;
use crate::generate::KvArg;
use crate::models;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file or name in the models directory (repeatable). Embedding
    /// models (gemma-embedding) serve /v1/embeddings, the others
    /// /v1/completions and /v1/chat/completions; requests name a model by its
    /// file name without `.gguf`.
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
    /// Concurrent generations per generative model (each holds a KV cache of --ctx tokens).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Requests that may wait per model; beyond, 503 with Retry-After.
    #[arg(long, default_value_t = 128)]
    max_queue: usize,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body: usize,
    /// Most inputs in one embeddings request.
    #[arg(long, default_value_t = 2048)]
    max_inputs: usize,
    /// Element type of the KV cache.
    #[arg(long, value_enum, default_value = "f16")]
    kv_type: KvArg,
    #[command(flatten)]
    load: crate::generate::LoadArg,
}

pub fn run(args: Args) -> Result<()> {
    init_threads(args.threads)?;
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
    let cfg = ServeConfig {
        models,
        api_key,
        ctx: args.ctx,
        parallel: args.parallel,
        max_batch: args.max_batch,
        batch_window: Duration::from_millis(args.batch_window_ms),
        batch_tokens: args.batch_tokens,
        max_queue: args.max_queue,
        max_body: args.max_body,
        max_inputs: args.max_inputs,
        kv: match args.kv_type {
            KvArg::F16 => lamina_model::KvType::F16,
            KvArg::F32 => lamina_model::KvType::F32,
        },
        load: args.load.load(),
        ..ServeConfig::default()
    };
    let keyed = cfg.api_key.is_some();
    let server = Server::load(cfg)?;
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
