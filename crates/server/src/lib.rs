//! `lamina serve`: an OpenAI-compatible HTTP server (axum on tokio) over
//! lamina-model's embedders and generation sessions.
//!
//! * [`Server::load`] opens the models, starts the inference threads
//!   ([`workers`]) and builds the shared [`AppState`].
//! * [`Server::serve`] answers HTTP on a listener until a shutdown signal;
//!   [`spawn`] runs a server on a background thread (tests, tools).
//! * [`http`] is the accept loop: hyper connections with header and write
//!   timeouts, a cap on open connections, graceful shutdown.
//! * [`guard`] holds the checks every request passes: the `Host` check
//!   against DNS rebinding, the in-flight limit, the JSON content type, the
//!   body size and deadline.
//! * [`routes`] holds the routes, the middleware and the generation
//!   handlers; [`embeddings`], [`rerank`] and [`tokenize`] the other
//!   handlers; [`api`] the request and response bodies, [`logprobs`] the
//!   token log-probabilities and their two OpenAI shapes,
//!   [`input`] the typed forms of the fields a client can make large (never
//!   a generic JSON tree), [`metrics`] the Prometheus counters, [`sched`] the
//!   queues and the fair turnstile every forward pass goes through.
//!
//! Every resource a client can claim is bounded by a [`ServeConfig`] limit:
//! connections, time to send a head or body, time a response may stall,
//! body bytes, requests in flight, queued requests, inputs and tokens per
//! request.
//!
//! Where OpenAI's API and the issue are silent the server does what
//! llama.cpp's `llama-server` does: unset sampling fields take llama.cpp's
//! defaults, `max_tokens` defaults to "until the end of generation or the
//! context", and when exactly one model of the kind a request needs is
//! loaded its `model` field is not checked.
#![forbid(unsafe_code)]

pub mod api;
pub mod embeddings;
pub mod error;
pub mod guard;
pub mod http;
pub mod input;
pub mod logprobs;
pub mod metrics;
pub mod rerank;
pub mod routes;
pub mod sched;
pub mod tokenize;
pub mod tools;
pub mod tree;
pub mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use lamina_model::chat::{ChatTemplate, TemplateSource};
use lamina_model::embed::Embedder;
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, LoadOptions, ThreadPool};

pub use embeddings::{EmbedModel, EmbedQueue};
pub use error::{ApiError, ServeError};
use metrics::Metrics;
use sched::{JobQueue, Turnstile};
use workers::{Batching, EmbedJob, GenJob, GenModel, RerankJob};

/// The default generation context: the training context, at most this.
pub const DEFAULT_CTX: usize = 4096;

