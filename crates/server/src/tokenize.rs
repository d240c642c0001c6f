//! `POST /tokenize` and `POST /detokenize`, in llama-server's shape:
//! `{content, add_special, parse_special, with_pieces}` -> `{tokens: [id]}`
//! or `{tokens: [{id, piece}]}` (a piece that is not valid UTF-8 on its own
//! is its array of bytes), and `{tokens: [id]}` -> `{content}`. Any loaded
//! model's tokenizer answers; `model` picks one as on the other routes.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::error::{ApiError, from_model, too_many_tokens};
use crate::input::{self, Input, InputLimits};
use crate::routes::{St, join_error, respond};
use crate::{AppState, api, guard};

#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub content: Option<String>,
    /// Add BOS/EOS as the model does (llama-server's default: no).
    #[serde(default)]
    pub add_special: Option<bool>,
    /// Read special-token text such as `<s>` as that token (default: yes).
    #[serde(default)]
    pub parse_special: Option<bool>,
    #[serde(default)]
    pub with_pieces: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct DetokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub tokens: Option<Box<RawValue>>,
}

pub async fn tokenize(State(s): St, req: Request) -> Response {
    respond(tokenize_inner(s, req).await)
}

pub async fn detokenize(State(s): St, req: Request) -> Response {
    respond(detokenize_inner(s, req).await)
}

async fn tokenize_inner(s: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let body = guard::json_body(&s, req).await?;
    let req: TokenizeRequest = api::parse(&body)?;
    drop(body);
    let (index, _) = s.tokenizer(req.model.as_deref())?;
    // llama-server answers a request without content with no tokens.
    let content = req.content.unwrap_or_default();
    let add_special = req.add_special.unwrap_or(false);
    let parse_special = req.parse_special.unwrap_or(true);
    let with_pieces = req.with_pieces.unwrap_or(false);
    let budget = s.cfg.max_request_tokens;
    let st = s.clone();
    let tokens = tokio::task::spawn_blocking(move || {
        let tok = st.tokenizer_at(index);
        let ids = tok
            .encode_within(&content, add_special, parse_special, budget)
            .map_err(|e| match e {
                lamina_model::ModelError::ContextExceeded { .. } => {
                    too_many_tokens("content", budget)
                }
                e => from_model(&e),
            })?;
        if !with_pieces {
            return Ok::<Value, ApiError>(json!(ids));
        }
        let pieces = ids
            .iter()
            .map(|&id| {
                let piece = tok.token_to_piece(id, true);
                let piece = match String::from_utf8(piece) {
                    Ok(text) => Value::String(text),
                    Err(e) => json!(e.into_bytes()),
                };
                json!({"id": id, "piece": piece})
            })
            .collect();
        Ok(Value::Array(pieces))
    })
    .await
    .map_err(join_error)??;
    Ok(axum::Json(json!({ "tokens": tokens })).into_response())
}

async fn detokenize_inner(s: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let body = guard::json_body(&s, req).await?;
    let req: DetokenizeRequest = api::parse(&body)?;
    drop(body);
    let (index, n_vocab) = s.tokenizer(req.model.as_deref())?;
    let ids = match req.tokens.as_deref() {
        None => Vec::new(),
        Some(raw) if empty_array(raw.get()) => Vec::new(),
        Some(raw) => {
            let lim = InputLimits {
                n_vocab,
                max_inputs: 1,
                max_tokens: s.cfg.max_request_tokens,
            };
            let mut inputs = input::parse_inputs("tokens", raw, lim)?;
            match inputs.items.pop() {
                Some(Input::Tokens(ids)) if !inputs.many => ids,
                _ => {
                    return Err(ApiError::invalid_param(
                        "tokens",
                        "'tokens' must be an array of token ids",
                    ));
                }
            }
        }
    };
    let tok = s.tokenizer_at(index);
    // As llama-server: the pieces joined, special tokens written out.
    let mut bytes = Vec::new();
    for &id in &ids {
        tok.append_piece(id, true, &mut bytes);
    }
    let content = String::from_utf8_lossy(&bytes).into_owned();
    Ok(axum::Json(json!({ "content": content })).into_response())
}

/// Whether a JSON array's text is `[]` (whitespace allowed).
fn empty_array(text: &str) -> bool {
    text.trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .is_some_and(|inner| inner.trim().is_empty())
}
