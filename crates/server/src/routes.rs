//! The HTTP routes and their middleware (request metrics, host check, CORS,
//! API key, in-flight limit).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lamina_model::ModelError;
use lamina_model::chat::tool_parse::{ToolDelta, ToolParser};
use lamina_model::chat::tools::{Tool, ToolCall};
use lamina_model::generate::GenerateOptions;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::api::{self, GenRequest, Reply, Usage};
use crate::error::{ApiError, ServeError, from_model};
use crate::guard::{self, InFlightPermit};
use crate::input::{self, Input, InputLimits};
use crate::logprobs::{self, TokenLogprobs};
use crate::metrics::Route;
use crate::workers::{GenEvent, GenJob};
use crate::{AppState, GenHandle, embeddings, rerank, tokenize};

pub(crate) type St = State<Arc<AppState>>;

pub fn router(state: Arc<AppState>) -> Router {
    let protected = Router::new()
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/v1/reranking", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .route("/reranking", post(rerank::rerank))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            guard::limit_in_flight,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    let mut app = Router::new()
        .route("/health", get(health))
        .merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    // The origins were checked when the server was loaded.
    if let Ok(Some(cors)) = cors(&state.cfg.cors_origins) {
        app = app.layer(cors);
    }
    app.layer(middleware::from_fn_with_state(
        state.clone(),
        guard::check_host,
    ))
    .layer(middleware::from_fn_with_state(state.clone(), track))
    .with_state(state)
}

/// The CORS layer for `origins` (`*`: any); none without origins.
pub fn cors(origins: &[String]) -> Result<Option<CorsLayer>, ServeError> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let list = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim_end_matches('/')).map_err(|_| {
                    ServeError::Config(format!("--cors-origin {o:?} is not an origin"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(list)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
            .max_age(std::time::Duration::from_secs(600)),
    ))
}

pub(crate) fn respond(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// Decrements the in-flight gauge however the request ends (a dropped
/// future included).
struct InFlight<'a>(&'a AppState);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.metrics.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Counts every request by route and status, and times it to its response head.
async fn track(State(s): St, req: Request, next: Next) -> Response {
    let route = Route::from_path(req.uri().path());
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let t0 = Instant::now();
    s.metrics.in_flight.fetch_add(1, Relaxed);
    let _guard = InFlight(&s);
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    s.metrics.record(route, status, t0.elapsed());
    tracing::debug!(
        "{method} {path} -> {status} in {:.1} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    resp
}

/// Bytewise equality whose time depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u64::from(a.len() != b.len());
    for (i, &y) in b.iter().enumerate() {
        let x = a.get(i).copied().unwrap_or(0);
        diff |= u64::from(std::hint::black_box(x ^ y));
    }
    std::hint::black_box(diff) == 0
}

/// With an API key set, requires `Authorization: Bearer KEY`.
async fn auth(State(s): St, req: Request, next: Next) -> Response {
    if let Some(key) = &s.cfg.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::trim);
        let token = given.and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
        match token {
            None => {
                return ApiError::unauthorized(
                    "Missing API key: send it as the header `Authorization: Bearer KEY`",
                )
                .into_response();
            }
            Some(t) if !constant_time_eq(t.trim().as_bytes(), key.as_bytes()) => {
                return ApiError::unauthorized("Incorrect API key provided").into_response();
            }
            Some(_) => {}
        }
    }
    next.run(req).await
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(s): St) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.render(),
    )
        .into_response()
}

fn model_objects(s: &AppState) -> Vec<Value> {
    let mut v = Vec::new();
    for e in &s.embedders {
        v.push(json!({
            "id": e.name, "object": "model", "created": s.started, "owned_by": "lamina",
            "meta": {"kind": if e.is_reranker() { "rerank" } else { "embedding" }, "n_ctx": e.n_ctx, "n_embd": e.dim, "n_vocab": e.n_vocab},
        }));
    }
    for g in &s.generators {
        let hp = &g.model.model.hp;
        v.push(json!({
            "id": g.name, "object": "model", "created": s.started, "owned_by": "lamina",
            "meta": {"kind": "generation", "architecture": hp.arch_name, "n_ctx": g.model.n_ctx,
                     "n_ctx_train": hp.n_ctx_train, "n_vocab": hp.n_vocab},
        }));
    }
    v
}

