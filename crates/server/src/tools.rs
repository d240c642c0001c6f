//! Tool calling on chat completions: `tools`, `tool_choice` and
//! `parallel_tool_calls` checked into the model's [`Tools`], earlier calls
//! and tool results read from the messages, and the `tool_calls` of a
//! reply written in OpenAI's shapes, whole and streamed.

use lamina_model::chat::tools::{Tool, ToolCall, ToolChoice, Tools};
use serde_json::{Value, json};

use crate::error::ApiError;

/// Most tools a request may offer (OpenAI's limit).
pub const MAX_TOOLS: usize = 128;

/// Longest function name (OpenAI's limit).
const MAX_NAME: usize = 64;

/// A function name as OpenAI allows it: 1 to 64 letters, digits, `_`, `-`.
fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_param(param, message)
}

/// The request's tools, or `None` when it offers none or `tool_choice` is
/// `none` (the reply is then plain text).
pub fn parse(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<Tools>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.len() <= MAX_TOOLS => items
            .iter()
            .enumerate()
            .map(|(i, t)| tool(t, &format!("tools[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(items)) => {
            return Err(bad(
                "tools",
                format!(
                    "'tools' has {} entries: at most {MAX_TOOLS} are allowed",
                    items.len()
                ),
            ));
        }
        Some(_) => {
            return Err(bad(
                "tools",
                "'tools' must be an array of {\"type\": \"function\", \"function\": {...}} objects",
            ));
        }
    };
    for (i, t) in list.iter().enumerate() {
        if list[..i].iter().any(|u| u.name == t.name) {
            return Err(bad(
                &format!("tools[{i}]"),
                format!("two tools are named {:?}: names must be unique", t.name),
            ));
        }
    }
    let choice = match choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => return Ok(None),
            "required" => ToolChoice::Required,
            other => {
                return Err(bad(
                    "tool_choice",
                    format!(
                        "'tool_choice' is {other:?}: use \"auto\", \"none\", \"required\" or \
                         {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
                    ),
                ));
            }
        },
        Some(v @ Value::Object(_)) => match (v.get("type"), v.pointer("/function/name")) {
            (Some(t), Some(Value::String(name))) if t == "function" => {
                if !list.iter().any(|t| &t.name == name) {
                    return Err(bad(
                        "tool_choice",
                        format!(
                            "'tool_choice' names the function {name:?}, which 'tools' does not offer"
                        ),
                    ));
                }
                ToolChoice::Function(name.clone())
            }
            _ => {
                return Err(bad(
                    "tool_choice",
                    "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ));
            }
        },
        Some(_) => {
            return Err(bad(
                "tool_choice",
                "'tool_choice' must be a string or a {\"type\": \"function\", ...} object",
            ));
        }
    };
    if list.is_empty() {
        return match choice {
            ToolChoice::Auto => Ok(None),
            _ => Err(bad(
                "tool_choice",
                "'tool_choice' asks for a call, but the request offers no 'tools'",
            )),
        };
    }
    Ok(Some(Tools {
        list,
        choice,
        // llama-server's default: one call per reply unless asked.
        parallel: parallel.unwrap_or(false),
    }))
}

/// One `{"type": "function", "function": {name, description?, parameters?}}`.
fn tool(v: &Value, param: &str) -> Result<Tool, ApiError> {
    let shape = || {
        bad(
            param,
            format!(
                "'{param}' must be {{\"type\": \"function\", \"function\": {{\"name\": ..., \
                 \"description\": ..., \"parameters\": {{JSON Schema}}}}}}"
            ),
        )
    };
    match v.get("type") {
        Some(Value::String(t)) if t == "function" => {}
        Some(Value::String(t)) => {
            return Err(bad(
                param,
                format!("'{param}.type' is {t:?}: only \"function\" tools are supported"),
            )
            .code("unsupported_parameter"));
        }
        _ => return Err(shape()),
    }
    let Some(f @ Value::Object(_)) = v.get("function") else {
        return Err(shape());
    };
    let name = match f.get("name") {
        Some(Value::String(n)) if valid_name(n) => n.clone(),
        Some(Value::String(n)) => {
            return Err(bad(
                param,
                format!(
                    "'{param}.function.name' is {n:?}: a name is 1 to {MAX_NAME} letters, digits, \
                     underscores or dashes"
                ),
            ));
        }
        _ => return Err(shape()),
    };
    let description = match f.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(shape()),
    };
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(bad(
                param,
                format!("'{param}.function.parameters' must be a JSON Schema object"),
            ));
        }
    };
    Ok(Tool {
        name,
        description,
        parameters,
    })
}

