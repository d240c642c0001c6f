//! `POST /v1/rerank` (also `/v1/reranking`, `/rerank`, `/reranking`, as
//! llama-server answers them): a cross-encoder scores a query against each
//! document, many pairs per forward pass in the model's worker.
//!
//! Two request shapes, told apart by their field as llama-server does:
//! * `documents` (Jina, Cohere, llama-server): `{model, query, documents:
//!   [string | {text}], top_n, return_documents}` -> `{model, object, usage,
//!   results: [{index, relevance_score, document?: {text}}]}`;
//! * `texts` (text-embeddings-inference): `{query, texts, raw_scores,
//!   return_text, truncate}` -> `[{index, score, text?}]`.
//!
//! Results come sorted by score, highest first. A score is the sigmoid of
//! the model's relevance logit (in 0..1, as Jina, Cohere and TEI return), or
//! the raw logit with `"raw_scores": true` (what llama-server returns).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use lamina_model::ModelError;
use lamina_model::embed::{self, EmbedOptions, Pair};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::embeddings::{context_error, run_job};
use crate::error::{ApiError, from_model, too_many_tokens};
use crate::guard;
use crate::routes::{St, join_error, respond};
use crate::{AppState, EmbedQueue, api};

#[derive(Debug, Deserialize)]
pub struct RerankRequest {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub query: Option<String>,
    /// Jina / Cohere / llama-server: strings or `{"text": …}` objects.
    #[serde(default)]
    pub documents: Option<Box<RawValue>>,
    /// text-embeddings-inference: strings.
    #[serde(default)]
    pub texts: Option<Box<RawValue>>,
    #[serde(default)]
    pub top_n: Option<i64>,
    #[serde(default)]
    pub return_documents: Option<bool>,
    #[serde(default)]
    pub return_text: Option<bool>,
    #[serde(default)]
    pub raw_scores: Option<bool>,
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default)]
    pub truncation_direction: Option<String>,
}

/// The logistic function: a one-label cross-encoder's logit as a relevance in 0..1.
pub fn sigmoid(x: f32) -> f32 {
    (1.0 / (1.0 + (-(x as f64)).exp())) as f32
}

/// Indices of `scores` from the highest score down (ties keep document
/// order), at most `top_n`.
pub fn ranking(scores: &[f32], top_n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.truncate(top_n);
    order
}

pub async fn rerank(State(s): St, req: Request) -> Response {
    respond(rerank_inner(s, req).await)
}

