//! `POST /v1/embeddings`, and the queueing that embeddings and rerank
//! requests share: texts are tokenized in the handler (off the async
//! threads), with the request's task prompt and truncation, then handed to
//! the model's worker as token ids.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use lamina_model::ModelError;
use lamina_model::embed::{self, EmbedOptions};
use lamina_model::tokenizer::Tokenizer;
use tokio::sync::oneshot;

use crate::AppState;
use crate::api::{self, EmbeddingsRequest};
use crate::error::{ApiError, from_model, too_many_tokens};
use crate::guard;
use crate::input::{self, Input, InputLimits};
use crate::routes::{St, join_error, respond};
use crate::sched::JobQueue;
use crate::workers::{EmbedJob, Job, RerankJob, Work};

/// A loaded embedding model or reranker as the handlers see it (the worker
/// owns the `Embedder`; the handlers tokenize with their own copy of the
/// tokenizer).
pub struct EmbedModel {
    pub name: String,
    pub tok: Tokenizer,
    /// The most tokens one text or query-document pair may have.
    pub n_ctx: usize,
    pub dim: usize,
    pub n_vocab: usize,
    /// The model's task prompts (name, prefix).
    pub tasks: &'static [(&'static str, &'static str)],
    pub queue: EmbedQueue,
}

/// An embedding model's worker queue: texts for an embedder, pairs for a
/// reranker (each model is one or the other).
pub enum EmbedQueue {
    Texts(Arc<JobQueue<EmbedJob>>),
    Pairs(Arc<JobQueue<RerankJob>>),
}

impl EmbedModel {
    pub fn is_reranker(&self) -> bool {
        matches!(self.queue, EmbedQueue::Pairs(_))
    }

    /// The prefix of the task prompt `name`; a 400 listing the known ones
    /// when the model has no such prompt.
    pub fn task_prefix(&self, param: &str, name: &str) -> Result<&'static str, ApiError> {
        if let Some((_, prefix)) = self.tasks.iter().find(|(n, _)| *n == name) {
            return Ok(prefix);
        }
        let known = if self.tasks.is_empty() {
            format!("the model {} has no task prompts", self.name)
        } else {
            let names: Vec<&str> = self.tasks.iter().map(|(n, _)| *n).collect();
            format!("the model {} knows {}", self.name, names.join(", "))
        };
        Err(ApiError::invalid_param(
            param,
            format!("'{param}' is {name:?}, which is not a task prompt of this model: {known}"),
        )
        .code("unknown_task"))
    }
}

pub async fn embeddings(State(s): St, req: Request) -> Response {
    respond(embeddings_inner(s, req).await)
}

/// The prefix of the request's task prompt (`task`, or `prompt_name` as
/// sentence-transformers calls it), else of the server's `--default-task`
/// where the model has that prompt, else none.
fn task_prefix(
    s: &AppState,
    em: &EmbedModel,
    task: Option<&str>,
    prompt_name: Option<&str>,
) -> Result<&'static str, ApiError> {
    match (task, prompt_name) {
        (Some(t), Some(p)) if t != p => Err(ApiError::invalid_param(
            "prompt_name",
            format!("'task' ({t:?}) and 'prompt_name' ({p:?}) differ: give one of them"),
        )),
        (Some(t), _) => em.task_prefix("task", t),
        (None, Some(p)) => em.task_prefix("prompt_name", p),
        (None, None) => Ok(s
            .cfg
            .default_task
            .as_deref()
            .and_then(|t| em.tasks.iter().find(|(n, _)| *n == t))
            .map_or("", |(_, prefix)| prefix)),
    }
}

