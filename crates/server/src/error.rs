//! Errors: [`ApiError`] is what a client sees (an HTTP status and an
//! OpenAI-style body), [`ServeError`] what stops the server from starting.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{path}: {source}")]
    Model {
        path: String,
        source: lamina_model::ModelError,
    },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// An error answered to a client: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's error type: `invalid_request_error`, `authentication_error`, …
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: Option<&'static str>,
    /// Seconds to put in a `Retry-After` header.
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 about one field.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError::invalid(message).param(param)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "authentication_error", message)
            .code("invalid_api_key")
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "invalid_request_error", message)
    }

    pub fn model_not_found(name: &str, loaded: &[String]) -> ApiError {
        ApiError::not_found(format!(
            "The model `{name}` does not exist or is not loaded; loaded: {}",
            loaded.join(", ")
        ))
        .param("model")
        .code("model_not_found")
    }

    /// 503 with `Retry-After`: the queue is full.
    pub fn busy(message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
            .code("server_busy");
        e.retry_after = Some(1);
        e
    }

    /// 500: something failed inside the server.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// Any other status (413, 405, 415, …) as an `invalid_request_error`.
    pub fn status(status: StatusCode, message: impl Into<String>) -> ApiError {
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        ApiError::new(status, kind, message)
    }

    pub fn param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_string());
        self
    }

    pub fn code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// A model error met while serving a request: bad input is the client's
/// fault (400), anything else the server's (500).
pub fn from_model(e: &lamina_model::ModelError) -> ApiError {
    use lamina_model::ModelError as M;
    match e {
        M::ContextExceeded { .. } => {
            ApiError::invalid(e.to_string()).code("context_length_exceeded")
        }
        _ if e.is_input() => ApiError::invalid(e.to_string()),
        _ => {
            // The detail may name files, tensors or kernels: it goes to the
            // log, not to the client.
            tracing::error!("a request failed inside the model: {e}");
            ApiError::internal(INTERNAL)
        }
    }
}

/// What a client is told about a failure inside the server.
pub const INTERNAL: &str = "The server failed to process the request; the details are in its log";

/// 413: a request's tokens exceed `--max-request-tokens`.
pub fn too_many_tokens(param: &str, limit: usize) -> ApiError {
    ApiError::status(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "'{param}' holds more than the {limit} tokens allowed per request \
             (the server's --max-request-tokens): split it over several requests"
        ),
    )
    .param(param)
    .code("too_many_tokens")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_do_not_leak_their_detail() {
        let e = lamina_model::ModelError::MissingTensor("/secret/path/blk.0.attn_q.weight".into());
        let api = from_model(&e);
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(api.message, INTERNAL);
        let body = api.body().to_string();
        assert!(
            !body.contains("secret") && !body.contains("blk.0"),
            "{body}"
        );
        assert_eq!(api.body()["error"]["type"], "server_error");
        // Client faults keep their explanation.
        let e = lamina_model::ModelError::BadToken { id: 9, n_vocab: 5 };
        assert_eq!(from_model(&e).status, StatusCode::BAD_REQUEST);
        assert!(from_model(&e).message.contains("token id 9"));
    }
}