async fn rerank_inner(s: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let body = guard::json_body(&s, req).await?;
    let req: RerankRequest = api::parse(&body)?;
    drop(body);
    let em = s.embedder(req.model.as_deref(), true)?;
    let index = s
        .embedders
        .iter()
        .position(|e| std::ptr::eq(e, em))
        .unwrap_or(0);
    let max_bytes = s.cfg.max_document_bytes;
    let (tei, param, raw) = match (&req.documents, &req.texts) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_param(
                "texts",
                "Give 'documents' or 'texts', not both",
            ));
        }
        (Some(d), None) => (false, "documents", d),
        (None, Some(t)) => (true, "texts", t),
        (None, None) => {
            return Err(ApiError::invalid_param(
                "documents",
                "'documents' is required: an array of strings (or 'texts', as \
                 text-embeddings-inference sends)",
            ));
        }
    };
    let query = match req.query.as_deref() {
        None => {
            return Err(ApiError::invalid_param(
                "query",
                "'query' is required: a string",
            ));
        }
        Some("") => return Err(ApiError::invalid_param("query", "'query' is empty")),
        Some(q) if q.len() > max_bytes => {
            return Err(ApiError::invalid_param(
                "query",
                format!(
                    "'query' has {} bytes, more than the {max_bytes} allowed \
                     (the server's --max-document-bytes)",
                    q.len()
                ),
            ));
        }
        Some(q) => q.to_string(),
    };
    let docs = parse_documents(param, raw, s.cfg.max_inputs, max_bytes)?;
    let top_n = match req.top_n {
        None => docs.len(),
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX).min(docs.len()),
        Some(n) => {
            return Err(ApiError::invalid_param(
                "top_n",
                format!("'top_n' is {n}: it must be at least 1"),
            ));
        }
    };
    if let Some(d) = req.truncation_direction.as_deref()
        && !d.eq_ignore_ascii_case("right")
    {
        return Err(ApiError::invalid_param(
            "truncation_direction",
            format!("'truncation_direction' is {d:?}: only \"right\" (cut the document's end) is supported"),
        )
        .code("unsupported_parameter"));
    }
    let truncate = req.truncate.unwrap_or(s.cfg.truncate);
    let raw_scores = req.raw_scores.unwrap_or(false);
    let return_docs = if tei {
        req.return_text.unwrap_or(false)
    } else {
        req.return_documents.unwrap_or(false)
    };
    let budget = s.cfg.max_request_tokens;
    let st = s.clone();
    let (pairs, docs) = tokio::task::spawn_blocking(move || {
        let em = &st.embedders[index];
        pair_ids(em, &query, &docs, param, truncate, budget).map(|p| (p, docs))
    })
    .await
    .map_err(join_error)??;
    let n_tokens: usize = pairs.iter().map(|p| p.ids.len()).sum();
    let EmbedQueue::Pairs(queue) = &em.queue else {
        return Err(ApiError::internal("the reranker has no pair queue"));
    };
    let logits = run_job(&s, queue, pairs, "rerank").await?;
    let scores: Vec<f32> = if raw_scores {
        logits
    } else {
        logits.into_iter().map(sigmoid).collect()
    };
    let order = ranking(&scores, top_n);
    let mut docs: Vec<Option<String>> = docs.into_iter().map(Some).collect();
    let results: Vec<Value> = order
        .into_iter()
        .map(|i| {
            let mut r = if tei {
                json!({"index": i, "score": scores[i]})
            } else {
                json!({"index": i, "relevance_score": scores[i]})
            };
            if return_docs {
                let text = docs[i].take().unwrap_or_default();
                if tei {
                    r["text"] = Value::String(text);
                } else {
                    r["document"] = json!({ "text": text });
                }
            }
            r
        })
        .collect();
    if tei {
        return Ok(axum::Json(results).into_response());
    }
    Ok(axum::Json(json!({
        "model": em.name,
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    }))
    .into_response())
}

/// Every query-document pair as the reranker tokenizes it, within the
/// context (cutting the document's end with `truncate`) and the request's
/// token budget.
fn pair_ids(
    em: &crate::EmbedModel,
    query: &str,
    docs: &[String],
    param: &str,
    truncate: bool,
    budget: usize,
) -> Result<Vec<Pair>, ApiError> {
    // The query alone must leave room for a document: checked once, so a
    // long query is not tokenized again for every document.
    if let Err(e) = em.tok.encode_within(query, false, true, em.n_ctx) {
        return Err(match e {
            ModelError::ContextExceeded {
                n_tokens, at_least, ..
            } => context_error("query", n_tokens, at_least, em.n_ctx),
            e => from_model(&e),
        });
    }
    let opts = EmbedOptions {
        truncate,
        ..EmbedOptions::default()
    };
    let mut total = 0usize;
    let mut pairs = Vec::with_capacity(docs.len());
    for (i, doc) in docs.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let pair = match embed::tokenize_pair_text(&em.tok, em.n_ctx, query, doc, &opts) {
            Ok(p) => p,
            Err(ModelError::ContextExceeded {
                n_tokens, at_least, ..
            }) => return Err(context_error(&at, n_tokens, at_least, em.n_ctx)),
            Err(e) if e.is_input() => {
                return Err(ApiError::invalid_param(&at, format!("'{at}': {e}")));
            }
            Err(e) => return Err(from_model(&e)),
        };
        total += pair.ids.len();
        if total > budget {
            return Err(too_many_tokens(param, budget));
        }
        pairs.push(pair);
    }
    Ok(pairs)
}

/// Parses `documents` / `texts`: a non-empty array of at most `max_docs`
/// strings (or `{"text": string}` objects, other keys ignored) of at most
/// `max_bytes` bytes each, streamed straight into `String`s.
pub fn parse_documents(
    param: &str,
    raw: &RawValue,
    max_docs: usize,
    max_bytes: usize,
) -> Result<Vec<String>, ApiError> {
    let seed = DocsSeed {
        param,
        max_docs,
        max_bytes,
        failure: RefCell::new(None),
    };
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let parsed = (&seed).deserialize(&mut de);
    if let Some(e) = seed.failure.into_inner() {
        return Err(e);
    }
    let docs = parsed.map_err(|e| {
        ApiError::invalid_param(
            param,
            format!("'{param}' must be an array of strings or {{\"text\": string}} objects ({e})"),
        )
    })?;
    if docs.is_empty() {
        return Err(ApiError::invalid_param(
            param,
            format!("'{param}' is empty: send at least one document"),
        ));
    }
    Ok(docs)
}

