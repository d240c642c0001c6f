//! The OpenAI request bodies, their validation, and the response bodies.
//!
//! Requests are parsed from the raw body (never through axum's `Json`
//! extractor) so every failure — malformed JSON, invalid UTF-8, a field of
//! the wrong type — becomes a 400 with an OpenAI error body naming the field.

use std::time::{SystemTime, UNIX_EPOCH};

use lamina_model::chat::Message;
use lamina_model::chat::tools::{ToolCall, Tools};
use lamina_model::generate::StopReason;
use lamina_model::grammar::Grammar;
use lamina_model::sampling::SamplerParams;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::input::{Content, Role, Shape, Stop};
use crate::logprobs::{MAX_TOP_CHAT, MAX_TOP_COMPLETIONS};
use crate::tree::Tree;

/// Most stop strings a request may give.
pub const MAX_STOP: usize = 16;
/// Longest stop string, in bytes.
pub const MAX_STOP_LEN: usize = 1024;

/// Parses a JSON body into `T`; errors name the field at fault.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    crate::tree::reset();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty: expected a JSON object",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data if path != "." => {
                ApiError::invalid_param(&path, format!("Invalid value for '{path}': {inner}"))
            }
            serde_json::error::Category::Data => {
                ApiError::invalid(format!("Invalid request body: {inner}"))
            }
            _ => ApiError::invalid(format!(
                "We could not parse the JSON body of your request ({inner}). \
                 The body must be a JSON object in UTF-8."
            )),
        }
    })?;
    de.end().map_err(|e| {
        ApiError::invalid(format!(
            "We could not parse the JSON body of your request ({e}): \
             there is more after the JSON object"
        ))
    })?;
    Ok(value)
}

// ---------------------------------------------------------------------------
// Embeddings

#[derive(Debug, Deserialize)]
pub struct EmbeddingsRequest {
    /// A string, an array of strings, an array of token ids, or an array of
    /// arrays of token ids.
    pub input: Box<RawValue>,
    #[serde(default)]
    pub model: Option<String>,
    /// `float` (default) or `base64` (little-endian f32 bytes).
    #[serde(default)]
    pub encoding_format: Option<String>,
    /// Matryoshka truncation (re-normalised).
    #[serde(default)]
    pub dimensions: Option<i64>,
    /// A task prompt of the model (`query`, `document`, …) prepended to texts.
    #[serde(default)]
    pub task: Option<String>,
    /// sentence-transformers' name for `task`.
    #[serde(default)]
    pub prompt_name: Option<String>,
    /// Cut texts longer than the context instead of refusing them.
    #[serde(default)]
    pub truncate: Option<bool>,
    #[serde(default)]
    pub user: Option<Shape>,
}

/// How embeddings are written in the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

pub fn encoding(format: Option<&str>) -> Result<Encoding, ApiError> {
    match format {
        None | Some("float") => Ok(Encoding::Float),
        Some("base64") => Ok(Encoding::Base64),
        Some(other) => Err(ApiError::invalid_param(
            "encoding_format",
            format!("'encoding_format' must be \"float\" or \"base64\", not {other:?}"),
        )),
    }
}

pub fn dimensions(d: Option<i64>, width: usize) -> Result<Option<usize>, ApiError> {
    match d {
        None => Ok(None),
        Some(d) if d >= 1 && d as u64 <= width as u64 => Ok(Some(d as usize)),
        Some(d) => Err(ApiError::invalid_param(
            "dimensions",
            format!("'dimensions' is {d}: it must lie between 1 and {width}"),
        )),
    }
}

