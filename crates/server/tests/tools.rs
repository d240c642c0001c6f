//! Tool calls on a real model (SmolLM2, whose template knows no tools, so
//! the generic JSON format applies): forced and named calls always parse
//! and follow the function's schema, `auto` lets the model choose, streamed
//! calls reassemble into the whole answer's, a tool result continues the
//! conversation, and malformed tools are 400s naming the field. With the
//! real templates of Qwen 2.5, Llama 3.2 and Mistral Nemo in its place,
//! forced calls take each family's own format.

mod common;

use common::*;
use lamina_server::ServeConfig;
use serde_json::{Value, json};

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            },
            "required": ["city"],
            "additionalProperties": false
        }
    }})
}

fn time() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time",
        "description": "Local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "maxLength": 40}},
            "required": ["tz"],
            "additionalProperties": false
        }
    }})
}

/// The calls of a whole answer's choice, checked against the tools'
/// schemas: `(name, arguments object)`.
fn calls(choice: &Value) -> Vec<(String, Value)> {
    let msg = &choice["message"];
    assert_eq!(choice["finish_reason"], "tool_calls", "{choice}");
    assert!(msg["content"].is_null(), "{msg}");
    msg["tool_calls"]
        .as_array()
        .unwrap_or_else(|| panic!("no tool_calls: {msg}"))
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "function");
            let id = c["id"].as_str().unwrap();
            let mistral = id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric());
            assert!(mistral || id.starts_with("call_") && id.len() == 29, "{id}");
            let name = c["function"]["name"].as_str().unwrap().to_string();
            let text = c["function"]["arguments"].as_str().unwrap();
            let args: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
            let o = args.as_object().unwrap();
            match name.as_str() {
                "get_weather" => {
                    assert!(o["city"].as_str().is_some_and(|c| c.chars().count() <= 40));
                    assert!(o.keys().all(|k| k == "city" || k == "unit"), "{args}");
                    if let Some(u) = o.get("unit") {
                        assert!(u == "celsius" || u == "fahrenheit", "{args}");
                    }
                }
                "get_time" => assert!(o["tz"].is_string() && o.len() == 1, "{args}"),
                other => panic!("unknown function {other}"),
            }
            (name, args)
        })
        .collect()
}

/// Each prompt with `tool_choice: "required"`, two choices sampled at
/// temperature 0.8: every choice makes exactly one valid call.
fn forced_calls(server: &lamina_server::Running, prompts: &[&str], label: &str) {
    for (i, p) in prompts.iter().enumerate() {
        let body = json!({
            "messages": [{"role": "user", "content": p}],
            "tools": [weather(), time()],
            "tool_choice": "required",
            "temperature": 0.8,
            "seed": i,
            "n": 2,
        });
        let r = post(server.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{label}: {}", r.text());
        for c in r.json()["choices"].as_array().unwrap() {
            assert_eq!(calls(c).len(), 1, "{label}: {c}");
        }
    }
}

#[test]
fn forced_and_named_calls_follow_the_schema() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 2);
    let prompts = [
        "What is the weather in Paris?",
        "I am flying to Tokyo tomorrow.",
        "Tell me a joke.",
    ];
    forced_calls(&server, &prompts, "ChatML");
    // A named function is the one called, whatever the prompt says.
    let body = json!({
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [weather(), time()],
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        "temperature": 0,
    });
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let got = calls(&r.json()["choices"][0]);
    assert_eq!(got[0].0, "get_time");
}

#[test]
fn auto_lets_the_model_choose() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 2);
    let ask = |content: &str| {
        let body = json!({
            "messages": [{"role": "user", "content": content}],
            "tools": [weather()],
            "temperature": 0,
            "max_tokens": 100,
        });
        let r = post(server.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["choices"][0].clone()
    };
    let c = ask("Use the get_weather tool to get the weather in Paris.");
    assert_eq!(
        calls(&c),
        [("get_weather".to_string(), json!({"city": "Paris"}))]
    );
    // Greedy SmolLM2 answers this one in words: plain content, no calls.
    let c = ask("Is it raining in Berlin right now?");
    assert!(c["message"]["tool_calls"].is_null(), "{c}");
    let text = c["message"]["content"].as_str().unwrap();
    assert!(!text.is_empty() && !text.starts_with('{'), "{text}");
}