/// The calls of an assistant message, as sent back by the client.
pub fn message_calls(v: &Value, param: &str) -> Result<Vec<ToolCall>, ApiError> {
    let Value::Array(items) = v else {
        return Err(bad(
            param,
            format!("'{param}' must be an array of tool calls"),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let at = format!("{param}[{i}]");
            let text = |ptr: &str| match c.pointer(ptr) {
                Some(Value::String(s)) => Some(s.clone()),
                _ => None,
            };
            let (Some(name), Some(arguments)) =
                (text("/function/name"), text("/function/arguments"))
            else {
                return Err(bad(
                    &at,
                    format!(
                        "'{at}' must be {{\"id\": ..., \"type\": \"function\", \"function\": \
                         {{\"name\": ..., \"arguments\": \"JSON text\"}}}}"
                    ),
                ));
            };
            Ok(ToolCall {
                id: text("/id").unwrap_or_default(),
                name,
                arguments,
            })
        })
        .collect()
}

/// A call as a whole reply writes it.
pub fn call_json(c: &ToolCall) -> Value {
    json!({
        "id": c.id,
        "type": "function",
        "function": {"name": c.name, "arguments": c.arguments},
    })
}

/// The two stream deltas of call `k` of a choice: its id and name, then
/// its arguments (a client appends the `arguments` pieces of one index).
pub fn call_deltas(k: usize, c: &ToolCall) -> [Value; 2] {
    [
        json!({"tool_calls": [{
            "index": k, "id": c.id, "type": "function",
            "function": {"name": c.name, "arguments": ""},
        }]}),
        json!({"tool_calls": [{"index": k, "function": {"arguments": c.arguments}}]}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools_of(v: Value) -> Result<Option<Tools>, ApiError> {
        parse(v.get("tools"), v.get("tool_choice"), None)
    }

    #[test]
    fn tools_are_checked() {
        let f = json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}});
        let t = tools_of(json!({"tools": [f]})).unwrap().unwrap();
        assert_eq!(
            (t.list[0].name.as_str(), &t.choice),
            ("get_weather", &ToolChoice::Auto)
        );
        let named = json!({"tools": [f], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}});
        assert_eq!(
            tools_of(named).unwrap().unwrap().choice,
            ToolChoice::Function("get_weather".into())
        );
        assert_eq!(
            tools_of(json!({"tools": [f], "tool_choice": "none"})).unwrap(),
            None
        );
        assert_eq!(tools_of(json!({"tools": []})).unwrap(), None);
        for bad in [
            json!({"tools": 3}),
            json!({"tools": [{"type": "web_search"}]}),
            json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}]}),
            json!({"tools": [f, f]}),
            json!({"tools": [f], "tool_choice": "sometimes"}),
            json!({"tools": [f], "tool_choice": {"type": "function", "function": {"name": "other"}}}),
            json!({"tool_choice": "required"}),
            json!({"tools": vec![f.clone(); MAX_TOOLS + 1]}),
        ] {
            assert!(tools_of(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn earlier_calls_are_read() {
        let v = json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]);
        let calls = message_calls(&v, "messages[1].tool_calls").unwrap();
        assert_eq!(calls[0].arguments, "{\"a\":1}");
        assert!(message_calls(&json!([{"function": {"name": "f"}}]), "x").is_err());
    }
}
