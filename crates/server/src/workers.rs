//! The inference threads. They are plain OS threads (never tokio's): each
//! takes jobs from its model's queue, and runs a forward pass only while it
//! holds a turn of the shared [`Turnstile`], so one pass runs at a time on
//! the compute pool and the async threads stay free to answer `/health`.
//!
//! * An embedding model (or a reranker) has one worker. It takes the oldest
//!   job, then keeps taking queued jobs for a short window (or until
//!   `max_batch` texts or pairs), and embeds their texts (or scores their
//!   query-document pairs) packed whole into forward passes of up to
//!   `batch_tokens` tokens, one turn of the turnstile per pass, so other
//!   models' work interleaves with a large request. Between passes the texts
//!   of a job whose client went away are dropped, and a job whose texts are
//!   all done is answered at once.
//! * A generative model has one worker driving a [`Scheduler`] of
//!   `parallel` slots (one KV cache of `parallel × n_ctx` positions). Each
//!   step it admits waiting requests into free slots (FIFO; beyond the
//!   slots they wait in the queue, beyond the queue they get 503), drops the
//!   generations whose client went away, and runs one forward pass over
//!   every active sequence's next token plus prompt chunks, under one turn
//!   of the turnstile, so embeddings interleave step by step. A finished
//!   generation frees its slot at once; its cached tokens stay for the next
//!   request with the same prefix.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use lamina_model::chat::ChatTemplate;
use lamina_model::embed::{EmbedOptions, Embedder, Pair};
use lamina_model::generate::{GenerateOptions, StopReason};
use lamina_model::grammar::{Constraint, Grammar, Grammars};
use lamina_model::sampling::SamplerParams;
use lamina_model::scheduler::{Event, Refusal, Request, Scheduler, SchedulerOptions};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model, ModelError, ThreadPool};
use tokio::sync::{mpsc, oneshot};

use crate::error::{ApiError, from_model};
use crate::logprobs::{self, TokenLogprobs};
use crate::metrics::Metrics;
use crate::sched::{JobQueue, Turnstile};

/// What an embedding worker computes for one item of a job: a text's
/// vector, or a query-document pair's relevance logit.
pub trait Work: Send + Sized + 'static {
    type Out: Send + 'static;
    /// The tokens the item puts into a forward pass.
    fn n_tokens(&self) -> usize;
    /// Moves the item out, leaving an empty one behind.
    fn take(&mut self) -> Self;
    /// One forward pass over `items`.
    fn run(
        embedder: &mut Embedder,
        items: &[Self],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<Self::Out>, ModelError>;
    /// Counts a finished pass in the metrics.
    fn count(metrics: &Metrics, n_items: usize, n_tokens: usize);
}

/// A text as token ids; its answer is one full-width, L2-normalised vector.
impl Work for Vec<u32> {
    type Out = Vec<f32>;
    fn n_tokens(&self) -> usize {
        self.len()
    }
    fn take(&mut self) -> Self {
        std::mem::take(self)
    }
    fn run(
        e: &mut Embedder,
        items: &[Self],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(e.embed_ids(items, opts, pool)?
            .into_iter()
            .map(|e| e.vector)
            .collect())
    }
    fn count(metrics: &Metrics, n_items: usize, n_tokens: usize) {
        metrics.embedding_tokens.fetch_add(n_tokens as u64, Relaxed);
        metrics.embedding_inputs.fetch_add(n_items as u64, Relaxed);
    }
}

/// A query-document pair; its answer is the reranker's raw logit.
impl Work for Pair {
    type Out = f32;
    fn n_tokens(&self) -> usize {
        self.ids.len()
    }
    fn take(&mut self) -> Self {
        Pair {
            ids: std::mem::take(&mut self.ids),
            segment_b: self.segment_b,
        }
    }
    fn run(
        e: &mut Embedder,
        items: &[Self],
        opts: &EmbedOptions,
        pool: &dyn ThreadPool,
    ) -> Result<Vec<f32>, ModelError> {
        e.score_pairs(items, opts, pool)
    }
    fn count(metrics: &Metrics, n_items: usize, n_tokens: usize) {
        metrics.rerank_tokens.fetch_add(n_tokens as u64, Relaxed);
        metrics.rerank_pairs.fetch_add(n_items as u64, Relaxed);
    }
}

/// A request's items, answered together once all are done.
pub struct Job<W: Work> {
    pub items: Vec<W>,
    pub reply: oneshot::Sender<Result<Vec<W::Out>, ApiError>>,
    pub enqueued: Instant,
}