/// How the server runs and what it refuses.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Model files; each serves embeddings or generation by its architecture.
    pub models: Vec<PathBuf>,
    /// Required as `Authorization: Bearer KEY` on every `/v1` route and `/metrics`.
    pub api_key: Option<String>,
    /// Generation context per slot (default: the training context, at most 4096).
    pub ctx: Option<usize>,
    /// Generation slots per generative model: sequences decoded together.
    pub parallel: usize,
    /// Most texts one embedding batch takes.
    pub max_batch: usize,
    /// How long the embedding worker waits for more requests to batch.
    pub batch_window: Duration,
    /// Tokens per embedding forward pass (texts are packed whole).
    pub batch_tokens: usize,
    /// Most tokens one generation forward pass takes: every active
    /// sequence's next token, then prompt chunks up to this budget.
    pub prompt_batch: usize,
    /// Requests that may wait per model queue; beyond: 503 with `Retry-After`.
    pub max_queue: usize,
    /// Most choices (`n`) one generation request may ask for.
    pub max_n: usize,
    /// Largest request body, in bytes (beyond: 413).
    pub max_body: usize,
    /// Most inputs in one embeddings request, or documents in one rerank request.
    pub max_inputs: usize,
    /// Largest rerank query or document, in bytes.
    pub max_document_bytes: usize,
    /// The task prompt (`query`, `document`, …) of embeddings requests that
    /// name none, for the models that have it.
    pub default_task: Option<String>,
    /// Whether embeddings and rerank requests that do not say cut over-long
    /// texts to the context (rerank: the document's end) instead of refusing them.
    pub truncate: bool,
    pub kv: KvType,
    /// How model files are loaded. Default: mapped, and every model's
    /// matrices stored as panels where the ISA has them (a served model is
    /// loaded once, so embedding models too pay the rewrite only at start).
    pub load: LoadOptions,
    /// Time a client has to send a request head; also the longest an idle
    /// keep-alive connection waits for its next request.
    pub header_timeout: Duration,
    /// Time a client has to send a whole request body.
    pub body_timeout: Duration,
    /// How long a response write may make no progress (a client that stopped
    /// reading) before the connection is closed.
    pub write_timeout: Duration,
    /// Most open connections; beyond, new ones wait to be accepted.
    pub max_connections: usize,
    /// Most POST requests handled at once; beyond: 503 with `Retry-After`.
    pub max_in_flight: usize,
    /// Most tokens in one request's inputs (embeddings, completion prompt);
    /// beyond: 413.
    pub max_request_tokens: usize,
    /// Host names (with or without port) answered besides loopback names and
    /// the bound address.
    pub allowed_hosts: Vec<String>,
    /// Origins allowed cross-origin requests (CORS), `*` for any; none: CORS off.
    pub cors_origins: Vec<String>,
    /// Whether special-token text inside chat message content is parsed as
    /// special tokens (off: it is tokenized as plain text).
    pub special_in_content: bool,
    /// A Jinja chat template used instead of each generative model's own
    /// (to give a model a template that knows tools, say).
    pub chat_template: Option<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            models: Vec::new(),
            api_key: None,
            ctx: None,
            parallel: 4,
            max_batch: 64,
            batch_window: Duration::from_millis(3),
            batch_tokens: 512,
            prompt_batch: lamina_model::generate::DEFAULT_BATCH,
            max_queue: 128,
            max_n: 8,
            max_body: 8 << 20,
            max_inputs: 2048,
            max_document_bytes: 1 << 20,
            default_task: None,
            truncate: false,
            kv: KvType::F16,
            load: LoadOptions::new().panels(true),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            max_connections: 512,
            max_in_flight: 256,
            max_request_tokens: 65536,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            special_in_content: false,
            chat_template: None,
        }
    }
}

/// A loaded generative model as the handlers see it.
pub struct GenHandle {
    pub name: String,
    pub model: Arc<GenModel>,
    pub queue: Arc<JobQueue<GenJob>>,
}

/// What every handler shares.
pub struct AppState {
    pub cfg: ServeConfig,
    pub embedders: Vec<EmbedModel>,
    pub generators: Vec<GenHandle>,
    pub metrics: Arc<Metrics>,
    pub turnstile: Arc<Turnstile>,
    pub started: u64,
    pub next_id: AtomicU64,
    /// Places for the POST requests in flight.
    pub in_flight: Arc<tokio::sync::Semaphore>,
    /// The address the server listens on, once it does.
    pub bound: OnceLock<SocketAddr>,
}

