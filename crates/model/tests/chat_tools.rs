//! Tools in real chat templates, against llama.cpp's own chat layer (gold in
//! `testdata/chat/gold/tools/`, from `testdata/chat/tool_cases.json`):
//! prompts with tools, earlier calls and tool results render as llama.cpp
//! renders them, and model replies split into text and calls as its
//! parsers split them.

mod common;

use common::{chat_dir, gold_template, read_json};
use lamina_model::chat::Message;
use lamina_model::chat::tool_parse::parse_reply;
use lamina_model::chat::tools::{Tool, ToolCall, ToolFormat};
use serde_json::Value;

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn messages(case: &Value) -> Vec<Message> {
    case["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let mut msg = Message::new(
                m["role"].as_str().unwrap(),
                text(m, "content").unwrap_or_default(),
            );
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                msg.tool_calls.push(ToolCall {
                    id: text(c, "id").unwrap_or_default(),
                    name: text(&c["function"], "name").unwrap(),
                    arguments: text(&c["function"], "arguments").unwrap(),
                });
            }
            msg.tool_call_id = text(m, "tool_call_id");
            msg.name = text(m, "name");
            msg
        })
        .collect()
}

fn tools(case: &Value) -> Vec<Tool> {
    case["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| Tool {
            name: text(&t["function"], "name").unwrap(),
            description: text(&t["function"], "description"),
            parameters: t["function"]["parameters"].clone(),
        })
        .collect()
}

/// Checks one template on every tool case: the prompt (native formats;
/// llama.cpp gives templates without tools no tools at all) and the split
/// of every reply, except the replies of `ours` where llama.cpp finds no
/// call and lamina does. Returns the number of replies checked.
fn check(name: &str, format: ToolFormat, ours: &[&str]) -> usize {
    let dir = chat_dir();
    let gold = read_json(dir.join(format!("gold/tools/{name}.json")));
    let cases = read_json(dir.join("tool_cases.json"));
    let t = gold_template(name, &gold);
    assert_eq!(t.tool_format, format, "{name}");
    let mut replies = 0;
    for (case, want) in cases
        .as_array()
        .unwrap()
        .iter()
        .zip(gold["cases"].as_array().unwrap())
    {
        assert_eq!(case["name"], want["name"], "{name}: gold is stale");
        let ts = tools(case);
        let names: Vec<&str> = ts.iter().map(|t| t.name.as_str()).collect();
        let got = t.render_with_tools(&messages(case), Some(&ts), true);
        if format.native() {
            assert_eq!(
                got.unwrap(),
                want["prompt"].as_str().unwrap(),
                "{name}: {}",
                case["name"]
            );
        } else {
            let got = got.unwrap();
            assert!(
                got.contains("get_"),
                "{name}: the tools are described: {got}"
            );
        }
        for r in want["replies"].as_array().into_iter().flatten() {
            let reply = r["text"].as_str().unwrap();
            let (content, calls) = parse_reply(format, &names, reply, 1);
            let calls: Vec<(String, String)> =
                calls.into_iter().map(|c| (c.name, c.arguments)).collect();
            let want_calls: Vec<(String, String)> = r["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| (text(c, "name").unwrap(), text(c, "arguments").unwrap()))
                .collect();
            if ours.contains(&reply) {
                assert!(
                    want_calls.is_empty() && !calls.is_empty(),
                    "{name}: {reply}"
                );
            } else {
                assert_eq!(
                    content,
                    r["content"].as_str().unwrap().trim(),
                    "{name}: {reply}"
                );
                assert_eq!(calls, want_calls, "{name}: {reply}");
            }
            replies += 1;
        }
    }
    replies
}

#[test]
fn qwen_hermes_calls() {
    assert_eq!(
        check("Qwen-Qwen2.5-7B-Instruct", ToolFormat::Hermes, &[]),
        4
    );
    assert_eq!(check("Qwen-Qwen3-0.6B", ToolFormat::Hermes, &[]), 4);
}

#[test]
fn llama3_json_calls() {
    for name in [
        "meta-llama-Llama-3.1-8B-Instruct",
        "meta-llama-Llama-3.2-3B-Instruct",
    ] {
        assert_eq!(check(name, ToolFormat::Llama3, &[]), 2);
    }
}

#[test]
fn mistral_nemo_calls() {
    let f = ToolFormat::MarkedArray("[TOOL_CALLS]");
    assert_eq!(check("mistralai-Mistral-Nemo-Instruct-2407", f, &[]), 2);
}

/// llama.cpp's automatic parser finds no calls in Granite's
/// `<|tool_call|>[...]`, the format its template asks for; lamina does.
#[test]
fn granite_calls() {
    let f = ToolFormat::MarkedArray("<|tool_call|>");
    let granite = r#"<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]"#;
    assert_eq!(
        check("ibm-granite-granite-3.3-2B-Instruct", f, &[granite]),
        2
    );
}

/// Templates without tools: llama.cpp renders none (and Gemma 2's raises
/// on a tool result); lamina describes them in the system message.
#[test]
fn templates_without_tools_get_the_generic_format() {
    check("google-gemma-2-2b-it", ToolFormat::Generic, &[]);
    check("microsoft-Phi-3.5-mini-instruct", ToolFormat::Generic, &[]);
}
