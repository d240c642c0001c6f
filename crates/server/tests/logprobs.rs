//! Log-probabilities and `n` choices on a real model: the values against a
//! log-softmax of the engine's own logits, the streamed shapes against the
//! whole ones, and the prompt's keys and values shared between choices.

mod common;

use common::*;
use lamina_kernels::pool::Rayon;
use lamina_model::generate::Session;
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model};
use lamina_server::ServeConfig;
use serde_json::{Value, json};

const QUESTION: &str = "Name three colours of the rainbow, then say why the sky is blue.";

/// A server whose prompts go through `batch` tokens per forward pass.
fn server(path: &std::path::Path, batch: usize) -> lamina_server::Running {
    start(ServeConfig {
        models: vec![path.to_path_buf()],
        ctx: Some(512),
        parallel: 2,
        prompt_batch: batch,
        max_n: 4,
        ..Default::default()
    })
}

/// The log-softmax of `logits`, in f64, computed plainly.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits
        .iter()
        .map(|&x| f64::from(x))
        .fold(f64::MIN, f64::max);
    let lse = max
        + logits
            .iter()
            .map(|&x| (f64::from(x) - max).exp())
            .sum::<f64>()
            .ln();
    logits.iter().map(|&x| f64::from(x) - lse).collect()
}

