//! The inference threads. They are plain OS threads (never tokio's): each
//! takes jobs from its model's queue, and runs a forward pass only while it
//! holds a turn of the shared [`Turnstile`], so one pass runs at a time on
//! the compute pool and the async threads stay free to answer `/health`.
//!
//! * An embedding model has one worker. It takes the oldest job, then keeps
//!   taking queued jobs for a short window (or until `max_batch` texts), and
//!   embeds all their texts in one `embed_ids` call (texts packed whole into
//!   forward passes of up to `batch_tokens` tokens).
//! * A generative model has `parallel` slot threads, each owning a
//!   [`Session`] (its KV cache, kept between requests for prefix reuse). A
//!   slot takes the oldest waiting request; requests beyond the slots wait in
//!   FIFO order. Active generations advance round-robin, one token per turn:
//!   after each token a slot gives its turn back and queues for the next.
//!   A prompt is evaluated in batches of `prompt_batch` tokens, one per turn.
//!   A slot stops a generation as soon as its client's channel is closed
//!   (the HTTP request was dropped: the client disconnected).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use lamina_kernels::pool::Rayon;
use lamina_model::chat::ChatTemplate;
use lamina_model::embed::{EmbedOptions, Embedder};
use lamina_model::generate::{GenerateOptions, Session, StopReason};
use lamina_model::sampling::{Sampler, SamplerParams};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model};
use tokio::sync::{mpsc, oneshot};

use crate::error::{ApiError, from_model};
use crate::metrics::Metrics;
use crate::sched::{JobQueue, Turnstile};

/// A batch of texts (as token ids) to embed; the answer is one full-width,
/// L2-normalised vector per text.
pub struct EmbedJob {
    pub seqs: Vec<Vec<u32>>,
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, ApiError>>,
    pub enqueued: Instant,
}

/// How the embedding worker batches.
#[derive(Clone, Copy, Debug)]
pub struct Batching {
    pub max_batch: usize,
    pub window: Duration,
    pub batch_tokens: usize,
}