/// Matryoshka truncation then L2 normalisation (a no-op for full-width
/// vectors, which the model already normalised).
pub fn truncate_normalise(mut v: Vec<f32>, dim: Option<usize>) -> Vec<f32> {
    if let Some(d) = dim
        && d < v.len()
    {
        v.truncate(d);
        let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        if norm > 0.0 {
            let s = (1.0 / norm) as f32;
            v.iter_mut().for_each(|x| *x *= s);
        }
    }
    v
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum EmbeddingValue {
    Float(Vec<f32>),
    Base64(String),
}

impl EmbeddingValue {
    pub fn new(v: Vec<f32>, enc: Encoding) -> EmbeddingValue {
        match enc {
            Encoding::Float => EmbeddingValue::Float(v),
            Encoding::Base64 => {
                use base64::Engine as _;
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                EmbeddingValue::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

#[derive(Serialize)]
pub struct EmbeddingData {
    pub object: &'static str,
    pub index: usize,
    pub embedding: EmbeddingValue,
}

#[derive(Serialize)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Serialize)]
pub struct EmbeddingsResponse {
    pub object: &'static str,
    pub data: Vec<EmbeddingData>,
    pub model: String,
    pub usage: EmbeddingUsage,
}

// ---------------------------------------------------------------------------
// Completions and chat completions

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// One chat message as sent.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: Option<Content>,
    /// An assistant turn's calls.
    #[serde(default)]
    pub tool_calls: Option<Tree>,
    /// The call a `tool` turn answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The function a `tool` turn answers for.
    #[serde(default)]
    pub name: Option<String>,
}

/// `response_format`: `text`, `json_object`, or `json_schema` with its
/// `{"name", "schema", "strict"}` object.
#[derive(Debug, Deserialize)]
pub struct ResponseFormat {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub json_schema: Option<JsonSchemaFormat>,
}

/// OpenAI's `json_schema` response format. `strict` is accepted either
/// way: the schema is always enforced.
#[derive(Debug, Deserialize)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub schema: Option<Tree>,
    #[serde(default)]
    pub strict: Option<bool>,
}

impl ResponseFormat {
    /// The grammar a reply must follow (`None`: free text).
    fn grammar(&self) -> Result<Option<Grammar>, ApiError> {
        match self.kind.as_deref() {
            None | Some("text") => Ok(None),
            Some("json_object") => Ok(Some(Grammar::JsonObject)),
            Some("json_schema") => {
                match self
                    .json_schema
                    .as_ref()
                    .and_then(|j| j.schema.as_ref())
                    .map(|t| &t.0)
                {
                    Some(schema @ Value::Object(_)) => {
                        Ok(Some(Grammar::JsonSchema(schema.clone())))
                    }
                    Some(_) => Err(ApiError::invalid_param(
                        "response_format",
                        "'response_format.json_schema.schema' must be a JSON Schema object",
                    )),
                    // OpenAI's schema is optional: without one, any JSON object.
                    None => Ok(Some(Grammar::JsonObject)),
                }
            }
            Some(other) => Err(ApiError::invalid_param(
                "response_format",
                format!(
                    "'response_format.type' is {other:?}: use \"text\", \"json_object\" or \"json_schema\""
                ),
            )),
        }
    }
}

/// The fields of `/v1/completions` and `/v1/chat/completions` (one struct:
/// `prompt` for the first, `messages` for the second).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GenRequest {
    pub model: Option<String>,
    pub prompt: Option<Box<RawValue>>,
    pub messages: Option<Vec<ChatMessage>>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub repeat_last_n: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<i64>,
    pub best_of: Option<i64>,
    pub logprobs: Option<LogprobsField>,
    pub top_logprobs: Option<i64>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub tools: Option<Tree>,
    pub tool_choice: Option<Tree>,
    pub parallel_tool_calls: Option<bool>,
    pub functions: Option<Shape>,
    pub response_format: Option<ResponseFormat>,
    /// llama-server's GBNF grammar: refused, GBNF is not served.
    pub grammar: Option<Shape>,
    /// llama-server's JSON Schema field, the same as a `json_schema` response format.
    pub json_schema: Option<Tree>,
    pub logit_bias: Option<Shape>,
    pub ignore_eos: Option<bool>,
    pub user: Option<Shape>,
}

/// `logprobs` as sent: chat's boolean, the legacy completions' count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum LogprobsField {
    Bool(bool),
    Int(i64),
    Other(Shape),
}

/// A validated generation request (everything but the prompt).
#[derive(Clone, Debug)]
pub struct GenParams {
    /// Choices to generate, each its own sample of the prompt.
    pub n: usize,
    /// Log-probabilities with this many alternatives per token (`None`: off).
    pub logprobs: Option<usize>,
    pub sampler: SamplerParams,
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// What the reply must follow (`response_format`).
    pub grammar: Option<Grammar>,
    /// The functions the reply may call (chat only).
    pub tools: Option<Tools>,
}

fn check_range(name: &str, v: Option<f64>, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match v {
        None => Ok(None),
        Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(Some(x as f32)),
        Some(x) => Err(ApiError::invalid_param(
            name,
            format!("'{name}' is {x}: it must lie between {lo} and {hi}"),
        )),
    }
}

fn unsupported(name: &str, what: &str) -> ApiError {
    ApiError::invalid_param(name, format!("{what} is not supported by this server"))
        .code("unsupported_parameter")
}

/// A fresh seed when the request gives none (or -1, llama-server's "random").
fn random_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    // SplitMix64 of time and a counter: distinct for requests in the same nanosecond.
    let mut z = t ^ c.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl GenRequest {
    /// The grammar of `response_format`, or of llama-server's `json_schema`.
    fn grammar(&self) -> Result<Option<Grammar>, ApiError> {
        let from_format = match &self.response_format {
            Some(rf) => rf.grammar()?,
            None => None,
        };
        match (self.json_schema.as_ref().map(|t| &t.0), from_format) {
            (None | Some(Value::Null), g) => Ok(g),
            (Some(schema @ Value::Object(_)), None) => {
                Ok(Some(Grammar::JsonSchema(schema.clone())))
            }
            (Some(Value::Object(_)), Some(_)) => Err(ApiError::invalid_param(
                "json_schema",
                "give either 'json_schema' or a JSON 'response_format', not both",
            )),
            (Some(_), _) => Err(ApiError::invalid_param(
                "json_schema",
                "'json_schema' must be a JSON Schema object",
            )),
        }
    }

    /// Checks the sampling and limit fields; `n_ctx` bounds `max_tokens`.
    /// Unset sampling fields take llama-server's defaults.
    /// `chat` picks the endpoint's `logprobs` rules; `max_n` bounds `n`.
    pub fn params(&self, n_ctx: usize, chat: bool, max_n: usize) -> Result<GenParams, ApiError> {
        let n = match self.n {
            None => 1,
            Some(n) if n >= 1 && n as u64 <= max_n as u64 => n as usize,
            Some(n) => {
                return Err(ApiError::invalid_param(
                    "n",
                    format!("'n' is {n}: it must lie between 1 and {max_n} (the server's --max-n)"),
                ));
            }
        };
        if let Some(b) = self.best_of
            && b != 1
        {
            return Err(unsupported("best_of", "'best_of' other than 1"));
        }
        let logprobs = if chat {
            self.chat_logprobs()?
        } else {
            self.completion_logprobs()?
        };
        if self.echo == Some(true) {
            return Err(unsupported("echo", "'echo'"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(unsupported("suffix", "'suffix'"));
        }
        let tools = if chat {
            crate::tools::parse(
                self.tools.as_ref().map(|t| &t.0),
                self.tool_choice.as_ref().map(|t| &t.0),
                self.parallel_tool_calls,
            )?
        } else if !matches!(self.tools, None | Some(Tree(Value::Null))) {
            return Err(ApiError::invalid_param(
                "tools",
                "'tools' belongs to /v1/chat/completions",
            ));
        } else {
            None
        };
        if !matches!(self.functions, None | Some(Shape::Null | Shape::Array(0))) {
            return Err(unsupported("functions", "Function calling"));
        }
        if !matches!(self.grammar, None | Some(Shape::Null)) {
            return Err(unsupported(
                "grammar",
                "A GBNF 'grammar' (use 'response_format' with a JSON Schema)",
            ));
        }
        if !matches!(self.logit_bias, None | Some(Shape::Null | Shape::Object(0))) {
            return Err(unsupported("logit_bias", "'logit_bias'"));
        }

        let (max_name, max) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(m), _) => ("max_completion_tokens", Some(m)),
            (None, m) => ("max_tokens", m),
        };
        let max_tokens = match max {
            None | Some(-1) => None,
            Some(m) if m >= 0 && m as u64 <= n_ctx as u64 => Some(m as usize),
            Some(m) => {
                return Err(ApiError::invalid_param(
                    max_name,
                    format!(
                        "'{max_name}' is {m}: it must lie between 0 and the context size, {n_ctx} \
                         (or be -1 for no limit)"
                    ),
                ));
            }
        };

        let d = SamplerParams::default();
        let temp = check_range("temperature", self.temperature, 0.0, 2.0)?.unwrap_or(d.temp);
        let top_p = check_range("top_p", self.top_p, 0.0, 1.0)?.unwrap_or(d.top_p);
        let min_p = check_range("min_p", self.min_p, 0.0, 1.0)?.unwrap_or(d.min_p);
        let frequency_penalty =
            check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?
                .unwrap_or(d.frequency_penalty);
        let presence_penalty = check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)?
            .unwrap_or(d.presence_penalty);
        let repeat_penalty = check_range("repeat_penalty", self.repeat_penalty, 0.0, 10.0)?
            .unwrap_or(d.repeat_penalty);
        if repeat_penalty <= 0.0 {
            return Err(ApiError::invalid_param(
                "repeat_penalty",
                "'repeat_penalty' must be above 0 (1 is off)",
            ));
        }
        let top_k = match self.top_k {
            None => d.top_k,
            Some(k) if k >= 0 => usize::try_from(k).unwrap_or(usize::MAX),
            Some(k) => {
                return Err(ApiError::invalid_param(
                    "top_k",
                    format!("'top_k' is {k}: it must be 0 (off) or more"),
                ));
            }
        };
        let penalty_last_n = match self.repeat_last_n {
            None => d.penalty_last_n,
            Some(-1) => n_ctx,
            Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX).min(n_ctx),
            Some(n) => {
                return Err(ApiError::invalid_param(
                    "repeat_last_n",
                    format!("'repeat_last_n' is {n}: it must be -1 (the context), 0 (off) or more"),
                ));
            }
        };
        let seed = match self.seed {
            None | Some(-1) => random_seed(),
            Some(s) => s as u64,
        };

        let stop = self.stop.as_ref().map_or(&[][..], |s| &s.0[..]);
        if stop.len() > MAX_STOP || stop.iter().any(|s| s.len() > MAX_STOP_LEN) {
            return Err(ApiError::invalid_param(
                "stop",
                format!(
                    "'stop' may hold at most {MAX_STOP} strings of at most {MAX_STOP_LEN} bytes"
                ),
            ));
        }
        let stop = stop.iter().filter(|s| !s.is_empty()).cloned().collect();

        Ok(GenParams {
            n,
            logprobs,
            sampler: SamplerParams {
                temp,
                top_k,
                top_p,
                min_p,
                repeat_penalty,
                frequency_penalty,
                presence_penalty,
                penalty_last_n,
                seed,
            },
            max_tokens,
            stop,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            stream: self.stream.unwrap_or(false),
            include_usage: self
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            grammar: match (self.grammar()?, &tools) {
                (Some(_), Some(_)) => {
                    return Err(ApiError::invalid_param(
                        "response_format",
                        "a JSON 'response_format' and 'tools' cannot be combined: a reply is \
                         either a tool call or the JSON object (set 'tool_choice' to \"none\" \
                         to keep the format)",
                    ));
                }
                (g, _) => g,
            },
            tools,
        })
    }

    /// Chat's `logprobs` (a boolean) and `top_logprobs` (0 to 20; above 0
    /// only with `logprobs: true`, as OpenAI requires).
    fn chat_logprobs(&self) -> Result<Option<usize>, ApiError> {
        let on = match &self.logprobs {
            None | Some(LogprobsField::Bool(false) | LogprobsField::Other(Shape::Null)) => false,
            Some(LogprobsField::Bool(true)) => true,
            Some(_) => {
                return Err(ApiError::invalid_param(
                    "logprobs",
                    "'logprobs' must be true or false on chat completions \
                     (ask for alternatives with 'top_logprobs')",
                ));
            }
        };
        match self.top_logprobs {
            None => Ok(on.then_some(0)),
            // Clients that always send a zero mean "none"; nothing to refuse.
            Some(0) if !on => Ok(None),
            Some(k) if !on => Err(ApiError::invalid_param(
                "top_logprobs",
                format!(
                    "'top_logprobs' is {k}, but 'logprobs' is not true: set 'logprobs' to true to use it"
                ),
            )),
            Some(k) if (0..=MAX_TOP_CHAT as i64).contains(&k) => Ok(Some(k as usize)),
            Some(k) => Err(ApiError::invalid_param(
                "top_logprobs",
                format!("'top_logprobs' is {k}: it must lie between 0 and {MAX_TOP_CHAT}"),
            )),
        }
    }

    /// The legacy completions' `logprobs`: how many alternatives, 0 to 5.
    fn completion_logprobs(&self) -> Result<Option<usize>, ApiError> {
        if self.top_logprobs.is_some() {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "'top_logprobs' belongs to chat completions: on /v1/completions, \
                 'logprobs' is the number of alternatives",
            ));
        }
        match &self.logprobs {
            None | Some(LogprobsField::Other(Shape::Null) | LogprobsField::Bool(false)) => Ok(None),
            Some(LogprobsField::Int(k)) if (0..=MAX_TOP_COMPLETIONS as i64).contains(k) => {
                Ok(Some(*k as usize))
            }
            Some(_) => Err(ApiError::invalid_param(
                "logprobs",
                format!(
                    "'logprobs' must be an integer between 0 and {MAX_TOP_COMPLETIONS} on \
                     /v1/completions (the number of alternatives per token)"
                ),
            )),
        }
    }

    /// The chat messages as the template takes them.
    pub fn chat_messages(&self) -> Result<Vec<Message>, ApiError> {
        let Some(msgs) = &self.messages else {
            return Err(ApiError::invalid_param(
                "messages",
                "'messages' is required: an array of {\"role\", \"content\"} objects",
            ));
        };
        if msgs.is_empty() {
            return Err(ApiError::invalid_param(
                "messages",
                "'messages' is empty: send at least one message",
            ));
        }
        msgs.iter()
            .enumerate()
            .map(|(i, m)| {
                let param = format!("messages[{i}]");
                let role = match m.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                    Role::Tool => "tool",
                };
                let tool_calls = match m.tool_calls.as_ref().map(|t| &t.0) {
                    None | Some(Value::Null) => Vec::new(),
                    Some(v) if role == "assistant" => {
                        crate::tools::message_calls(v, &format!("{param}.tool_calls"))?
                    }
                    Some(_) => {
                        return Err(ApiError::invalid_param(
                            &format!("{param}.tool_calls"),
                            format!("'{param}.tool_calls' belongs to assistant messages"),
                        ));
                    }
                };
                let content = match &m.content {
                    Some(Content::Text(s)) => s.clone(),
                    None | Some(Content::Null) if role == "assistant" => String::new(),
                    Some(Content::Parts(parts)) => {
                        let mut texts = Vec::with_capacity(parts.len());
                        for (j, p) in parts.iter().enumerate() {
                            match (p.kind.as_deref(), p.text.as_deref()) {
                                (Some("text"), Some(t)) => texts.push(t),
                                _ => {
                                    return Err(ApiError::invalid_param(
                                        &format!("{param}.content[{j}]"),
                                        format!(
                                            "'{param}.content[{j}]' is not a text part \
                                             ({{\"type\": \"text\", \"text\": ...}}); only text is supported"
                                        ),
                                    ));
                                }
                            }
                        }
                        texts.join("\n")
                    }
                    None | Some(Content::Null) => {
                        return Err(ApiError::invalid_param(
                            &format!("{param}.content"),
                            format!(
                                "'{param}.content' must be a string or an array of text parts"
                            ),
                        ));
                    }
                };
                let mut msg = Message::new(role, content);
                msg.tool_calls = tool_calls;
                if role == "tool" {
                    msg.tool_call_id = m.tool_call_id.clone();
                    msg.name = m.name.clone();
                }
                Ok(msg)
            })
            .collect()
    }
}