impl AppState {
    /// Every loaded model's name, in load order.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.embedders.iter().map(|e| e.name.clone()).collect();
        v.extend(self.generators.iter().map(|g| g.name.clone()));
        v
    }

    fn pick<'a, T>(
        &self,
        models: &'a [T],
        name_of: impl Fn(&T) -> &str,
        requested: Option<&str>,
        what: &str,
    ) -> Result<&'a T, ApiError> {
        if let Some(name) = requested
            && let Some(m) = models.iter().find(|m| name_of(m) == name)
        {
            return Ok(m);
        }
        match models {
            [] => Err(ApiError::invalid(format!(
                "No loaded model serves {what}; loaded: {}",
                self.names().join(", ")
            ))
            .param("model")
            .code("model_not_supported")),
            // One model of the kind: its name is not checked (as llama-server).
            [one] => Ok(one),
            _ => match requested {
                Some(name) => Err(ApiError::model_not_found(name, &self.names())),
                None => Err(ApiError::invalid_param(
                    "model",
                    format!(
                        "'model' is required when several models serve {what}: one of {}",
                        models.iter().map(&name_of).collect::<Vec<_>>().join(", ")
                    ),
                )),
            },
        }
    }

    /// The embedding model (`rerank` false) or reranker (`rerank` true) a
    /// request names; naming one of the other kind is a 400 that says so.
    pub fn embedder(&self, requested: Option<&str>, rerank: bool) -> Result<&EmbedModel, ApiError> {
        let (what, route) = if rerank {
            ("reranking", "/v1/rerank")
        } else {
            ("embeddings", "/v1/embeddings")
        };
        if let Some(name) = requested
            && let Some(m) = self.embedders.iter().find(|m| m.name == name)
            && m.is_reranker() != rerank
        {
            let (kind, serves) = if m.is_reranker() {
                ("a reranker", "/v1/rerank")
            } else {
                ("an embedding model", "/v1/embeddings")
            };
            return Err(ApiError::invalid_param(
                "model",
                format!("The model {name} is {kind}: it answers {serves}, not {route}"),
            )
            .code("model_not_supported"));
        }
        let kind: Vec<&EmbedModel> = self
            .embedders
            .iter()
            .filter(|m| m.is_reranker() == rerank)
            .collect();
        if kind.is_empty() && !self.embedders.is_empty() {
            let other = if rerank {
                "embedding models, which answer /v1/embeddings"
            } else {
                "rerankers, which answer /v1/rerank"
            };
            return Err(ApiError::invalid(format!(
                "No loaded model serves {what}: the embedding models loaded ({}) are {other}",
                self.embedders
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .param("model")
            .code("model_not_supported"));
        }
        self.pick(&kind, |m| &m.name, requested, what).copied()
    }

    pub fn generator(&self, requested: Option<&str>) -> Result<&GenHandle, ApiError> {
        self.pick(&self.generators, |m| &m.name, requested, "text generation")
    }

    /// Which model's tokenizer a request names, among all loaded models
    /// (as on the other routes, a lone model need not be named): its index
    /// for [`AppState::tokenizer_at`] and its vocabulary size.
    pub fn tokenizer(&self, requested: Option<&str>) -> Result<(usize, usize), ApiError> {
        let all: Vec<(usize, &str, usize)> = self
            .embedders
            .iter()
            .map(|e| (e.name.as_str(), e.n_vocab))
            .chain(self.generators.iter().map(|g| {
                let n = g.model.model.hp.n_vocab.min(g.model.tok.n_vocab());
                (g.name.as_str(), n)
            }))
            .enumerate()
            .map(|(i, (name, n))| (i, name, n))
            .collect();
        self.pick(&all, |m| m.1, requested, "tokenizing")
            .map(|m| (m.0, m.2))
    }

    /// The tokenizer of the `i`-th loaded model (embedding models first).
    pub fn tokenizer_at(&self, i: usize) -> &Tokenizer {
        match self.embedders.get(i) {
            Some(e) => &e.tok,
            None => &self.generators[i - self.embedders.len()].model.tok,
        }
    }
}

/// A loaded server: the shared state and the inference threads.
pub struct Server {
    state: Arc<AppState>,
    threads: Vec<JoinHandle<()>>,
}

/// A model's name in requests: its file name without `.gguf`.
pub fn model_name(path: &std::path::Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    name.strip_suffix(".gguf")
        .map(str::to_string)
        .unwrap_or(name)
}

impl Server {
    /// Opens every model and starts its inference threads, which run their
    /// passes on a spinning pool ([`lamina_model::SpinPool`]) of rayon's
    /// global thread count: its workers wait for a pass's next parallel
    /// region by spinning briefly, where rayon's are woken through the OS
    /// several times a layer.
    pub fn load(cfg: ServeConfig) -> Result<Server, ServeError> {
        let pool = lamina_model::SpinPool::new(rayon::current_num_threads());
        Server::with_pool(cfg, Box::new(pool))
    }

    /// [`Server::load`] with the passes on `pool`.
    pub fn with_pool(
        cfg: ServeConfig,
        pool: Box<dyn ThreadPool + Send>,
    ) -> Result<Server, ServeError> {
        if cfg.models.is_empty() {
            return Err(ServeError::Config("no model to serve (-m MODEL)".into()));
        }
        if [
            cfg.parallel,
            cfg.max_batch,
            cfg.max_queue,
            cfg.max_n,
            cfg.max_inputs,
            cfg.max_document_bytes,
            cfg.max_connections,
            cfg.max_in_flight,
            cfg.max_request_tokens,
        ]
        .contains(&0)
        {
            return Err(ServeError::Config(
                "--parallel, --max-batch, --max-queue, --max-n, --max-inputs, \
                 --max-document-bytes, --max-connections, --max-in-flight and --max-request-tokens must be at least 1"
                    .into(),
            ));
        }
        if [cfg.header_timeout, cfg.body_timeout, cfg.write_timeout].contains(&Duration::ZERO) {
            return Err(ServeError::Config(
                "the header, body and write timeouts must be above 0".into(),
            ));
        }
        routes::cors(&cfg.cors_origins)?;
        if cfg.ctx == Some(0) {
            return Err(ServeError::Config("--ctx must be at least 1".into()));
        }
        let metrics = Arc::new(Metrics::default());
        let turnstile = Arc::new(Turnstile::new(pool));
        let mut embedders = Vec::new();
        let mut generators = Vec::new();
        let mut threads = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for path in &cfg.models {
            let name = model_name(path);
            if names.contains(&name) {
                return Err(ServeError::Config(format!(
                    "two models are named {name:?}: model names (file names without .gguf) must differ"
                )));
            }
            names.push(name.clone());
            let model_err = |source| ServeError::Model {
                path: path.display().to_string(),
                source,
            };
            let model = cfg.load.open(path).map_err(model_err)?;
            if model.has_lm_head() {
                let tok = Tokenizer::from_gguf(&model.file).map_err(|e| model_err(e.into()))?;
                let template = match &cfg.chat_template {
                    Some(src) => ChatTemplate::new(src, TemplateSource::Custom, &tok),
                    None => ChatTemplate::for_model(&model.file, model.hp.family, &tok),
                }
                .map_err(model_err)?;
                let n_ctx = cfg
                    .ctx
                    .unwrap_or_else(|| model.hp.n_ctx_train.min(DEFAULT_CTX));
                if n_ctx > model.hp.n_ctx_train {
                    tracing::warn!(
                        "{name}: --ctx {n_ctx} exceeds the training context of {}",
                        model.hp.n_ctx_train
                    );
                }
                tracing::info!(
                    "{name}: {} generation, context {n_ctx}, {} slots, chat template {:?}",
                    model.hp.arch_name,
                    cfg.parallel,
                    template.source
                );
                let gm = Arc::new(GenModel {
                    model,
                    tok,
                    template,
                    n_ctx,
                    slots: cfg.parallel.max(1),
                    kv: cfg.kv,
                    batch: cfg.prompt_batch.max(1),
                    grammars: Default::default(),
                });
                let queue = Arc::new(JobQueue::default());
                let (gm2, q, t, m) = (
                    gm.clone(),
                    queue.clone(),
                    turnstile.clone(),
                    metrics.clone(),
                );
                let (ready_tx, ready) = std::sync::mpsc::channel();
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("gen-{name}"))
                        .spawn(move || workers::gen_worker(gm2, q, t, m, ready_tx))?,
                );
                match ready.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(model_err(e)),
                    Err(_) => {
                        return Err(model_err(lamina_model::ModelError::Input(
                            "the generation worker stopped while starting".into(),
                        )));
                    }
                }
                generators.push(GenHandle {
                    name,
                    model: gm,
                    queue,
                });
            } else {
                let embedder = Embedder::new(model).map_err(model_err)?;
                let tok =
                    Tokenizer::from_gguf(&embedder.model.file).map_err(|e| model_err(e.into()))?;
                let hp = &embedder.model.hp;
                let n_ctx = embedder.n_ctx();
                let reranker = embedder.is_reranker();
                let embedder_dim = embedder.dim();
                let n_vocab = hp.n_vocab.min(tok.n_vocab());
                let tasks = embedder.tasks();
                if let Some(task) = &cfg.default_task
                    && !reranker
                    && !tasks.is_empty()
                    && !tasks.iter().any(|(n, _)| n == task)
                {
                    return Err(ServeError::Config(format!(
                        "--default-task {task:?} is not a task prompt of {name}, which knows {}",
                        tasks.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    )));
                }
                tracing::info!(
                    "{name}: {} {}, {} dimensions, context {n_ctx}",
                    hp.arch_name,
                    if reranker { "reranking" } else { "embeddings" },
                    hp.n_embd
                );
                let batching = Batching {
                    max_batch: cfg.max_batch,
                    window: cfg.batch_window,
                    batch_tokens: cfg.batch_tokens,
                };
                let (t, m) = (turnstile.clone(), metrics.clone());
                let thread = std::thread::Builder::new().name(format!("embed-{name}"));
                let queue = if reranker {
                    let q = Arc::new(JobQueue::<RerankJob>::default());
                    let q2 = q.clone();
                    threads.push(
                        thread
                            .spawn(move || workers::embed_worker(embedder, q2, t, m, batching))?,
                    );
                    EmbedQueue::Pairs(q)
                } else {
                    let q = Arc::new(JobQueue::<EmbedJob>::default());
                    let q2 = q.clone();
                    threads.push(
                        thread
                            .spawn(move || workers::embed_worker(embedder, q2, t, m, batching))?,
                    );
                    EmbedQueue::Texts(q)
                };
                embedders.push(EmbedModel {
                    name: name.clone(),
                    n_ctx,
                    dim: embedder_dim,
                    n_vocab,
                    tok,
                    tasks,
                    queue,
                });
            }
        }
        let cfg_in_flight = cfg.max_in_flight;
        let state = Arc::new(AppState {
            cfg,
            embedders,
            generators,
            metrics,
            turnstile,
            started: api::unix_now(),
            next_id: AtomicU64::new(0),
            in_flight: Arc::new(tokio::sync::Semaphore::new(cfg_in_flight)),
            bound: OnceLock::new(),
        });
        Ok(Server { state, threads })
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// The HTTP routes.
    pub fn router(&self) -> axum::Router {
        routes::router(self.state.clone())
    }

    /// Answers HTTP on `listener` until `shutdown` completes, then stops the
    /// inference threads (after the requests in flight are answered).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let _ = self.state.bound.set(listener.local_addr()?);
        let app = self.router();
        let cfg = &self.state.cfg;
        let limits = http::ConnLimits {
            header_timeout: cfg.header_timeout,
            write_timeout: cfg.write_timeout,
            max_connections: cfg.max_connections,
        };
        http::serve(listener, app, limits, shutdown).await
        // Dropping `self` stops the inference threads.
    }
}

impl Drop for Server {
    /// Closes the queues and waits for the inference threads to finish.
    fn drop(&mut self) {
        for e in &self.state.embedders {
            match &e.queue {
                EmbedQueue::Texts(q) => q.close(),
                EmbedQueue::Pairs(q) => q.close(),
            }
        }
        for g in &self.state.generators {
            g.queue.close();
        }
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// A server running on a background thread with its own tokio runtime.
pub struct Running {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server and waits for it.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the server thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Loads `cfg`'s models and serves them on `addr` (port 0: any free port)
/// from a background thread.
pub fn spawn(cfg: ServeConfig, addr: SocketAddr) -> Result<Running, ServeError> {
    let server = Server::load(cfg)?;
    let state = server.state.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("lamina-http")
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind(addr))?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("lamina-serve".into())
        .spawn(move || {
            rt.block_on(server.serve(listener, async move {
                let _ = rx.await;
            }))
        })?;
    Ok(Running {
        addr,
        state,
        shutdown: Some(tx),
        thread: Some(thread),
    })
}