struct DocsSeed<'a> {
    param: &'a str,
    max_docs: usize,
    max_bytes: usize,
    /// The precise error when the visitor refuses something.
    failure: RefCell<Option<ApiError>>,
}

impl DocsSeed<'_> {
    fn fail<E: de::Error>(&self, e: ApiError) -> E {
        let msg = e.message.clone();
        *self.failure.borrow_mut() = Some(e);
        E::custom(msg)
    }

    fn text<E: de::Error>(&self, i: usize, v: String) -> Result<String, E> {
        if v.len() > self.max_bytes {
            let at = format!("{}[{i}]", self.param);
            return Err(self.fail(ApiError::invalid_param(
                &at,
                format!(
                    "'{at}' has {} bytes, more than the {} allowed (the server's \
                     --max-document-bytes)",
                    v.len(),
                    self.max_bytes
                ),
            )));
        }
        Ok(v)
    }
}

impl<'de> DeserializeSeed<'de> for &DocsSeed<'_> {
    type Value = Vec<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for &DocsSeed<'_> {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of documents")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut docs = Vec::new();
        while let Some(d) = seq.next_element_seed(DocSeed(self, docs.len()))? {
            if docs.len() >= self.max_docs {
                let param = self.param;
                return Err(self.fail(
                    ApiError::invalid_param(
                        param,
                        format!(
                            "'{param}' has more than the {} documents allowed per request \
                             (the server's --max-inputs)",
                            self.max_docs
                        ),
                    )
                    .code("too_many_inputs"),
                ));
            }
            docs.push(d);
        }
        Ok(docs)
    }
}

/// One document, the `index`-th.
struct DocSeed<'s, 'a>(&'s DocsSeed<'a>, usize);

impl<'de> DeserializeSeed<'de> for DocSeed<'_, '_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DocSeed<'_, '_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or an object with a \"text\" string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.0.text(self.1, v.to_string())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        self.0.text(self.1, v)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        let mut text = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "text" && text.is_none() {
                text = Some(self.0.text(self.1, map.next_value::<String>()?)?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        text.ok_or_else(|| {
            let at = format!("{}[{}]", self.0.param, self.1);
            self.0.fail(ApiError::invalid_param(
                &at,
                format!("'{at}' has no \"text\" string"),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(v: Value, max_docs: usize, max_bytes: usize) -> Result<Vec<String>, ApiError> {
        let raw = RawValue::from_string(v.to_string()).unwrap();
        parse_documents("documents", &raw, max_docs, max_bytes)
    }

    #[test]
    fn documents_take_strings_and_text_objects() {
        assert_eq!(
            docs(
                json!(["a", {"text": "b", "title": [1, {"x": 2}]}, ""]),
                3,
                8
            )
            .unwrap(),
            vec!["a", "b", ""]
        );
        for (bad, what) in [
            (json!([]), "is empty"),
            (json!("a"), "must be an array"),
            (json!([1]), "must be an array"),
            (json!([{"title": "x"}]), "'documents[0]' has no \"text\""),
            (json!([{"text": 3}]), "must be an array"),
            (json!(["a", "b", "c", "d"]), "more than the 3 documents"),
            (json!(["a", "123456789"]), "'documents[1]' has 9 bytes"),
            (json!([{"text": "123456789"}]), "'documents[0]' has 9 bytes"),
        ] {
            let e = docs(bad.clone(), 3, 8).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
            assert!(e.message.contains(what), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn ranking_sorts_by_score_and_keeps_order_on_ties() {
        assert_eq!(ranking(&[0.1, 0.9, 0.5, 0.9], 10), vec![1, 3, 2, 0]);
        assert_eq!(ranking(&[0.1, 0.9, 0.5], 2), vec![1, 2]);
        assert!((sigmoid(0.0) - 0.5).abs() < 1e-7);
        assert!((sigmoid(2.0) - 0.880_797_1).abs() < 1e-6);
        assert!(sigmoid(-100.0) >= 0.0 && sigmoid(100.0) <= 1.0);
    }
}