pub fn embed_worker(
    mut embedder: Embedder,
    queue: Arc<JobQueue<EmbedJob>>,
    turnstile: Arc<Turnstile>,
    metrics: Arc<Metrics>,
    cfg: Batching,
) {
    let opts = EmbedOptions {
        prefix: String::new(),
        dim: None,
        truncate: false,
        batch_tokens: cfg.batch_tokens.max(1),
    };
    while let Some(first) = queue.pop() {
        let mut n_texts = first.seqs.len();
        let mut jobs = vec![first];
        let deadline = Instant::now() + cfg.window;
        while n_texts < cfg.max_batch {
            // Whatever queued while the last batch ran is taken at once; an
            // empty queue is waited on until the window closes.
            match queue.try_pop().or_else(|| queue.pop_until(deadline)) {
                Some(j) => {
                    n_texts += j.seqs.len();
                    jobs.push(j);
                }
                None => break,
            }
        }
        metrics.embed_queue.fetch_sub(jobs.len() as i64, Relaxed);
        for j in &jobs {
            metrics.queue_wait.observe_duration(j.enqueued.elapsed());
        }
        // Clients that went away while queued are not worked for.
        jobs.retain(|j| !j.reply.is_closed());
        if jobs.is_empty() {
            continue;
        }
        let mut seqs = Vec::with_capacity(n_texts);
        let mut counts = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        for j in jobs {
            counts.push(j.seqs.len());
            seqs.extend(j.seqs);
            replies.push(j.reply);
        }
        let result = {
            let _turn = turnstile.acquire();
            catch_unwind(AssertUnwindSafe(|| {
                embedder.embed_ids(&seqs, &opts, &Rayon)
            }))
        };
        metrics.embedding_batches.fetch_add(1, Relaxed);
        metrics.batch_texts.observe(seqs.len() as f64);
        match result {
            Ok(Ok(vectors)) => {
                let n_tokens: usize = seqs.iter().map(Vec::len).sum();
                metrics.embedding_tokens.fetch_add(n_tokens as u64, Relaxed);
                metrics
                    .embedding_inputs
                    .fetch_add(seqs.len() as u64, Relaxed);
                let mut it = vectors.into_iter().map(|e| e.vector);
                for (reply, n) in replies.into_iter().zip(counts) {
                    let _ = reply.send(Ok(it.by_ref().take(n).collect()));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!("embedding batch failed: {e}");
                let err = from_model(&e);
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
            Err(_) => {
                tracing::error!("the embedding worker panicked; its batch is answered with 500");
                for reply in replies {
                    let _ = reply.send(Err(ApiError::internal(
                        "the embedding failed inside the server",
                    )));
                }
            }
        }
    }
}

/// A generative model and what serving it needs.
pub struct GenModel {
    pub model: Model,
    pub tok: Tokenizer,
    pub template: ChatTemplate,
    pub n_ctx: usize,
    pub kv: KvType,
    pub batch: usize,
}

/// What a slot sends back while generating.
#[derive(Debug)]
pub enum GenEvent {
    /// The next piece of text (whole UTF-8 characters).
    Text(String),
    Done {
        stop: StopReason,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Error(ApiError),
}

pub struct GenJob {
    pub prompt: Vec<u32>,
    pub sampler: SamplerParams,
    pub opts: GenerateOptions,
    pub tx: mpsc::UnboundedSender<GenEvent>,
    pub enqueued: Instant,
}

pub fn gen_slot(
    gm: Arc<GenModel>,
    queue: Arc<JobQueue<GenJob>>,
    turnstile: Arc<Turnstile>,
    metrics: Arc<Metrics>,
) {
    let mut session = match Session::with_batch(&gm.model, &gm.tok, gm.n_ctx, gm.kv, gm.batch) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("a generation slot could not start: {e}");
            return;
        }
    };
    while let Some(job) = queue.pop() {
        metrics.gen_queue.fetch_sub(1, Relaxed);
        metrics.queue_wait.observe_duration(job.enqueued.elapsed());
        if job.tx.is_closed() {
            metrics.cancelled.fetch_add(1, Relaxed);
            continue;
        }
        metrics.gen_active.fetch_add(1, Relaxed);
        let result = catch_unwind(AssertUnwindSafe(|| {
            run_generation(&mut session, &gm, &job, &turnstile, &metrics)
        }));
        metrics.gen_active.fetch_sub(1, Relaxed);
        if result.is_err() {
            tracing::error!("a generation slot panicked; its request is answered with 500");
            session.clear();
            let _ = job.tx.send(GenEvent::Error(ApiError::internal(
                "the generation failed inside the server",
            )));
        }
    }
}

fn run_generation(
    session: &mut Session<'_>,
    gm: &GenModel,
    job: &GenJob,
    turnstile: &Turnstile,
    metrics: &Metrics,
) {
    let mut turn = Some(turnstile.acquire());
    if job.tx.is_closed() {
        metrics.cancelled.fetch_add(1, Relaxed);
        return;
    }
    // The prompt goes through in batches, the turn given back between them,
    // so a long prompt does not stall the other generations.
    let prompt = &job.prompt[..];
    let common = session
        .tokens()
        .iter()
        .zip(prompt)
        .take_while(|(a, b)| a == b)
        .count()
        .min(prompt.len().saturating_sub(1));
    let mut end = (common + session.batch()).min(prompt.len());
    let mut result = session.prefill(&prompt[..end], &Rayon).map(drop);
    while result.is_ok() && end < prompt.len() {
        drop(turn.take());
        turn = Some(turnstile.acquire());
        if job.tx.is_closed() {
            metrics.cancelled.fetch_add(1, Relaxed);
            return;
        }
        let next = (end + session.batch()).min(prompt.len());
        result = session.eval(&prompt[end..next], &Rayon);
        end = next;
    }
    if let Err(e) = result {
        // A failed forward may leave the cache in any state: start afresh.
        session.clear();
        let _ = job.tx.send(GenEvent::Error(from_model(&e)));
        return;
    }
    metrics
        .prompt_tokens
        .fetch_add(job.prompt.len() as u64, Relaxed);
    let mut sampler = Sampler::new(job.sampler.clone(), gm.model.hp.n_vocab);
    let mut first = true;
    let out = session.generate(&mut sampler, &job.opts, &Rayon, &mut |piece| {
        if first {
            first = false;
            metrics
                .time_to_first_token
                .observe_duration(job.enqueued.elapsed());
        }
        if job.tx.is_closed()
            || (!piece.is_empty() && job.tx.send(GenEvent::Text(piece.to_string())).is_err())
        {
            return false;
        }
        // Round-robin: give the turn to whoever waits, then queue again.
        drop(turn.take());
        turn = Some(turnstile.acquire());
        true
    });
    drop(turn);
    match out {
        Ok(g) if g.stop == StopReason::Cancelled => {
            metrics.cancelled.fetch_add(1, Relaxed);
            metrics
                .completion_tokens
                .fetch_add(g.ids.len() as u64, Relaxed);
        }
        Ok(g) => {
            metrics
                .completion_tokens
                .fetch_add(g.ids.len() as u64, Relaxed);
            let _ = job.tx.send(GenEvent::Done {
                stop: g.stop,
                prompt_tokens: job.prompt.len(),
                completion_tokens: g.ids.len(),
            });
        }
        Err(e) => {
            session.clear();
            let _ = job.tx.send(GenEvent::Error(from_model(&e)));
        }
    }
}
