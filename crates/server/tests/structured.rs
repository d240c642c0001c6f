//! Structured output on a real model: `response_format` with a JSON Schema
//! or `json_object` gives replies that parse and validate, streamed as
//! whole, for every choice of `n`; refused grammars are 400s naming the
//! field.

mod common;

use common::*;
use serde_json::{Value, json};

fn book_format() -> Value {
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": "Book",
            "strict": true,
            "schema": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 60},
                    "year": {"type": "integer", "minimum": 1400, "maximum": 2030},
                    "genre": {"enum": ["novel", "poetry", "science", "history"]}
                },
                "required": ["title", "year", "genre"],
                "additionalProperties": false
            }
        }
    })
}

fn assert_book(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let o = v.as_object().unwrap();
    assert_eq!(
        o.keys().map(String::as_str).collect::<Vec<_>>(),
        ["title", "year", "genre"]
    );
    assert!(o["title"].as_str().is_some_and(|t| t.chars().count() <= 60));
    assert!(
        o["year"]
            .as_i64()
            .is_some_and(|y| (1400..=2030).contains(&y))
    );
    assert!(["novel", "poetry", "science", "history"].contains(&o["genre"].as_str().unwrap()));
}

#[test]
fn json_schema_replies_validate_for_every_choice() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 4);
    let body = json!({
        "messages": [{"role": "user", "content": "Recommend a book."}],
        "response_format": book_format(),
        "temperature": 0.8,
        "seed": 11,
        "n": 3,
    });
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    let mut whole = Vec::new();
    for c in choices {
        assert_eq!(c["finish_reason"], "stop", "{c}");
        let text = c["message"]["content"].as_str().unwrap();
        assert_book(text);
        whole.push(text.to_string());
    }

    // Streamed: the same texts, chunk by chunk.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post(server.addr, "/v1/chat/completions", &streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    let mut texts = vec![String::new(); 3];
    for e in r.sse().iter().filter(|e| *e != "[DONE]") {
        let c: Value = serde_json::from_str(e).unwrap();
        for choice in c["choices"].as_array().unwrap() {
            if let Some(t) = choice["delta"]["content"].as_str() {
                texts[choice["index"].as_u64().unwrap() as usize].push_str(t);
            }
        }
    }
    assert_eq!(texts, whole);
}

#[test]
fn json_object_and_llama_server_json_schema() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 4);
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": "Give me a colour as JSON."}],
            "response_format": {"type": "json_object"},
            "temperature": 0,
        }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        serde_json::from_str::<Value>(&text).unwrap().is_object(),
        "{text}"
    );

    // llama-server's top-level `json_schema`, on the completions route.
    let schema = book_format()["json_schema"]["schema"].clone();
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({
            "prompt": "A famous book, as JSON:",
            "json_schema": schema,
            "temperature": 0,
        }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_book(r.json()["choices"][0]["text"].as_str().unwrap());
}

#[test]
fn refused_grammars_name_their_field() {
    let Some(path) = gen_model() else { return };
    let server = generation_server(&path, 4);
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (body, field) in [
        (
            json!({"messages": msgs, "response_format": {"type": "xml"}}),
            "response_format",
        ),
        (
            json!({"messages": msgs, "response_format": {"type": "json_schema",
                "json_schema": {"name": "x", "schema": {"$ref": "#/missing"}}}}),
            "response_format",
        ),
        (
            json!({"messages": msgs, "response_format": {"type": "json_schema",
                "json_schema": {"name": "x", "schema": 5}}}),
            "response_format",
        ),
        (
            json!({"messages": msgs, "grammar": "root ::= \"a\""}),
            "grammar",
        ),
        (json!({"messages": msgs, "json_schema": [1]}), "json_schema"),
        (
            json!({"messages": msgs, "json_schema": {"type": "object"},
                "response_format": {"type": "json_object"}}),
            "json_schema",
        ),
    ] {
        let r = post(server.addr, "/v1/chat/completions", &body);
        let v = r.assert_error(400, &body.to_string());
        assert_eq!(v["error"]["param"], field, "{v}");
    }
}