#[test]
fn streamed_calls_reassemble() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 2);
    let body = json!({
        "messages": [{"role": "user", "content": "What time is it in Tokyo and in Lima?"}],
        "tools": [weather(), time()],
        "tool_choice": "required",
        "parallel_tool_calls": true,
        "temperature": 0,
    });
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let whole = r.json()["choices"][0]["message"]["tool_calls"].clone();
    assert!(!whole.as_array().unwrap().is_empty());

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post(server.addr, "/v1/chat/completions", &streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    // As a client does: fields by `index`, `arguments` appended.
    let mut got: Vec<Value> = Vec::new();
    let mut finish = None;
    for e in r.sse().iter().filter(|e| *e != "[DONE]") {
        let c: Value = serde_json::from_str(e).unwrap();
        let choice = &c["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
        assert!(
            choice["delta"]["content"]
                .as_str()
                .is_none_or(str::is_empty)
        );
        for d in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let k = d["index"].as_u64().unwrap() as usize;
            if k == got.len() {
                got.push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            let slot = &mut got[k];
            for key in ["id", "type"] {
                if let Some(v) = d[key].as_str() {
                    slot[key] = json!(v);
                }
            }
            if let Some(n) = d["function"]["name"].as_str() {
                slot["function"]["name"] = json!(n);
            }
            if let Some(a) = d["function"]["arguments"].as_str() {
                let s = slot["function"]["arguments"].as_str().unwrap().to_string() + a;
                slot["function"]["arguments"] = json!(s);
            }
        }
    }
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    // The ids are fresh per answer; the rest is the same.
    let strip = |v: &Value| -> Vec<Value> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["function"].clone())
            .collect()
    };
    assert_eq!(strip(&Value::Array(got)), strip(&whole));
}

#[test]
fn a_tool_result_continues_the_conversation() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 2);
    let body = json!({
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
        ],
        "tools": [weather()],
        "temperature": 0,
        "max_tokens": 60,
    });
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let c = &r.json()["choices"][0];
    let text = c["message"]["content"].as_str().unwrap_or_default();
    let n_calls = c["message"]["tool_calls"].as_array().map_or(0, Vec::len);
    assert!(!text.is_empty() || n_calls > 0, "{c}");
    // Without tools the same conversation is a plain chat.
    let mut plain = body.clone();
    plain["tool_choice"] = json!("none");
    let r = post(server.addr, "/v1/chat/completions", &plain);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["choices"][0]["message"]["tool_calls"].is_null());
}

#[test]
fn malformed_tools_name_their_field() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 2);
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let mut long = weather();
    long["function"]["name"] = json!("x".repeat(65));
    for (route, body, field) in [
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tools": {"a": 1}}),
            "tools",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tools": [long]}),
            "tools[0]",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tools": [{"type": "retrieval"}]}),
            "tools[0]",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tools": [weather()], "response_format": {"type": "json_object"}}),
            "response_format",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"id": 1}]}]}),
            "messages[0].tool_calls[0]",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}],
                "tool_choice": "required"}),
            "tools",
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "tools": [weather()]}),
            "tools",
        ),
    ] {
        let r = post(server.addr, route, &body);
        let v = r.assert_error(400, &body.to_string());
        assert_eq!(v["error"]["param"], field, "{v}");
    }
}

/// SmolLM2 serving another family's template: a forced call is written in
/// that family's format (held to it by a grammar) and parsed back.
#[test]
fn forced_calls_in_each_family_format() {
    let Some(path) = gen_model() else { return };
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/chat/templates");
    for name in [
        "Qwen-Qwen2.5-7B-Instruct",
        "meta-llama-Llama-3.2-3B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407",
    ] {
        let src = std::fs::read_to_string(dir.join(format!("{name}.jinja"))).unwrap();
        let server = start(ServeConfig {
            models: vec![path.clone()],
            ctx: Some(2048),
            parallel: 2,
            max_n: 4,
            chat_template: Some(src),
            ..Default::default()
        });
        let prompts = ["What is the weather in Paris?", "What time is it in Lima?"];
        forced_calls(&server, &prompts, name);
    }
}