async fn embeddings_inner(s: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let body = guard::json_body(&s, req).await?;
    let req: EmbeddingsRequest = api::parse(&body)?;
    drop(body);
    let em = s.embedder(req.model.as_deref(), false)?;
    let index = s
        .embedders
        .iter()
        .position(|e| std::ptr::eq(e, em))
        .unwrap_or(0);
    let enc = api::encoding(req.encoding_format.as_deref())?;
    let dim = api::dimensions(req.dimensions, em.dim)?;
    let prefix = task_prefix(&s, em, req.task.as_deref(), req.prompt_name.as_deref())?;
    let truncate = req.truncate.unwrap_or(s.cfg.truncate);
    let budget = s.cfg.max_request_tokens;
    let lim = InputLimits {
        n_vocab: em.n_vocab,
        max_inputs: s.cfg.max_inputs,
        max_tokens: budget,
    };
    let inputs = input::parse_inputs("input", &req.input, lim)?;
    drop(req);
    let many = inputs.many;
    let st = s.clone();
    let seqs = tokio::task::spawn_blocking(move || {
        let em = &st.embedders[index];
        let opts = EmbedOptions {
            prefix: prefix.to_string(),
            truncate,
            ..EmbedOptions::default()
        };
        let mut total = 0usize;
        inputs
            .items
            .into_iter()
            .enumerate()
            .map(|(i, input)| {
                let param = if many {
                    format!("input[{i}]")
                } else {
                    "input".to_string()
                };
                let left = budget - total;
                let mut ids = match input {
                    Input::Text(t) => text_ids(em, &t, &opts, left, budget, &param)?,
                    Input::Tokens(t) => t,
                };
                // Token ids are taken as given: truncation cuts them at the context.
                if truncate {
                    ids.truncate(em.n_ctx);
                }
                if ids.len() > left {
                    return Err(too_many_tokens("input", budget));
                }
                total += ids.len();
                if ids.is_empty() {
                    return Err(ApiError::invalid_param(
                        &param,
                        format!("'{param}' gives no tokens"),
                    ));
                }
                if ids.len() > em.n_ctx {
                    return Err(context_error(&param, ids.len(), false, em.n_ctx));
                }
                Ok(ids)
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(join_error)??;
    let n_tokens: usize = seqs.iter().map(Vec::len).sum();
    let EmbedQueue::Texts(queue) = &em.queue else {
        return Err(ApiError::internal("the embedding model has no text queue"));
    };
    let vectors = run_job(&s, queue, seqs, "embedding").await?;

    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| api::EmbeddingData {
            object: "embedding",
            index,
            embedding: api::EmbeddingValue::new(api::truncate_normalise(v, dim), enc),
        })
        .collect();
    let resp = api::EmbeddingsResponse {
        object: "list",
        data,
        model: em.name.clone(),
        usage: api::EmbeddingUsage {
            prompt_tokens: n_tokens,
            total_tokens: n_tokens,
        },
    };
    Ok(axum::Json(resp).into_response())
}

/// 400: `param` has more tokens than the model's context.
pub(crate) fn context_error(param: &str, n: usize, at_least: bool, n_ctx: usize) -> ApiError {
    ApiError::invalid_param(
        param,
        format!(
            "'{param}' has {}{n} tokens, more than the model's context of {n_ctx} tokens \
             (send \"truncate\": true to cut it)",
            if at_least { "at least " } else { "" },
        ),
    )
    .code("context_length_exceeded")
}

/// A text's ids as the embedder tokenizes it. Without truncation, a text
/// that cannot fit the context or what is `left` of the request's token
/// budget is refused before it is all tokenized.
fn text_ids(
    em: &EmbedModel,
    text: &str,
    opts: &EmbedOptions,
    left: usize,
    budget: usize,
    param: &str,
) -> Result<Vec<u32>, ApiError> {
    let limit = if opts.truncate {
        em.n_ctx
    } else {
        em.n_ctx.min(left)
    };
    match embed::tokenize_text(&em.tok, limit, text, opts) {
        Ok(ids) => Ok(ids),
        Err(ModelError::ContextExceeded {
            n_tokens, at_least, ..
        }) => Err(if left < em.n_ctx {
            too_many_tokens("input", budget)
        } else {
            context_error(param, n_tokens, at_least, em.n_ctx)
        }),
        Err(e) if e.is_input() => Err(ApiError::invalid_param(param, format!("'{param}': {e}"))),
        Err(e) => Err(from_model(&e)),
    }
}

/// Queues `items` on a model's worker and waits for its answers; a full
/// queue is a 503 that names `what` (embedding, rerank).
pub(crate) async fn run_job<W: Work>(
    s: &AppState,
    queue: &JobQueue<Job<W>>,
    items: Vec<W>,
    what: &str,
) -> Result<Vec<W::Out>, ApiError> {
    let (tx, rx) = oneshot::channel();
    let job = Job {
        items,
        reply: tx,
        enqueued: Instant::now(),
    };
    s.metrics.embed_queue.fetch_add(1, Relaxed);
    if queue.push(job, s.cfg.max_queue).is_err() {
        s.metrics.embed_queue.fetch_sub(1, Relaxed);
        s.metrics.rejected.fetch_add(1, Relaxed);
        return Err(ApiError::busy(format!(
            "The server is busy: {} {what} requests are already waiting; retry later",
            s.cfg.max_queue
        )));
    }
    rx.await
        .map_err(|_| ApiError::internal("the embedding worker stopped"))?
}