/// OpenAI's `finish_reason`.
pub fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Eos | StopReason::StopString | StopReason::Cancelled => "stop",
        StopReason::Length | StopReason::Context => "length",
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Token counts of a generation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
}

impl Usage {
    pub fn json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        })
    }
}

/// What the generation endpoints write: ids, object names and bodies.
#[derive(Clone, Debug)]
pub struct Reply {
    pub chat: bool,
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// One finished choice of a whole answer.
#[derive(Clone, Debug)]
pub struct Choice {
    pub text: String,
    pub finish: &'static str,
    /// The `logprobs` object, or `None` for `null`.
    pub logprobs: Option<Value>,
    /// The calls the reply made (chat with tools).
    pub tool_calls: Vec<ToolCall>,
}

impl Reply {
    /// The whole (non-streamed) answer.
    pub fn full(&self, choices: Vec<Choice>, usage: Usage) -> Value {
        let choices: Vec<Value> = choices
            .into_iter()
            .enumerate()
            .map(|(index, c)| {
                if self.chat {
                    let mut message = json!({"role": "assistant", "content": c.text});
                    if !c.tool_calls.is_empty() {
                        let calls: Vec<Value> =
                            c.tool_calls.iter().map(crate::tools::call_json).collect();
                        message["tool_calls"] = calls.into();
                        // OpenAI's content of a reply that only calls.
                        if c.text.is_empty() {
                            message["content"] = Value::Null;
                        }
                    }
                    json!({
                        "index": index,
                        "message": message,
                        "logprobs": c.logprobs,
                        "finish_reason": c.finish,
                    })
                } else {
                    json!({"index": index, "text": c.text, "logprobs": c.logprobs, "finish_reason": c.finish})
                }
            })
            .collect();
        json!({
            "id": self.id,
            "object": if self.chat { "chat.completion" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
            "usage": usage.json(),
        })
    }

    /// One streamed chunk of choice `index` carrying `text` (and the
    /// `finish_reason` on its last, the log-probabilities of its tokens when asked).
    pub fn chunk(
        &self,
        index: usize,
        text: Option<&str>,
        first: bool,
        finish: Option<&str>,
        logprobs: Option<Value>,
    ) -> Value {
        let choice = if self.chat {
            let delta = match (first, text) {
                (true, _) => json!({"role": "assistant", "content": ""}),
                (false, Some(t)) => json!({"content": t}),
                (false, None) => json!({}),
            };
            json!({"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
        } else {
            json!({"index": index, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish})
        };
        json!({
            "id": self.id,
            "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [choice],
        })
    }

    /// A streamed chat chunk of choice `index` with this `delta`.
    pub fn delta_chunk(&self, index: usize, delta: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{"index": index, "delta": delta, "logprobs": null, "finish_reason": null}],
        })
    }