/// Greedy decoding in process: per step, the chosen id and the log-softmax.
fn reference(path: &std::path::Path, content: &str, steps: usize) -> Vec<(u32, Vec<f64>)> {
    let model = Model::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let ids = chat_ids(&model, &tok, content);
    let mut session = Session::with_batch(&model, &tok, 512, KvType::F16, 8).unwrap();
    session.prefill(&ids, &Rayon).unwrap();
    let mut out = Vec::new();
    for _ in 0..steps {
        let lp = log_softmax(session.logits().unwrap());
        let id = (0..lp.len())
            .max_by(|&a, &b| lp[a].total_cmp(&lp[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        out.push((id, lp));
        session.eval(&[id], &Rayon).unwrap();
    }
    out
}

fn chat_body(max_tokens: i64, top: i64) -> Value {
    json!({
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": true,
        "top_logprobs": top,
    })
}

/// The JSON chunks of a streamed answer (`[DONE]` checked and dropped).
fn chunks(r: &Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.sse();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

/// Per choice index: the streamed text and the chat logprob entries.
fn gather_chat(chunks: &[Value], n: usize) -> Vec<(String, Vec<Value>, String)> {
    let mut out = vec![(String::new(), Vec::new(), String::new()); n];
    for c in chunks {
        for choice in c["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            if let Some(t) = choice["delta"]["content"].as_str() {
                out[i].0.push_str(t);
            }
            if let Some(e) = choice["logprobs"]["content"].as_array() {
                out[i].1.extend(e.iter().cloned());
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                out[i].2 = f.to_string();
            }
        }
    }
    out
}

#[test]
fn chat_logprobs_match_the_model_whole_and_streamed() {
    let Some(path) = gen_model() else { return };
    // Prompts go through 8 tokens per forward, as the in-process session does.
    let server = server(&path, 8);
    let steps = 12;
    let want = reference(&path, QUESTION, steps);

    let r = post(
        server.addr,
        "/v1/chat/completions",
        &chat_body(steps as i64, 5),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let choice = &v["choices"][0];
    let content = choice["logprobs"]["content"].as_array().unwrap();
    // Every sampled token has an entry.
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    let mut tokens = String::new();
    for (j, e) in content.iter().enumerate() {
        let (id, lp) = &want[j];
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{e}");
        let vals: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(vals.windows(2).all(|w| w[0] >= w[1]), "sorted: {vals:?}");
        // Greedy: the sampled token is the most likely one.
        assert_eq!(e["logprob"], top[0]["logprob"], "{e}");
        assert_eq!(e["token"], top[0]["token"], "{e}");
        let got = e["logprob"].as_f64().unwrap();
        assert!(
            (got - lp[*id as usize]).abs() < 1e-5,
            "step {j}: {got} vs {}",
            lp[*id as usize]
        );
        // The alternatives are the model's five most likely, in order.
        let mut sorted = lp.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        for (g, w) in vals.iter().zip(&sorted) {
            assert!(
                (g - w).abs() < 1e-5,
                "step {j}: {vals:?} vs {:?}",
                &sorted[..5]
            );
        }
        let bytes: Vec<u8> = e["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            e["token"].as_str().unwrap()
        );
        tokens.push_str(e["token"].as_str().unwrap());
    }
    let text = choice["message"]["content"].as_str().unwrap();
    assert!(tokens.starts_with(text), "{tokens:?} vs {text:?}");

    // Streamed: the same entries, spread over the chunks.
    let mut body = chat_body(steps as i64, 5);
    body["stream"] = json!(true);
    let got = gather_chat(
        &chunks(&post(server.addr, "/v1/chat/completions", &body)),
        1,
    );
    assert_eq!(got[0].0, text);
    assert_eq!(&got[0].1, content);

    // top_logprobs 0: the sampled token only; logprobs off: null.
    let v = post(server.addr, "/v1/chat/completions", &chat_body(3, 0)).json();
    let e = &v["choices"][0]["logprobs"]["content"];
    assert_eq!(e.as_array().unwrap().len(), 3, "{v}");
    assert_eq!(e[0]["top_logprobs"], json!([]));
    let mut body = chat_body(3, 0);
    body.as_object_mut().unwrap().remove("top_logprobs");
    body["logprobs"] = json!(false);
    let v = post(server.addr, "/v1/chat/completions", &body).json();
    assert_eq!(v["choices"][0]["logprobs"], Value::Null, "{v}");

    // A stop string: its tokens keep their entries, streamed and whole alike.
    let word = text.split_whitespace().nth(2).expect("three words");
    let mut body = chat_body(steps as i64, 2);
    body["stop"] = json!([word]);
    let v = post(server.addr, "/v1/chat/completions", &body).json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    let cut = v["choices"][0]["message"]["content"].as_str().unwrap();
    let joined: String = content
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert!(
        joined.starts_with(cut) && joined.len() > cut.len(),
        "{joined:?} vs {cut:?}"
    );
    assert!(joined[cut.len()..].contains(word.trim()), "{joined:?}");
    body["stream"] = json!(true);
    let got = gather_chat(
        &chunks(&post(server.addr, "/v1/chat/completions", &body)),
        1,
    );
    assert_eq!((got[0].0.as_str(), &got[0].1), (cut, content));
}

#[test]
fn completions_logprobs_take_the_legacy_shape() {
    let Some(path) = gen_model() else { return };
    let server = server(&path, 64);
    let body = json!({
        "prompt": "The three primary colours are",
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": 3,
    });
    let v = post(server.addr, "/v1/completions", &body).json();
    let lp = &v["choices"][0]["logprobs"];
    let n = v["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(lp[key].as_array().map(Vec::len), Some(n), "{key}: {v}");
    }
    let mut offset = 0;
    for j in 0..n {
        let token = lp["tokens"][j].as_str().unwrap();
        let sampled = lp["token_logprobs"][j].as_f64().unwrap();
        let top = lp["top_logprobs"][j].as_object().unwrap();
        // Three alternatives, and the sampled token among them (greedy).
        assert_eq!(top.len(), 3, "{v}");
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert_eq!(sampled, best, "{v}");
        assert_eq!(top[token].as_f64(), Some(sampled));
        assert_eq!(lp["text_offset"][j], offset);
        offset += token.chars().count();
    }
    let text = v["choices"][0]["text"].as_str().unwrap();
    let joined: String = (0..n).map(|j| lp["tokens"][j].as_str().unwrap()).collect();
    assert!(joined.starts_with(text), "{joined:?} vs {text:?}");

    // Streamed: the same arrays, split over the chunks, offsets running on.
    let mut body = body;
    body["stream"] = json!(true);
    let mut got =
        json!({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []});
    let mut streamed = String::new();
    for c in chunks(&post(server.addr, "/v1/completions", &body)) {
        let choice = &c["choices"][0];
        streamed.push_str(choice["text"].as_str().unwrap());
        if choice["logprobs"].is_object() {
            for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
                let more = choice["logprobs"][key].as_array().unwrap().clone();
                got[key].as_array_mut().unwrap().extend(more);
            }
        }
    }
    assert_eq!(streamed, text);
    assert_eq!(&got, lp);
}

#[test]
fn n_choices_share_the_prompt() {
    let Some(path) = gen_model() else { return };
    // A prompt that goes in whole in one pass is, when the second choice
    // is admitted, either all in the first's slot or waited for.
    let server = server(&path, 512);
    let body = json!({
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 6,
        "temperature": 0.9,
        "seed": 11,
        "n": 3,
        "logprobs": true,
    });
    let r = post(server.addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{v}");
    let mut completion = 0;
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        completion += c["logprobs"]["content"].as_array().unwrap().len() as u64;
    }
    // Prompt tokens once, completion tokens summed.
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 20, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], completion);
    // The second and third choices copied the first's prompt (all but the
    // last token, which goes through the model for its logits).
    let m = get(server.addr, "/metrics").text();
    assert_eq!(
        metric(&m, "lamina_prompt_tokens_reused_total"),
        (2 * (prompt - 1)) as f64
    );

    // Choice i is the sample of seed + i.
    let mut one = body.clone();
    one["n"] = json!(1);
    one["seed"] = json!(12);
    let alone = post(server.addr, "/v1/chat/completions", &one).json();
    assert_eq!(alone["choices"][0]["message"], choices[1]["message"]);

    // Streamed, greedy: three identical choices, each with its chunks.
    let mut body = body;
    body["stream"] = json!(true);
    body["temperature"] = json!(0);
    body["stream_options"] = json!({"include_usage": true});
    let cs = chunks(&post(server.addr, "/v1/chat/completions", &body));
    let got = gather_chat(&cs, 3);
    assert!(!got[0].0.is_empty());
    for g in &got {
        assert_eq!((&g.0, &g.1), (&got[0].0, &got[0].1));
        assert!(g.2 == "length" || g.2 == "stop", "{g:?}");
    }
    let usage = &cs.last().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], prompt);
    assert_eq!(usage["completion_tokens"], 3 * got[0].1.len() as u64);

    // Completions too.
    let v = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 4, "n": 2, "temperature": 0}),
    )
    .json();
    let texts: Vec<&Value> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["text"])
        .collect();
    assert_eq!(texts.len(), 2, "{v}");
    assert_eq!(texts[0], texts[1]);
    assert_eq!(v["choices"][1]["index"], 1);
}

