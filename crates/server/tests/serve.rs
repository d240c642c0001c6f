//! The server over real HTTP on loopback: answers against the in-process
//! engine, streaming, batching, bad input, the API key, limits, cancellation.
//! Tests that need a model skip (saying so) when it is absent.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use lamina_kernels::pool::Rayon;
use lamina_model::embed::{EmbedOptions, Embedder};
use lamina_model::generate::{GenerateOptions, Session};
use lamina_model::sampling::{Sampler, SamplerParams};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model};
use lamina_server::ServeConfig;
use serde_json::{Value, json};

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn chat_body(content: &str, max_tokens: i64) -> Value {
    json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// Greedy continuation of a chat, in process, the prompt evaluated `batch`
/// tokens per forward pass.
fn in_process_chat(
    path: &std::path::Path,
    content: &str,
    max_tokens: usize,
    batch: usize,
) -> (usize, String) {
    let model = Model::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let ids = chat_ids(&model, &tok, content);
    let mut session = Session::with_batch(&model, &tok, 1024, KvType::F16, batch).unwrap();
    session.prefill(&ids, &Rayon).unwrap();
    let mut sampler = Sampler::new(SamplerParams::greedy(), model.hp.n_vocab);
    let opts = GenerateOptions {
        max_tokens: Some(max_tokens),
        ..Default::default()
    };
    let g = session
        .generate(&mut sampler, &opts, &Rayon, &mut |_| true)
        .unwrap();
    (ids.len(), g.text)
}

#[test]
fn chat_matches_the_engine_streamed_and_not() {
    let Some(path) = gen_model() else { return };
    // Prompts go through 8 tokens per forward (and per turn), as in process.
    let server = start(ServeConfig {
        models: vec![path.clone()],
        ctx: Some(1024),
        parallel: 2,
        prompt_batch: 8,
        ..Default::default()
    });
    let q = "What is the capital of France?";
    let (n_prompt, want) = in_process_chat(&path, q, 24, 8);
    assert!(n_prompt > 8, "the prompt spans several batches");

    let r = post(server.addr, "/v1/chat/completions", &chat_body(q, 24));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    assert_eq!(v["usage"]["prompt_tokens"], n_prompt);
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=24).contains(&completion), "{v}");
    assert_eq!(
        v["usage"]["total_tokens"].as_u64().unwrap(),
        n_prompt as u64 + completion
    );
    let finish = v["choices"][0]["finish_reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(finish == "stop" || finish == "length", "{v}");

    // Streamed: the same text, as OpenAI chunks, then [DONE].
    let mut body = chat_body(q, 24);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        r.headers
    );
    let events = r.sse();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut text = String::new();
    let mut finish_seen = None;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], chunks[0]["id"]);
        if let Some(choice) = c["choices"].get(0) {
            if let Some(t) = choice["delta"]["content"].as_str() {
                text.push_str(t);
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                finish_seen = Some(f.to_string());
            }
        }
    }
    assert_eq!(text, want);
    assert_eq!(finish_seen.as_deref(), Some(finish.as_str()));
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], n_prompt);
    assert_eq!(usage["completion_tokens"], completion);

    // A stop string cuts the text before it.
    if let Some(word) = want.split_whitespace().nth(2) {
        let mut body = chat_body(q, 24);
        body["stop"] = json!([word]);
        let v = post(server.addr, "/v1/chat/completions", &body).json();
        let got = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(got, &want[..want.find(word).unwrap()], "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
    // max_tokens: finish_reason "length".
    let v = post(server.addr, "/v1/chat/completions", &chat_body(q, 2)).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 2);
}