/// Texts to embed.
pub type EmbedJob = Job<Vec<u32>>;
/// Query-document pairs to score.
pub type RerankJob = Job<Pair>;

/// How the embedding worker batches.
#[derive(Clone, Copy, Debug)]
pub struct Batching {
    pub max_batch: usize,
    pub window: Duration,
    pub batch_tokens: usize,
}

/// The worker of an embedding model (`W` = texts) or a reranker (`W` = pairs).
pub fn embed_worker<W: Work>(
    mut embedder: Embedder,
    queue: Arc<JobQueue<Job<W>>>,
    turnstile: Arc<Turnstile>,
    metrics: Arc<Metrics>,
    cfg: Batching,
) {
    // Prefixes and truncation were applied when the handler tokenized.
    let opts = EmbedOptions {
        batch_tokens: cfg.batch_tokens.max(1),
        ..EmbedOptions::default()
    };
    while let Some(first) = queue.pop() {
        let mut n_items = first.items.len();
        let mut jobs = vec![first];
        let deadline = Instant::now() + cfg.window;
        while n_items < cfg.max_batch {
            // Whatever queued while the last batch ran is taken at once; an
            // empty queue is waited on until the window closes.
            match queue.try_pop().or_else(|| queue.pop_until(deadline)) {
                Some(j) => {
                    n_items += j.items.len();
                    jobs.push(j);
                }
                None => break,
            }
        }
        metrics.embed_queue.fetch_sub(jobs.len() as i64, Relaxed);
        for j in &jobs {
            metrics.queue_wait.observe_duration(j.enqueued.elapsed());
        }
        run_embed_batch(&mut embedder, jobs, &opts, &turnstile, &metrics);
    }
}

/// A job being worked on: its items, the answers so far, its reply.
struct Running<W: Work> {
    items: Vec<W>,
    done: Vec<W::Out>,
    reply: Option<oneshot::Sender<Result<Vec<W::Out>, ApiError>>>,
}

/// Works through `jobs` pass by pass; see the module documentation.
fn run_embed_batch<W: Work>(
    embedder: &mut Embedder,
    jobs: Vec<Job<W>>,
    opts: &EmbedOptions,
    turnstile: &Turnstile,
    metrics: &Metrics,
) {
    let mut jobs: Vec<Running<W>> = jobs
        .into_iter()
        .map(|j| Running {
            done: Vec::with_capacity(j.items.len()),
            items: j.items,
            reply: Some(j.reply),
        })
        .collect();
    // The next item to work on: (job, item).
    let (mut job, mut item) = (0, 0);
    let mut pass: Vec<W> = Vec::new();
    let mut owners: Vec<usize> = Vec::new();
    loop {
        // Clients that went away are not worked for any longer.
        for j in &mut jobs {
            if j.reply.as_ref().is_some_and(|r| r.is_closed()) {
                j.reply = None;
                j.items = Vec::new();
                metrics.embed_cancelled.fetch_add(1, Relaxed);
            }
        }
        // Items packed whole, as `embed_ids` packs them.
        pass.clear();
        owners.clear();
        let mut n_tokens = 0;
        while job < jobs.len() {
            if jobs[job].reply.is_none() || item >= jobs[job].items.len() {
                (job, item) = (job + 1, 0);
                continue;
            }
            let len = jobs[job].items[item].n_tokens();
            if !pass.is_empty() && n_tokens + len > opts.batch_tokens {
                break;
            }
            pass.push(jobs[job].items[item].take());
            owners.push(job);
            n_tokens += len;
            item += 1;
        }
        if pass.is_empty() {
            return;
        }
        let result = {
            let _turn = turnstile.acquire();
            catch_unwind(AssertUnwindSafe(|| {
                W::run(embedder, &pass, opts, turnstile.pool())
            }))
        };
        metrics.embedding_batches.fetch_add(1, Relaxed);
        metrics.batch_texts.observe(pass.len() as f64);
        let err = match result {
            Ok(Ok(outs)) if outs.len() == pass.len() => {
                W::count(metrics, pass.len(), n_tokens);
                for (out, &o) in outs.into_iter().zip(&owners) {
                    let j = &mut jobs[o];
                    j.done.push(out);
                    if j.done.len() == j.items.len()
                        && let Some(reply) = j.reply.take()
                    {
                        let _ = reply.send(Ok(std::mem::take(&mut j.done)));
                        j.items = Vec::new();
                    }
                }
                continue;
            }
            Ok(Ok(_)) => {
                tracing::error!("the model answered a batch with the wrong number of results");
                ApiError::internal(crate::error::INTERNAL)
            }
            Ok(Err(e)) => {
                tracing::warn!("embedding batch failed: {e}");
                from_model(&e)
            }
            Err(_) => {
                tracing::error!("the embedding worker panicked; its batch is answered with 500");
                ApiError::internal("the embedding failed inside the server")
            }
        };
        for j in &mut jobs {
            if let Some(reply) = j.reply.take() {
                let _ = reply.send(Err(err.clone()));
            }
        }
        return;
    }
}