#[test]
fn bad_logprobs_and_n_name_the_field() {
    let Some(path) = gen_model() else { return };
    let server = server(&path, 64);
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (extra, field) in [
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (json!({"top_logprobs": 3}), "top_logprobs"),
        (
            json!({"logprobs": false, "top_logprobs": 3}),
            "top_logprobs",
        ),
        (json!({"logprobs": 2}), "logprobs"),
        (json!({"n": 0}), "n"),
        (json!({"n": 5}), "n"),
        (json!({"n": -1}), "n"),
    ] {
        let mut body = json!({"messages": msgs, "max_tokens": 1});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post(server.addr, "/v1/chat/completions", &body);
        let v = r.assert_error(400, &extra.to_string());
        assert_eq!(v["error"]["param"], field, "{v}");
    }
    for (extra, field) in [
        (json!({"logprobs": 6}), "logprobs"),
        (json!({"logprobs": true}), "logprobs"),
        (json!({"logprobs": 1, "top_logprobs": 1}), "top_logprobs"),
        (json!({"n": 5}), "n"),
    ] {
        let mut body = json!({"prompt": "hi", "max_tokens": 1});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post(server.addr, "/v1/completions", &body);
        let v = r.assert_error(400, &extra.to_string());
        assert_eq!(v["error"]["param"], field, "{v}");
    }
}
