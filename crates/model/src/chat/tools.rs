//! Tool calls: the tools a request offers, how the model's template writes
//! calls ([`ToolFormat`]), the grammar that forces a well-formed call, and
//! the conversation rewritten for templates that know no tools.
//!
//! A template that takes a `tools` variable gets the tools and the earlier
//! calls as Hugging Face templates expect them. A template without one (Gemma,
//! Phi-3.5, SmolLM2's ChatML) gets the [`ToolFormat::Generic`] convention
//! llama.cpp used before its automatic parsers: the tools are described in
//! the system message and the whole reply is one JSON object,
//! `{"tool_call": {...}}` or `{"response": "..."}`, held to that shape by a
//! grammar even when the model may choose.

use serde_json::{Map, Value, json};

use super::Message;
use crate::grammar::Grammar;
use crate::tokenizer::{Tokenizer, attr};

/// A function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema of the arguments object.
    pub parameters: Value,
}

impl Tool {
    /// OpenAI's `{"type": "function", "function": {...}}`, the shape
    /// templates read from `tools`.
    pub fn to_openai(&self) -> Value {
        let mut f = Map::new();
        f.insert("name".into(), json!(self.name));
        if let Some(d) = &self.description {
            f.insert("description".into(), json!(d));
        }
        f.insert("parameters".into(), self.parameters.clone());
        json!({"type": "function", "function": f})
    }
}

/// Whether and which tool the reply must call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model chooses between a call and a text reply.
    Auto,
    /// At least one call to any of the tools.
    Required,
    /// A call to this function.
    Function(String),
}

/// The tools of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    pub list: Vec<Tool>,
    pub choice: ToolChoice,
    /// More than one call in a reply.
    pub parallel: bool,
}

/// One call, as a reply makes it or an earlier assistant turn made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// How a template's model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one
    /// block per call (Qwen 2.5 and 3, Hermes 2 Pro, SmolLM3).
    Hermes,
    /// The reply is a JSON object `{"name": ..., "parameters": {...}}`
    /// (Llama 3.1 to 3.3).
    Llama3,
    /// A marker token, then a JSON array of `{"name", "arguments"}`:
    /// `[TOOL_CALLS]` (Mistral Nemo), `<|tool_call|>` (Granite 3).
    MarkedArray(&'static str),
    /// No tools in the template: the reply is one JSON object,
    /// `{"tool_call": {"name", "arguments"}}` (or `{"tool_calls": [...]}`)
    /// or `{"response": "..."}`.
    Generic,
}

/// Most calls a reply with parallel calls may make: a small model can
/// otherwise repeat a call until its token limit.
pub const MAX_PARALLEL_CALLS: usize = 8;

/// The system text of [`ToolFormat::Generic`] before the tool list.
const GENERIC_TOOLS: &str =
    "You can call any of the following tools to satisfy the user's requests: ";
/// The system text of [`ToolFormat::Generic`] after the tool list:
/// llama.cpp's rule, and a sentence that makes small models call a tool
/// that fits rather than describe it.
const GENERIC_RULE: &str = "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the user's request. When one of the tools can answer the request, call it.";