async fn list_models(State(s): St) -> Response {
    axum::Json(json!({"object": "list", "data": model_objects(&s)})).into_response()
}

async fn get_model(State(s): St, Path(id): Path<String>) -> Response {
    match model_objects(&s)
        .into_iter()
        .find(|m| m["id"] == id.as_str())
    {
        Some(m) => axum::Json(m).into_response(),
        None => ApiError::model_not_found(&id, &s.names()).into_response(),
    }
}

async fn not_found(req: Request) -> Response {
    ApiError::not_found(format!(
        "Unknown route {} {}: this server answers POST /v1/embeddings, /v1/rerank (also \
         /v1/reranking, /rerank, /reranking), /v1/completions, /v1/chat/completions, /tokenize, \
         /detokenize and GET /v1/models, /health, /metrics",
        req.method(),
        req.uri().path()
    ))
    .code("unknown_url")
    .into_response()
}

async fn method_not_allowed(req: Request) -> Response {
    ApiError::status(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
    .code("method_not_allowed")
    .into_response()
}

pub(crate) fn join_error(e: tokio::task::JoinError) -> ApiError {
    tracing::error!("a tokenizing task failed: {e}");
    ApiError::internal("tokenizing the input failed inside the server")
}

// ---------------------------------------------------------------------------
// Completions and chat completions

async fn completions(State(s): St, req: Request) -> Response {
    respond(generation(s, req, false).await)
}

async fn chat_completions(State(s): St, req: Request) -> Response {
    respond(generation(s, req, true).await)
}

/// The prompt's token ids: the chat rendered with the model's template, or
/// the completion prompt (text or ids).
async fn prompt_ids(
    s: &AppState,
    g: &GenHandle,
    req: GenRequest,
    chat: bool,
    tools: Option<Vec<Tool>>,
) -> Result<Vec<u32>, ApiError> {
    let gm = g.model.clone();
    if chat {
        let msgs = req.chat_messages()?;
        drop(req);
        let special = s.cfg.special_in_content;
        // Special-token text inside message content stays plain text unless
        // the server was told otherwise; a template error is the request's.
        return tokio::task::spawn_blocking(move || {
            gm.template
                .render_tokens_with_tools(&gm.tok, &msgs, tools.as_deref(), true, special)
                .map_err(|e| ApiError::invalid_param("messages", e.to_string()))
        })
        .await
        .map_err(join_error)?;
    }
    let Some(prompt) = &req.prompt else {
        return Err(ApiError::invalid_param(
            "prompt",
            "'prompt' is required: a string or an array of token ids",
        ));
    };
    let lim = InputLimits {
        n_vocab: gm.tok.n_vocab(),
        max_inputs: 1,
        max_tokens: s.cfg.max_request_tokens,
    };
    let mut inputs = input::parse_inputs("prompt", prompt, lim)?;
    drop(req);
    match inputs.items.pop() {
        Some(Input::Tokens(t)) => Ok(t),
        Some(Input::Text(t)) => tokio::task::spawn_blocking(move || {
            // A prompt must leave room for one generated token.
            gm.tok
                .encode_within(&t, true, true, gm.n_ctx.saturating_sub(1))
                .map_err(|e| prompt_error(&e, "prompt", gm.n_ctx))
        })
        .await
        .map_err(join_error)?,
        None => Err(ApiError::invalid_param("prompt", "'prompt' is empty")),
    }
}

/// A tokenizing error of a prompt (`field`): over the context, or bad input.
fn prompt_error(e: &ModelError, field: &str, n_ctx: usize) -> ApiError {
    match e {
        ModelError::ContextExceeded {
            n_tokens, at_least, ..
        } => ApiError::invalid_param(
            field,
            format!(
                "The prompt has {}{n_tokens} tokens, which leaves no room in the context of \
                 {n_ctx} tokens (the server's --ctx)",
                if *at_least { "at least " } else { "" }
            ),
        )
        .code("context_length_exceeded"),
        _ => from_model(e),
    }
}

async fn generation(s: Arc<AppState>, req: Request, chat: bool) -> Result<Response, ApiError> {
    let permit = req.extensions().get::<InFlightPermit>().cloned();
    let body = guard::json_body(&s, req).await?;
    let req: GenRequest = api::parse(&body)?;
    drop(body);
    let g = s.generator(req.model.as_deref())?;
    let n_ctx = g.model.n_ctx;
    let mut params = req.params(n_ctx, chat, s.cfg.max_n)?;
    let tool_list = params.tools.as_ref().map(|t| t.list.clone());
    let prompt = prompt_ids(&s, g, req, chat, tool_list).await?;
    let field = if chat { "messages" } else { "prompt" };
    if prompt.is_empty() {
        return Err(ApiError::invalid_param(
            field,
            format!("'{field}' gives no tokens"),
        ));
    }
    if prompt.len() >= n_ctx {
        return Err(ApiError::invalid_param(
            field,
            format!(
                "The prompt has {} tokens, which leaves no room in the context of {n_ctx} tokens \
                 (the server's --ctx)",
                prompt.len()
            ),
        )
        .code("context_length_exceeded"));
    }
    // The `n` choices are `n` generations of one prompt with seeds seed,
    // seed + 1, ...; the scheduler copies the prompt's keys and values from
    // the first to the others instead of computing them again.
    // Compiled off the async threads: the first grammar also compiles the
    // model's vocabulary.
    let format = g.model.template.tool_format;
    let (grammar, param) = match &params.tools {
        Some(tools) => (format.grammar(tools, &g.model.tok), "tools"),
        None => (params.grammar.take(), "response_format"),
    };
    let constraint = match grammar {
        None => None,
        Some(grammar) => {
            let gm = g.model.clone();
            let compiled = tokio::task::spawn_blocking(move || gm.constraint(&grammar, param));
            Some(compiled.await.map_err(join_error)??)
        }
    };
    let (tx, rx) = mpsc::unbounded_channel();
    for index in 0..params.n {
        let mut sampler = params.sampler.clone();
        sampler.seed = sampler.seed.wrapping_add(index as u64);
        let job = GenJob {
            prompt: prompt.clone(),
            sampler,
            opts: GenerateOptions {
                max_tokens: params.max_tokens,
                stop: params.stop.clone(),
                ignore_eos: params.ignore_eos,
            },
            index,
            logprobs: params.logprobs,
            // Each choice follows the grammar from its start.
            constraint: constraint.clone(),
            tx: tx.clone(),
            enqueued: Instant::now(),
        };
        s.metrics.gen_queue.fetch_add(1, Relaxed);
        if g.queue.push(job, s.cfg.max_queue).is_err() {
            // Choices already queued are dropped by the worker with `rx`.
            s.metrics.gen_queue.fetch_sub(1, Relaxed);
            s.metrics.rejected.fetch_add(1, Relaxed);
            return Err(ApiError::busy(format!(
                "The server is busy: {} generation requests are already waiting; retry later",
                s.cfg.max_queue
            )));
        }
    }
    drop(tx);
    let id = s.next_id.fetch_add(1, Relaxed);
    let reply = Reply {
        chat,
        id: format!(
            "{}-{:x}{id:06x}",
            if chat { "chatcmpl" } else { "cmpl" },
            s.started
        ),
        created: api::unix_now(),
        model: g.name.clone(),
    };
    let names: Option<Vec<String>> = params
        .tools
        .as_ref()
        .map(|t| t.list.iter().map(|t| t.name.clone()).collect());
    let choices = (0..params.n)
        .map(|i| {
            let seed = params.sampler.seed ^ (id << 8 | i as u64);
            let parser = names
                .as_ref()
                .map(|names| ToolParser::new(format, names.clone(), seed));
            ChoiceState::new(params.logprobs.is_some(), parser)
        })
        .collect();
    if params.stream {
        let stream = sse_stream(rx, reply, choices, params.include_usage, permit);
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    // Not streamed: gather the text. If the client goes away, this future
    // is dropped with `rx`, and the slots stop at their next token.
    let mut rx = rx;
    let mut choices: Vec<ChoiceState> = choices;
    let mut usage = Usage::default();
    let mut left = params.n;
    while let Some((i, ev)) = rx.recv().await {
        let Some(c) = choices.get_mut(i) else {
            continue;
        };
        match ev {
            GenEvent::Text(t) => c.text.push_str(&t),
            GenEvent::Logprobs(e) => c.push(e),
            GenEvent::Done {
                stop,
                prompt_tokens,
                completion_tokens,
            } => {
                c.finish = api::finish_reason(stop);
                c.split_calls();
                usage.prompt_tokens = prompt_tokens;
                usage.completion_tokens += completion_tokens;
                left -= 1;
                if left == 0 {
                    let choices = choices
                        .iter_mut()
                        .map(|c| api::Choice {
                            text: std::mem::take(&mut c.text),
                            finish: c.finish,
                            logprobs: c.take_logprobs(chat),
                            tool_calls: std::mem::take(&mut c.calls),
                        })
                        .collect();
                    return Ok(axum::Json(reply.full(choices, usage)).into_response());
                }
            }
            GenEvent::Error(e) => return Err(e),
        }
    }
    Err(ApiError::internal("the generation worker stopped"))
}

/// One choice being gathered or streamed.
///
/// Every sampled token gets a log-probability entry, in order, so there are
/// as many as `completion_tokens`: the end-of-generation token (spelt out,
/// e.g. `<|im_end|>`) and the tokens of a matched stop string are reported
/// although their text is cut from the content. OpenAI documents no rule
/// for them; this keeps the count of entries that of the usage, and the
/// streamed answer the same as the whole one.
struct ChoiceState {
    text: String,
    /// Entries not yet written (`None`: the request asked for none).
    entries: Option<Vec<TokenLogprobs>>,
    /// Text offset of the next completions entry, in characters.
    offset: usize,
    finish: &'static str,
    /// Splits the reply into text and calls (a request with tools).
    parser: Option<ToolParser>,
    /// The calls of the reply so far.
    calls: Vec<ToolCall>,
}

impl ChoiceState {
    fn new(logprobs: bool, parser: Option<ToolParser>) -> ChoiceState {
        ChoiceState {
            text: String::new(),
            entries: logprobs.then(Vec::new),
            offset: 0,
            finish: "stop",
            parser,
            calls: Vec::new(),
        }
    }

    /// A whole reply's text split into text and calls; a reply that calls
    /// finishes with `tool_calls`, as OpenAI's do.
    fn split_calls(&mut self) {
        let Some(p) = &mut self.parser else {
            return;
        };
        let mut out = Vec::new();
        p.push(&self.text, &mut out);
        p.finish(&mut out);
        self.text.clear();
        for d in out {
            match d {
                ToolDelta::Content(s) => self.text.push_str(&s),
                ToolDelta::Call(c) => self.calls.push(c),
            }
        }
        if !self.calls.is_empty() && self.finish == "stop" {
            self.finish = "tool_calls";
        }
    }

    fn push(&mut self, e: TokenLogprobs) {
        if let Some(v) = &mut self.entries {
            v.push(e);
        }
    }

    fn pending(&self) -> bool {
        self.entries.as_ref().is_some_and(|v| !v.is_empty())
    }

    /// The `logprobs` object of the entries so far (which are then written).
    fn take_logprobs(&mut self, chat: bool) -> Option<Value> {
        let entries = self.entries.as_mut()?;
        let v = if chat {
            logprobs::chat(entries)
        } else {
            logprobs::completions(entries, &mut self.offset)
        };
        entries.clear();
        Some(v)
    }
}

struct SseState {
    rx: mpsc::UnboundedReceiver<(usize, GenEvent)>,
    reply: Reply,
    choices: Vec<ChoiceState>,
    /// Choices not finished yet.
    left: usize,
    usage: Usage,
    include_usage: bool,
    pending: VecDeque<Event>,
    started: bool,
    finished: bool,
    /// The stream counts as in flight until it ends.
    _permit: Option<InFlightPermit>,
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// The OpenAI chunk stream: a role chunk per choice (chat), a chunk per
/// piece of text (with the log-probabilities of the tokens up to it when
/// asked), a chunk with `finish_reason` per choice, the usage chunk if
/// asked for, `[DONE]`. An error ends the stream with `data: {"error": …}`.
fn sse_stream(
    rx: mpsc::UnboundedReceiver<(usize, GenEvent)>,
    reply: Reply,
    choices: Vec<ChoiceState>,
    include_usage: bool,
    permit: Option<InFlightPermit>,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> + Send {
    let st = SseState {
        rx,
        reply,
        left: choices.len(),
        choices,
        usage: Usage::default(),
        include_usage,
        pending: VecDeque::new(),
        started: false,
        finished: false,
        _permit: permit,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(ev) = st.pending.pop_front() {
                return Some((Ok(ev), st));
            }
            if st.finished {
                return None;
            }
            if !st.started {
                st.started = true;
                if st.reply.chat {
                    for i in 0..st.choices.len() {
                        let role = st.reply.chunk(i, None, true, None, None);
                        st.pending.push_back(data(&role));
                    }
                }
                continue;
            }
            let chat = st.reply.chat;
            let Some((i, ev)) = st.rx.recv().await else {
                st.pending.push_back(data(
                    &ApiError::internal("the generation worker stopped").body(),
                ));
                st.finished = true;
                continue;
            };
            let Some(c) = st.choices.get_mut(i) else {
                continue;
            };
            match ev {
                GenEvent::Logprobs(e) => c.push(e),
                GenEvent::Text(t) if c.parser.is_some() => {
                    let mut out = Vec::new();
                    if let Some(p) = &mut c.parser {
                        p.push(&t, &mut out);
                    }
                    stream_deltas(&st.reply, i, c, out, &mut st.pending);
                }
                GenEvent::Text(t) => {
                    let lp = c.take_logprobs(chat);
                    let chunk = st.reply.chunk(i, Some(&t), false, None, lp);
                    st.pending.push_back(data(&chunk));
                }
                GenEvent::Done {
                    stop,
                    prompt_tokens,
                    completion_tokens,
                } => {
                    let mut finish = api::finish_reason(stop);
                    if c.parser.is_some() {
                        let mut out = Vec::new();
                        if let Some(p) = &mut c.parser {
                            p.finish(&mut out);
                        }
                        stream_deltas(&st.reply, i, c, out, &mut st.pending);
                        if !c.calls.is_empty() && finish == "stop" {
                            finish = "tool_calls";
                        }
                    }
                    // Tokens whose text was held back or cut still get their entries.
                    if c.pending() {
                        let lp = c.take_logprobs(chat);
                        let chunk = st.reply.chunk(i, Some(""), false, None, lp);
                        st.pending.push_back(data(&chunk));
                    }
                    let chunk = st.reply.chunk(i, None, false, Some(finish), None);
                    st.pending.push_back(data(&chunk));
                    st.usage.prompt_tokens = prompt_tokens;
                    st.usage.completion_tokens += completion_tokens;
                    st.left -= 1;
                    if st.left == 0 {
                        if st.include_usage {
                            st.pending.push_back(data(&st.reply.usage_chunk(st.usage)));
                        }
                        st.pending.push_back(Event::default().data("[DONE]"));
                        st.finished = true;
                    }
                }
                GenEvent::Error(e) => {
                    st.pending.push_back(data(&e.body()));
                    st.finished = true;
                }
            }
        }
    })
}

/// Writes what a choice's tool parser settled: text as content chunks
/// (with the log-probabilities so far), each call as its two deltas.
fn stream_deltas(
    reply: &Reply,
    i: usize,
    c: &mut ChoiceState,
    out: Vec<ToolDelta>,
    pending: &mut VecDeque<Event>,
) {
    for d in out {
        match d {
            ToolDelta::Content(t) => {
                let lp = c.take_logprobs(true);
                pending.push_back(data(&reply.chunk(i, Some(&t), false, None, lp)));
            }
            ToolDelta::Call(call) => {
                for delta in crate::tools::call_deltas(c.calls.len(), &call) {
                    pending.push_back(data(&reply.delta_chunk(i, delta)));
                }
                c.calls.push(call);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn key_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
        assert!(!constant_time_eq(b"secret!", b"secret"));
        assert!(!constant_time_eq(b"secre", b"secret"));
        assert!(!constant_time_eq(b"", b"secret"));
    }
}