    /// The closing chunk of `stream_options.include_usage`: no choices, the usage.
    pub fn usage_chunk(&self, usage: Usage) -> Value {
        json!({
            "id": self.id,
            "object": if self.chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [],
            "usage": usage.json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_the_field() {
        let e = parse::<GenRequest>(br#"{"temperature": "hot"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        assert_eq!(e.status.as_u16(), 400);
        let e = parse::<GenRequest>(br#"{"messages": [{"role": 5}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = parse::<GenRequest>(b"{\"model\": \"\xff\"}").unwrap_err();
        assert!(e.message.contains("could not parse"), "{}", e.message);
        assert!(parse::<GenRequest>(b"").is_err());
        assert!(parse::<GenRequest>(b"[1]").is_err());
        assert!(parse::<GenRequest>(b"{} {}").is_err());
        assert!(parse::<GenRequest>(b"{\"temperature\": NaN}").is_err());
        let e = parse::<EmbeddingsRequest>(b"{}").unwrap_err();
        assert!(e.message.contains("input"), "{}", e.message);
    }

    #[test]
    fn sampling_values_are_checked() {
        let p =
            |body: &str| parse::<GenRequest>(body.as_bytes()).and_then(|r| r.params(100, true, 4));
        assert!(p(r#"{"temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": 3}"#).is_ok());
        for bad in [
            r#"{"temperature": -1}"#,
            r#"{"temperature": 1e300}"#,
            r#"{"top_p": 1.5}"#,
            r#"{"top_k": -3}"#,
            r#"{"max_tokens": 101}"#,
            r#"{"max_tokens": -2}"#,
            r#"{"max_tokens": 1e12}"#,
            r#"{"n": 0}"#,
            r#"{"n": 5}"#,
            r#"{"logprobs": 2}"#,
            r#"{"top_logprobs": 2}"#,
            r#"{"logprobs": true, "top_logprobs": 21}"#,
            r#"{"logprobs": true, "top_logprobs": -1}"#,
            r#"{"stop": 5}"#,
            r#"{"presence_penalty": -3}"#,
            r#"{"repeat_penalty": 0}"#,
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
        let ok = p(r#"{"max_tokens": -1, "stop": ["a", ""], "seed": 7}"#).unwrap();
        assert_eq!(ok.max_tokens, None);
        assert_eq!(ok.stop, vec!["a".to_string()]);
        assert_eq!(ok.sampler.seed, 7);
        assert_eq!((ok.n, ok.logprobs), (1, None));
        let ok = p(r#"{"n": 4, "logprobs": true, "top_logprobs": 20}"#).unwrap();
        assert_eq!((ok.n, ok.logprobs), (4, Some(20)));
        assert_eq!(p(r#"{"logprobs": true}"#).unwrap().logprobs, Some(0));
        let zero = r#"{"logprobs": false, "top_logprobs": 0}"#;
        assert_eq!(p(zero).unwrap().logprobs, None);
    }

    #[test]
    fn completions_logprobs_are_a_count() {
        let p =
            |body: &str| parse::<GenRequest>(body.as_bytes()).and_then(|r| r.params(100, false, 8));
        assert_eq!(p(r#"{"logprobs": 0}"#).unwrap().logprobs, Some(0));
        assert_eq!(p(r#"{"logprobs": 5}"#).unwrap().logprobs, Some(5));
        assert_eq!(p(r#"{"logprobs": null}"#).unwrap().logprobs, None);
        for (bad, field) in [
            (r#"{"logprobs": 6}"#, "logprobs"),
            (r#"{"logprobs": true}"#, "logprobs"),
            (r#"{"logprobs": "2"}"#, "logprobs"),
            (r#"{"logprobs": 1, "top_logprobs": 1}"#, "top_logprobs"),
            (r#"{"n": 9}"#, "n"),
        ] {
            assert_eq!(p(bad).unwrap_err().param.as_deref(), Some(field), "{bad}");
        }
    }

    #[test]
    fn messages_are_checked() {
        let m = |body: &str| parse::<GenRequest>(body.as_bytes()).and_then(|r| r.chat_messages());
        let ok = m(
            r#"{"messages": [{"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}"#,
        )
        .unwrap();
        assert_eq!(ok[0], Message::new("system", "be brief"));
        assert_eq!(ok[1], Message::new("user", "hi"));
        for bad in [
            r#"{}"#,
            r#"{"messages": []}"#,
            r#"{"messages": [{"role": "wizard", "content": "x"}]}"#,
            r#"{"messages": [{"role": "user"}]}"#,
            r#"{"messages": [{"role": "user", "content": 3}]}"#,
            r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
            r#"{"messages": [{"role": "user", "content": "x", "tool_calls": []}]}"#,
            r#"{"messages": [{"role": "assistant", "content": "x", "tool_calls": 3}]}"#,
        ] {
            assert!(m(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn matryoshka_renormalises() {
        let v = truncate_normalise(vec![0.6, 0.8, 0.0, 0.0], Some(1));
        assert_eq!(v, vec![1.0]);
        assert_eq!(dimensions(Some(0), 768).unwrap_err().status.as_u16(), 400);
        assert_eq!(dimensions(Some(769), 768).unwrap_err().status.as_u16(), 400);
        assert_eq!(dimensions(Some(256), 768).unwrap(), Some(256));
    }
}