impl ToolFormat {
    /// The format of a template, from the markers its source writes.
    pub fn detect(src: &str) -> ToolFormat {
        if !src.contains("tools") {
            ToolFormat::Generic
        } else if src.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if src.contains("[TOOL_CALLS]") {
            ToolFormat::MarkedArray("[TOOL_CALLS]")
        } else if src.contains("<|tool_call|>") {
            ToolFormat::MarkedArray("<|tool_call|>")
        } else if src.contains("<|start_header_id|>") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// Whether the template itself renders the tools and calls.
    pub fn native(self) -> bool {
        self != ToolFormat::Generic
    }

    /// The name of the arguments field in a call.
    fn args_key(self) -> &'static str {
        match self {
            ToolFormat::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// The grammar a reply must follow, or `None` when the reply is free
    /// (a native format with `auto`: the reply is parsed afterwards).
    /// `tok` resolves a marker that is a control token.
    pub fn grammar(self, tools: &Tools, tok: &Tokenizer) -> Option<Grammar> {
        let offered: Vec<&Tool> = match &tools.choice {
            ToolChoice::Function(name) => tools.list.iter().filter(|t| &t.name == name).collect(),
            _ => tools.list.iter().collect(),
        };
        let call = call_schema(&offered, self.args_key());
        let most = if tools.parallel {
            MAX_PARALLEL_CALLS
        } else {
            1
        };
        let calls = json!({"type": "array", "items": call, "minItems": 1, "maxItems": most});
        match self {
            ToolFormat::Generic => {
                let call_obj = if tools.parallel {
                    object("tool_calls", calls)
                } else {
                    object("tool_call", call)
                };
                let schema = if tools.choice == ToolChoice::Auto {
                    json!({"anyOf": [call_obj, object("response", json!({"type": "string"}))]})
                } else {
                    call_obj
                };
                Some(Grammar::JsonSchema(schema))
            }
            _ if tools.choice == ToolChoice::Auto => None,
            ToolFormat::Hermes => {
                let start = match most {
                    1 => "start: call\n".to_string(),
                    n => format!("start: call more{{0,{}}}\nmore: \"\\n\" call\n", n - 1),
                };
                Some(Grammar::Lark(format!(
                    "{start}call: \"<tool_call>\\n\" body \"\\n</tool_call>\"\nbody: %json {}\n",
                    lark_json(&call)
                )))
            }
            ToolFormat::Llama3 => Some(Grammar::JsonSchema(call)),
            ToolFormat::MarkedArray(marker) => Some(Grammar::Lark(format!(
                "start: {} body\nbody: %json {}\n",
                lark_marker(marker, tok),
                lark_json(&calls)
            ))),
        }
    }
}

/// `{"KEY": value}` and nothing else.
fn object(key: &str, value: Value) -> Value {
    json!({
        "type": "object",
        "properties": {key: value},
        "required": [key],
        "additionalProperties": false,
    })
}

/// The schema of one call to any of `tools`: `{"name": const, ARGS: params}`
/// and nothing else (the arguments follow the function's own schema).
fn call_schema(tools: &[&Tool], args_key: &str) -> Value {
    let one = |t: &Tool| {
        json!({
            "type": "object",
            "properties": {"name": {"const": t.name}, args_key: t.parameters},
            "required": ["name", args_key],
            "additionalProperties": false,
        })
    };
    match tools {
        [t] => one(t),
        _ => json!({"anyOf": tools.iter().map(|t| one(t)).collect::<Vec<_>>()}),
    }
}

/// A schema inside a Lark grammar, with the engine's layout options.
fn lark_json(schema: &Value) -> String {
    crate::grammar::with_layout(schema.clone()).to_string()
}

/// A marker in Lark: its token when the vocabulary has it as a control
/// token (which has no text to spell), else its text.
fn lark_marker(marker: &str, tok: &Tokenizer) -> String {
    match tok.token_id(marker.as_bytes()) {
        Some(id) if tok.token_attr(id) & attr::CONTROL != 0 => format!("<[{id}]>"),
        _ => Value::from(marker).to_string(),
    }
}

/// The conversation as a template without tools takes it: the tools and
/// the reply rule in the system message, earlier calls as the JSON the
/// model would have written, tool results as user turns (consecutive
/// results in one turn, so roles still alternate).
pub fn generic_messages(msgs: &[Message], tools: &[Tool]) -> Vec<Message> {
    let list: Vec<Value> = tools.iter().map(Tool::to_openai).collect();
    let listing = serde_json::to_string_pretty(&list).unwrap_or_default();
    let system = format!("{GENERIC_TOOLS}{listing}\n\n{GENERIC_RULE}");
    let mut out: Vec<Message> = Vec::with_capacity(msgs.len() + 1);
    match msgs.first() {
        Some(m) if m.role == "system" => {
            out.push(Message::new("system", format!("{}\n\n{system}", m.content)))
        }
        _ => out.push(Message::new("system", system)),
    }
    let start = usize::from(msgs.first().is_some_and(|m| m.role == "system"));
    for m in &msgs[start..] {
        match m.role.as_str() {
            "assistant" if !m.tool_calls.is_empty() => {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({"name": c.name, "arguments": arguments_value(&c.arguments), "id": c.id}))
                    .collect();
                let body = match calls.as_slice() {
                    [one] => json!({"tool_call": one}),
                    _ => json!({"tool_calls": calls}),
                };
                out.push(Message::new("assistant", body.to_string()));
            }
            "tool" => {
                let result = json!({"tool_response": {
                    "tool": m.name.clone().unwrap_or_default(),
                    "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                }});
                match out.last_mut() {
                    Some(prev)
                        if prev.role == "user"
                            && prev.content.starts_with("{\"tool_response\"") =>
                    {
                        prev.content.push('\n');
                        prev.content.push_str(&result.to_string());
                    }
                    _ => out.push(Message::new("user", result.to_string())),
                }
            }
            _ => out.push(m.clone()),
        }
    }
    out
}

/// A call's arguments as templates read them: the object when the text is
/// JSON, the text itself otherwise.
pub fn arguments_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_of_real_templates() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/chat/templates/"
        );
        for (name, want) in [
            ("Qwen-Qwen2.5-7B-Instruct", ToolFormat::Hermes),
            ("Qwen-Qwen3-0.6B", ToolFormat::Hermes),
            ("meta-llama-Llama-3.1-8B-Instruct", ToolFormat::Llama3),
            ("meta-llama-Llama-3.2-3B-Instruct", ToolFormat::Llama3),
            (
                "mistralai-Mistral-Nemo-Instruct-2407",
                ToolFormat::MarkedArray("[TOOL_CALLS]"),
            ),
            (
                "ibm-granite-granite-3.3-2B-Instruct",
                ToolFormat::MarkedArray("<|tool_call|>"),
            ),
            ("google-gemma-2-2b-it", ToolFormat::Generic),
            ("microsoft-Phi-3.5-mini-instruct", ToolFormat::Generic),
        ] {
            let src = std::fs::read_to_string(format!("{dir}{name}.jinja")).unwrap();
            assert_eq!(ToolFormat::detect(&src), want, "{name}");
        }
    }

    #[test]
    fn generic_conversation() {
        let tools = [Tool {
            name: "f".into(),
            description: None,
            parameters: json!({"type": "object"}),
        }];
        let mut call = Message::new("assistant", "");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "f".into(),
            arguments: r#"{"a": 1}"#.into(),
        });
        let mut result = Message::new("tool", "42");
        result.tool_call_id = Some("c1".into());
        let msgs = [Message::new("user", "hi"), call, result.clone(), result];
        let out = generic_messages(&msgs, &tools);
        assert_eq!(out.len(), 4);
        assert!(
            out[0].content.starts_with(GENERIC_TOOLS),
            "{}",
            out[0].content
        );
        assert!(out[0].content.ends_with(GENERIC_RULE));
        assert_eq!(
            out[2].content,
            r#"{"tool_call":{"name":"f","arguments":{"a":1},"id":"c1"}}"#
        );
        assert_eq!(out[3].role, "user");
        assert_eq!(out[3].content.lines().count(), 2);
    }
}