#[test]
fn completions_take_text_or_token_ids() {
    let Some(path) = gen_model() else { return };
    let server = start(ServeConfig {
        models: vec![path.clone()],
        ctx: Some(512),
        parallel: 1,
        ..Default::default()
    });
    let prompt = "The quick brown fox";
    let body = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "model": "anything"});
    let a = post(server.addr, "/v1/completions", &body);
    assert_eq!(a.status, 200, "{}", a.text());
    let a = a.json();
    assert_eq!(a["object"], "text_completion");
    assert!(a["choices"][0]["text"].is_string());

    let model = Model::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let ids = tok.encode(prompt, true, true);
    let b = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 8, "temperature": 0}),
    )
    .json();
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    assert_eq!(a["usage"], b["usage"]);

    // Streamed completions: text_completion chunks, then [DONE].
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": true}),
    );
    let events = r.sse();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let text: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .map(|c| c["choices"][0]["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(text, a["choices"][0]["text"].as_str().unwrap());
}

#[test]
fn embeddings_match_the_engine_and_are_batched() {
    let Some(path) = embed_model() else { return };
    let server = start(ServeConfig {
        models: vec![path.clone()],
        batch_window: Duration::from_millis(20),
        ..Default::default()
    });
    let texts: Vec<String> = (0..16)
        .map(|i| {
            format!(
                "Sentence number {i} about {}.",
                ["cats", "rivers", "stars", "bread"][i % 4]
            )
        })
        .collect();
    let mut e = Embedder::open(&path).unwrap();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let want = e.embed(&refs, &EmbedOptions::default(), &Rayon).unwrap();

    // One request with every text, as floats and as base64.
    let v = post(server.addr, "/v1/embeddings", &json!({"input": texts})).json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), texts.len());
    let n_tokens: usize = want.iter().map(|w| w.n_tokens).sum();
    assert_eq!(v["usage"]["prompt_tokens"], n_tokens);
    assert_eq!(v["usage"]["total_tokens"], n_tokens);
    for (i, w) in want.iter().enumerate() {
        let d = &v["data"][i];
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        let got = floats(&d["embedding"]);
        assert_eq!(got.len(), w.vector.len());
        for (a, b) in got.iter().zip(&w.vector) {
            assert!((a - b).abs() <= 1e-6, "text {i}: {a} vs {b}");
        }
    }
    let b = post(
        server.addr,
        "/v1/embeddings",
        &json!({"input": texts[0], "encoding_format": "base64"}),
    )
    .json();
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let alone = post(server.addr, "/v1/embeddings", &json!({"input": texts[0]})).json();
    assert_eq!(decoded, floats(&alone["data"][0]["embedding"]));

    // Matryoshka: the first 256 values, re-normalised.
    let m = post(
        server.addr,
        "/v1/embeddings",
        &json!({"input": texts[0], "dimensions": 256}),
    )
    .json();
    let got = floats(&m["data"][0]["embedding"]);
    assert_eq!(got.len(), 256);
    let norm: f64 = got.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    let full = &floats(&alone["data"][0]["embedding"])[..256];
    let cos = lamina_model::embed::cosine(&got, full);
    assert!(cos > 0.99999, "{cos}");

    // Concurrent single-text requests are batched and give the same vectors.
    let before = metric(
        &get(server.addr, "/metrics").text(),
        "lamina_embedding_batches_total",
    );
    let addr = server.addr;
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let texts = texts.clone();
            std::thread::spawn(move || {
                (0..2)
                    .map(|k| {
                        let i = (t * 2 + k) % texts.len();
                        let v = post(addr, "/v1/embeddings", &json!({"input": texts[i]})).json();
                        (i, floats(&v["data"][0]["embedding"]))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    // The kernels are batch-invariant: a text's vector does not depend on
    // what the server batched it with.
    for h in handles {
        for (i, got) in h.join().unwrap() {
            for (a, b) in got.iter().zip(&want[i].vector) {
                assert!((a - b).abs() <= 1e-6, "text {i}: {a} vs {b}");
            }
        }
    }
    let after = metric(
        &get(server.addr, "/metrics").text(),
        "lamina_embedding_batches_total",
    );
    assert!(
        after - before < 16.0,
        "16 concurrent requests ran as {} batches",
        after - before
    );
}

/// A server with both kinds of model (when present), two generation models
/// (so model names are checked), an API key and small limits.
#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_working() {
    let Some(gen_path) = gen_model() else { return };
    let embed = embed_model();
    let dir = tempfile::tempdir().unwrap();
    let twin = dir.path().join("twin-model.gguf");
    std::fs::copy(&gen_path, &twin).unwrap();
    let mut models = vec![gen_path.clone(), twin];
    models.extend(embed.clone());
    let key = "test-key-123";
    let server = start(ServeConfig {
        models,
        api_key: Some(key.into()),
        ctx: Some(256),
        parallel: 1,
        max_body: 64 << 10,
        max_inputs: 16,
        ..Default::default()
    });
    let addr = server.addr;
    let gen_name = lamina_server::model_name(&gen_path);
    let auth = format!("Bearer {key}");
    let send = |method: &str, path: &str, body: &[u8]| {
        request(
            addr,
            method,
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body,
        )
    };
    let chat = |body: Value| send("POST", "/v1/chat/completions", body.to_string().as_bytes());
    let with_model = |mut v: Value| {
        v["model"] = json!(gen_name);
        v
    };
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let mut n = 0;
    let mut check = |r: Resp, status: u16, what: &str| {
        let v = r.assert_error(status, what);
        n += 1;
        v
    };

    // The API key.
    let r = request(addr, "GET", "/v1/models", &[], b"");
    let v = check(r, 401, "no key");
    assert_eq!(v["error"]["type"], "authentication_error");
    check(
        request(
            addr,
            "GET",
            "/v1/models",
            &[("Authorization", "Bearer wrong")],
            b"",
        ),
        401,
        "wrong key",
    );
    check(
        request(
            addr,
            "GET",
            "/v1/models",
            &[("Authorization", &format!("Bearer {key}x"))],
            b"",
        ),
        401,
        "longer key",
    );
    check(
        request(
            addr,
            "GET",
            "/v1/models",
            &[("Authorization", &format!("Basic {key}"))],
            b"",
        ),
        401,
        "not a bearer",
    );
    check(
        request(addr, "POST", "/v1/chat/completions", &[], b"{}"),
        401,
        "no key on chat",
    );
    check(
        request(addr, "GET", "/metrics", &[], b""),
        401,
        "no key on metrics",
    );
    assert_eq!(get(addr, "/health").status, 200, "/health stays open");

    // Routes, bodies and JSON.
    check(send("GET", "/v1/nope", b""), 404, "unknown route");
    check(
        send("GET", "/v1/chat/completions", b""),
        405,
        "wrong method",
    );
    check(
        send("POST", "/v1/chat/completions", b"{\"messages\": ["),
        400,
        "malformed JSON",
    );
    check(
        send(
            "POST",
            "/v1/chat/completions",
            b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}",
        ),
        400,
        "invalid UTF-8",
    );
    check(
        send("POST", "/v1/chat/completions", b"[1, 2]"),
        400,
        "not an object",
    );
    check(send("POST", "/v1/chat/completions", b""), 400, "empty body");
    check(
        send("POST", "/v1/chat/completions", b"{} x"),
        400,
        "trailing bytes",
    );
    check(
        send("POST", "/v1/chat/completions", &vec![b' '; 100 << 10]),
        413,
        "body over the limit",
    );
    check(
        send(
            "POST",
            "/v1/chat/completions",
            b"{\"messages\": [], \"temperature\": NaN}",
        ),
        400,
        "NaN",
    );

    // Chat fields.
    check(chat(with_model(json!({}))), 400, "no messages");
    check(
        chat(with_model(json!({"messages": []}))),
        400,
        "empty messages",
    );
    let v = check(
        chat(with_model(json!({"messages": "hi"}))),
        400,
        "messages not an array",
    );
    assert_eq!(v["error"]["param"], "messages");
    let v = check(
        chat(with_model(
            json!({"messages": [{"role": 1, "content": "x"}]}),
        )),
        400,
        "role not a string",
    );
    assert_eq!(v["error"]["param"], "messages[0].role");
    check(
        chat(with_model(
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
        )),
        400,
        "unknown role",
    );
    check(
        chat(with_model(
            json!({"messages": [{"role": "user", "content": 7}]}),
        )),
        400,
        "content a number",
    );
    check(
        chat(with_model(
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        )),
        400,
        "image content",
    );
    for (field, value) in [
        ("temperature", json!(-1)),
        ("temperature", json!("hot")),
        ("top_p", json!(2)),
        ("top_k", json!(-1)),
        ("min_p", json!(-0.5)),
        ("frequency_penalty", json!(5)),
        ("presence_penalty", json!(-9)),
        ("max_tokens", json!(1_000_000_000)),
        ("max_tokens", json!(-5)),
        ("max_tokens", json!(1.5)),
        ("max_tokens", json!("many")),
        ("n", json!(0)),
        ("n", json!(9)),
        ("logprobs", json!(3)),
        ("top_logprobs", json!(2)),
        ("logit_bias", json!({"5": 1})),
        ("echo", json!(true)),
        ("stop", json!(42)),
        ("stream", json!("yes")),
        ("seed", json!("x")),
    ] {
        let mut body = with_model(json!({"messages": msgs}));
        body[field] = value.clone();
        let v = check(chat(body), 400, &format!("{field} = {value}"));
        assert_eq!(v["error"]["param"], field, "{v}");
    }
    let v = check(
        chat(json!({"messages": msgs, "model": "no-such-model"})),
        404,
        "unknown model",
    );
    assert_eq!(v["error"]["code"], "model_not_found");
    check(chat(json!({"messages": msgs})), 400, "no model among two");
    let long = "word ".repeat(400);
    let v = check(
        chat(with_model(
            json!({"messages": [{"role": "user", "content": long}]}),
        )),
        400,
        "prompt over the context",
    );
    assert_eq!(v["error"]["code"], "context_length_exceeded");

    // Completions.
    let comp = |body: Value| send("POST", "/v1/completions", body.to_string().as_bytes());
    check(comp(with_model(json!({}))), 400, "no prompt");
    check(comp(with_model(json!({"prompt": ""}))), 400, "empty prompt");
    check(
        comp(with_model(json!({"prompt": [99_999_999]}))),
        400,
        "token id out of range",
    );
    check(
        comp(with_model(json!({"prompt": ["a", "b"]}))),
        400,
        "two prompts",
    );
    check(
        comp(with_model(json!({"prompt": "a", "echo": true}))),
        400,
        "echo",
    );

    // Embeddings.
    if let Some(embed) = &embed {
        let emb = |body: Value| send("POST", "/v1/embeddings", body.to_string().as_bytes());
        let _ = embed;
        check(emb(json!({})), 400, "no input");
        check(emb(json!({"input": ""})), 400, "empty input");
        check(emb(json!({"input": []})), 400, "empty input array");
        check(
            emb(json!({"input": ["a", ""]})),
            400,
            "an empty input among others",
        );
        check(emb(json!({"input": 42})), 400, "input a number");
        check(emb(json!({"input": ["a", 3]})), 400, "mixed input");
        check(
            emb(json!({"input": [[1, 2], [-1]]})),
            400,
            "negative token id",
        );
        check(
            emb(json!({"input": "a", "encoding_format": "binary"})),
            400,
            "encoding",
        );
        check(
            emb(json!({"input": "a", "dimensions": 0})),
            400,
            "dimensions 0",
        );
        check(
            emb(json!({"input": "a", "dimensions": 100_000})),
            400,
            "dimensions too many",
        );
        check(emb(json!({"input": vec!["a"; 17]})), 400, "too many inputs");
        let v = check(
            emb(json!({"input": "word ".repeat(3000)})),
            400,
            "input over the context",
        );
        assert_eq!(v["error"]["code"], "context_length_exceeded");
    }
    assert!(n >= 30, "only {n} bad requests");

    // Garbage that is not HTTP at all gets a 400 from the HTTP layer.
    let r = raw(addr, b"HELLO THERE\r\n\r\n");
    assert_eq!(r.status, 400);

    // And then valid requests succeed.
    let r = chat(with_model(
        json!({"messages": msgs, "max_tokens": 4, "temperature": 0}),
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["choices"][0]["message"]["content"].is_string());
    if embed.is_some() {
        let r = send("POST", "/v1/embeddings", br#"{"input": "still working"}"#);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = send("GET", "/v1/models", b"");
    assert_eq!(r.status, 200);
    let ids: Vec<String> = r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        ids.contains(&gen_name) && ids.contains(&"twin-model".to_string()),
        "{ids:?}"
    );
    let metrics = send("GET", "/metrics", b"").text();
    assert!(
        metric(
            &metrics,
            "lamina_request_errors_total{route=\"/v1/chat/completions\",status=\"400\"}"
        ) >= 20.0
    );
}

/// Reads from a streaming response until `needle` appears (or the stream ends).
fn read_until(s: &mut TcpStream, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&got).contains(needle) {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn open_stream(addr: std::net::SocketAddr, body: &Value) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(&request_bytes(
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    ))
    .unwrap();
    s
}

fn long_stream_body() -> Value {
    json!({
        "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": 400, "ignore_eos": true, "stream": true, "seed": 1,
    })
}

#[test]
fn full_queue_is_503_and_disconnects_cancel() {
    let Some(path) = gen_model() else { return };
    let server = start(ServeConfig {
        models: vec![path],
        ctx: Some(512),
        parallel: 1,
        max_queue: 1,
        ..Default::default()
    });
    let addr = server.addr;
    // A (not streamed) generates; B (streamed) waits in the queue; C finds
    // the queue full.
    let mut a_body = long_stream_body();
    a_body["stream"] = json!(false);
    let a = open_stream(addr, &a_body);
    let t = Instant::now();
    while metric(&get(addr, "/metrics").text(), "lamina_generations_active") < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(30), "A never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let b = open_stream(addr, &long_stream_body());
    let t = Instant::now();
    while metric(
        &get(addr, "/metrics").text(),
        "lamina_queue_depth{kind=\"generation\"}",
    ) < 1.0
    {
        assert!(t.elapsed() < Duration::from_secs(30), "B never queued");
        std::thread::sleep(Duration::from_millis(10));
    }
    let c = post(addr, "/v1/chat/completions", &long_stream_body());
    c.assert_error(503, "queue full");
    assert_eq!(c.header("retry-after"), Some("1"));

    // /health answers at once while the model is busy.
    let t = Instant::now();
    assert_eq!(get(addr, "/health").status, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Dropping both connections cancels A mid-generation and B (queued or
    // just started), and frees the slot.
    drop(a);
    drop(b);
    let t = Instant::now();
    loop {
        let m = get(addr, "/metrics").text();
        if metric(&m, "lamina_generations_cancelled_total") >= 2.0
            && metric(&m, "lamina_generations_active") == 0.0
        {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "not cancelled:\n{m}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(addr, "/v1/chat/completions", &chat_body("Hi", 3));
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn concurrent_generations_advance_together() {
    let Some(path) = gen_model() else { return };
    let server = start(ServeConfig {
        models: vec![path],
        ctx: Some(512),
        parallel: 2,
        ..Default::default()
    });
    let addr = server.addr;
    let mut body = long_stream_body();
    body["max_tokens"] = json!(80);
    let a_body = body.clone();
    let a = std::thread::spawn(move || {
        let mut a = open_stream(addr, &a_body);
        let text = read_until(&mut a, "[DONE]");
        (Instant::now(), text)
    });
    // Wait for A to be generating, then start B.
    let t = Instant::now();
    while metric(
        &get(addr, "/metrics").text(),
        "lamina_completion_tokens_total",
    ) < 1.0
        && metric(&get(addr, "/metrics").text(), "lamina_generations_active") < 1.0
    {
        assert!(t.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut b = open_stream(addr, &body);
    read_until(&mut b, "{\"content\":\"");
    let b_first = Instant::now();
    let (a_end, a_text) = a.join().unwrap();
    assert!(a_text.contains("[DONE]"), "{a_text}");
    assert!(
        b_first < a_end,
        "B's first token came {:?} after A finished",
        b_first - a_end
    );
    assert!(read_until(&mut b, "[DONE]").contains("[DONE]"));
}

/// Eight clients at once get the texts each prompt gets alone (greedy and
/// seeded sampling): their tokens are decoded in shared forward passes
/// whose results do not depend on what else is in them.
#[test]
fn concurrent_completions_match_each_alone() {
    let Some(path) = gen_model() else { return };
    let server = start(ServeConfig {
        models: vec![path],
        ctx: Some(256),
        parallel: 8,
        ..Default::default()
    });
    let addr = server.addr;
    let bodies: Vec<Value> = (0..8)
        .map(|i| {
            let mut b = json!({
                "prompt": format!("Story {i}: once upon a time, a {} lived by the sea.",
                                  ["cat", "king", "robot", "whale"][i % 4]),
                "max_tokens": 24, "ignore_eos": true,
            });
            if i % 2 == 0 {
                b["temperature"] = json!(0);
            } else {
                b["temperature"] = json!(0.9);
                b["seed"] = json!(i);
            }
            b
        })
        .collect();
    let text = |r: Resp| -> String {
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let alone: Vec<String> = bodies
        .iter()
        .map(|b| text(post(addr, "/v1/completions", b)))
        .collect();
    let together: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|b| s.spawn(move || post(addr, "/v1/completions", b)))
            .collect();
        handles
            .into_iter()
            .map(|h| text(h.join().unwrap()))
            .collect()
    });
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, t, "request {i}: alone and among eight differ");
    }
}

#[test]
fn gemma_chat_template_errors_are_400() {
    let Some(path) = model(&["gemma-3-270m-Q8_0.gguf"]) else {
        return;
    };
    let server = start(ServeConfig {
        models: vec![path],
        ctx: Some(512),
        parallel: 1,
        ..Default::default()
    });
    // Gemma's template merges a system message into the first user turn and
    // refuses roles that do not alternate.
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
    );
    let v = r.assert_error(400, "roles that do not alternate");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("alternate"),
        "{v}"
    );
    assert_eq!(v["error"]["param"], "messages");
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Name a colour."}],
                "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["usage"]["completion_tokens"]
            .as_u64()
            .map(|n| n <= 4),
        Some(true)
    );
}