/// A generative model and what serving it needs.
pub struct GenModel {
    pub model: Model,
    pub tok: Tokenizer,
    pub template: ChatTemplate,
    /// Positions per sequence.
    pub n_ctx: usize,
    /// Sequences generated at once (the KV budget is `slots × n_ctx`).
    pub slots: usize,
    pub kv: KvType,
    /// Most tokens one forward pass takes.
    pub batch: usize,
    /// The vocabulary compiled for grammars, on the first request with one.
    pub grammars: OnceLock<Result<Grammars, String>>,
}

impl GenModel {
    /// `grammar` compiled for one generation of this model; a grammar the
    /// engine refuses is an error of the request's field `param`
    /// (`response_format`, `tools`). Blocking: the first call compiles the
    /// vocabulary.
    pub fn constraint(&self, grammar: &Grammar, param: &str) -> Result<Constraint, ApiError> {
        let grammars = self
            .grammars
            .get_or_init(|| Grammars::new(&self.tok).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| {
                ApiError::invalid_param(param, format!("this model cannot follow a grammar: {e}"))
            })?;
        grammars
            .constraint(grammar)
            .map_err(|e| ApiError::invalid_param(param, e.to_string()))
    }
}

/// What a slot sends back while generating.
#[derive(Debug)]
pub enum GenEvent {
    /// The next piece of text (whole UTF-8 characters).
    Text(String),
    /// A sampled token's log-probabilities (when the request asked), sent
    /// before the text it releases: every sampled token gets one, the
    /// token that ends the generation included.
    Logprobs(TokenLogprobs),
    Done {
        stop: StopReason,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Error(ApiError),
}

/// Where a generation's events go, tagged with its choice's index (the
/// `n` choices of one request share the channel).
pub type GenSender = mpsc::UnboundedSender<(usize, GenEvent)>;

pub struct GenJob {
    pub prompt: Vec<u32>,
    pub sampler: SamplerParams,
    pub opts: GenerateOptions,
    /// The choice this generation is, among the request's `n`.
    pub index: usize,
    /// Alternatives per token when log-probabilities are asked for.
    pub logprobs: Option<usize>,
    /// The grammar the text must follow, compiled.
    pub constraint: Option<Constraint>,
    pub tx: GenSender,
    pub enqueued: Instant,
}

/// A request being generated: where its events go.
struct Streaming {
    tx: GenSender,
    index: usize,
    logprobs: Option<usize>,
    enqueued: Instant,
    first: bool,
}

impl Streaming {
    fn send(&self, ev: GenEvent) -> bool {
        self.tx.send((self.index, ev)).is_ok()
    }
}

/// The worker of a generative model: one [`Scheduler`] whose slots hold
/// every running generation; see the module documentation. `ready` gets
/// the scheduler's construction result before any job is taken.
pub fn gen_worker(
    gm: Arc<GenModel>,
    queue: Arc<JobQueue<GenJob>>,
    turnstile: Arc<Turnstile>,
    metrics: Arc<Metrics>,
    ready: std::sync::mpsc::Sender<Result<(), ModelError>>,
) {
    let opts = SchedulerOptions {
        slots: gm.slots,
        n_ctx: gm.n_ctx,
        kv: gm.kv,
        budget: gm.batch,
    };
    let mut sched = match Scheduler::new(&gm.model, &gm.tok, opts) {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut running: Vec<Option<Streaming>> = (0..sched.n_slots()).map(|_| None).collect();
    loop {
        // Waiting requests take the free slots; an idle worker sleeps on the queue.
        while sched.has_room() {
            let job = if sched.active() == 0 {
                queue.pop()
            } else {
                queue.try_pop()
            };
            let Some(job) = job else {
                if sched.active() == 0 {
                    return;
                }
                break;
            };
            metrics.gen_queue.fetch_sub(1, Relaxed);
            metrics.queue_wait.observe_duration(job.enqueued.elapsed());
            if job.tx.is_closed() {
                metrics.cancelled.fetch_add(1, Relaxed);
                continue;
            }
            let req = Request {
                prompt: job.prompt,
                sampler: job.sampler,
                opts: job.opts,
                constraint: job.constraint,
            };
            match sched.admit(req) {
                Ok(seq) => {
                    metrics.gen_active.fetch_add(1, Relaxed);
                    running[seq] = Some(Streaming {
                        tx: job.tx,
                        index: job.index,
                        logprobs: job.logprobs,
                        enqueued: job.enqueued,
                        first: true,
                    });
                }
                Err(Refusal::Invalid(e)) => {
                    let _ = job.tx.send((job.index, GenEvent::Error(from_model(&e))));
                }
                Err(Refusal::Full(_)) => {
                    // `has_room` said otherwise; answer rather than lose it.
                    tracing::error!("the scheduler refused a request it had room for");
                    let err = ApiError::internal(crate::error::INTERNAL);
                    let _ = job.tx.send((job.index, GenEvent::Error(err)));
                }
            }
        }
        // Clients that went away are not generated for any longer.
        for (seq, r) in running.iter_mut().enumerate() {
            if r.as_ref().is_some_and(|r| r.tx.is_closed()) {
                sched.cancel(seq);
                *r = None;
                metrics.cancelled.fetch_add(1, Relaxed);
                metrics.gen_active.fetch_sub(1, Relaxed);
            }
        }
        if sched.active() == 0 {
            continue;
        }
        let result = {
            let _turn = turnstile.acquire();
            catch_unwind(AssertUnwindSafe(|| {
                sched.step(turnstile.pool(), &mut |ev| {
                    on_event(ev, &mut running, &gm.tok, &metrics)
                })
            }))
        };
        if result.is_err() {
            tracing::error!("the generation worker panicked; its requests are answered with 500");
            sched.clear();
            for r in running.iter_mut().filter_map(Option::take) {
                metrics.gen_active.fetch_sub(1, Relaxed);
                r.send(GenEvent::Error(ApiError::internal(
                    "the generation failed inside the server",
                )));
            }
        }
    }
}

/// Forwards one scheduler event to its client; `false` when the client is gone.
fn on_event(
    ev: Event<'_>,
    running: &mut [Option<Streaming>],
    tok: &Tokenizer,
    metrics: &Metrics,
) -> bool {
    let seq = match ev {
        Event::Token { seq, .. } | Event::Done { seq, .. } | Event::Failed { seq, .. } => seq,
    };
    let Some(r) = running.get_mut(seq).and_then(Option::as_mut) else {
        return false;
    };
    match ev {
        Event::Token {
            id, text, logits, ..
        } => {
            if r.first {
                r.first = false;
                metrics
                    .time_to_first_token
                    .observe_duration(r.enqueued.elapsed());
            }
            if let Some(k) = r.logprobs {
                r.send(GenEvent::Logprobs(logprobs::compute(logits, id, k, tok)));
            }
            let sent = text.is_empty() || r.send(GenEvent::Text(text.to_string()));
            if sent && !r.tx.is_closed() {
                return true;
            }
            metrics.cancelled.fetch_add(1, Relaxed);
        }
        Event::Done {
            stop,
            text,
            usage,
            last,
            ..
        } => {
            // The token that ended the generation gets its entry too, so
            // there are as many as `completion_tokens` (see `ChoiceState`
            // in routes.rs for how they line up with a cut stop string).
            if let (Some(k), Some((id, logits))) = (r.logprobs, last) {
                r.send(GenEvent::Logprobs(logprobs::compute(logits, id, k, tok)));
            }
            if !text.is_empty() {
                r.send(GenEvent::Text(text.to_string()));
            }
            metrics
                .prompt_tokens
                .fetch_add(usage.prompt_tokens as u64, Relaxed);
            metrics
                .reused_tokens
                .fetch_add(usage.reused_tokens as u64, Relaxed);
            metrics
                .completion_tokens
                .fetch_add(usage.completion_tokens as u64, Relaxed);
            r.send(GenEvent::Done {
                stop,
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            });
        }
        Event::Failed { error, .. } => {
            tracing::warn!("a generation failed: {error}");
            r.send(GenEvent::Error(from_model(error)));
        }
    }
    running[seq] = None;
    metrics.gen_active.fetch_sub(1, Relaxed);
    false
}
