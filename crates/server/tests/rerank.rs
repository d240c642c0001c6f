//! `/v1/rerank` (and its aliases, in both request shapes), the embeddings
//! route's task prompts and truncation, and `/tokenize` / `/detokenize`, over
//! real loopback HTTP. The reranker and the small embedder are conformance
//! checkpoints of `testdata/embedders/` rebuilt and converted in the test;
//! scores are checked against the checkpoint's PyTorch logits and the
//! in-process engine. Tests that need a project model skip (saying so) when
//! it is absent.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use lamina_kernels::pool::Rayon;
use lamina_model::embed::{EmbedOptions, Embedder, QUERY_PREFIX};
use lamina_model::tokenizer::Tokenizer;
use lamina_server::ServeConfig;
use serde_json::{Value, json};

const RERANKER: &str = "ms-marco-F32";
const EMBEDDER: &str = "minilm-F32";

/// The reranker and the embedder, converted into `dir`.
fn models(dir: &Path) -> (PathBuf, PathBuf) {
    (
        checkpoint_gguf("ms-marco", dir),
        checkpoint_gguf("minilm", dir),
    )
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The gold's queries, each with its documents and PyTorch logits, in order.
fn gold_queries() -> Vec<(String, Vec<String>, Vec<f64>, usize)> {
    let gold = embedders_gold("ms-marco");
    let mut out: Vec<(String, Vec<String>, Vec<f64>, usize)> = Vec::new();
    for it in gold["items"].as_array().unwrap() {
        let q = it["query"].as_str().unwrap();
        if out.last().is_none_or(|l| l.0 != q) {
            out.push((q.to_string(), Vec::new(), Vec::new(), 0));
        }
        let l = out.last_mut().unwrap();
        l.1.push(it["document"].as_str().unwrap().to_string());
        l.2.push(it["torch"].as_f64().unwrap());
        l.3 += it["hf_ids"].as_array().unwrap().len();
    }
    out
}

/// How far a logit may be from PyTorch's: the kernels' f32 rounding, small
/// beside the spread of the gold's logits.
fn tolerance() -> f64 {
    let gold = embedders_gold("ms-marco");
    1e-4 * gold["max_abs"]["torch_spread"].as_f64().unwrap().max(1.0)
}

fn results(v: &Value) -> &Vec<Value> {
    v["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {v}"))
}

#[test]
fn rerank_matches_pytorch_and_the_engine_in_both_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let (reranker, embedder) = models(dir.path());
    let server = start(ServeConfig {
        models: vec![reranker.clone(), embedder],
        batch_window: Duration::from_millis(20),
        ..Default::default()
    });
    let addr = server.addr;
    let mut engine = Embedder::open(&reranker).unwrap();
    assert!(engine.is_reranker());
    let tol = tolerance();
    for (query, docs, torch, n_tokens) in gold_queries() {
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let want = engine
            .rerank(&query, &refs, &EmbedOptions::default(), &Rayon)
            .unwrap();
        // Documents as strings and as {"text"} objects, the logits asked for.
        let mut sent: Vec<Value> = docs.iter().map(|d| json!(d)).collect();
        sent[1] = json!({"text": docs[1], "title": "ignored"});
        let body =
            json!({"model": RERANKER, "query": query, "documents": sent, "raw_scores": true});
        let v = post(addr, "/v1/rerank", &body).json();
        assert_eq!(v["model"], RERANKER);
        assert_eq!(v["object"], "list");
        assert_eq!(v["usage"]["prompt_tokens"], n_tokens, "the pairs' HF ids");
        assert_eq!(v["usage"]["total_tokens"], n_tokens);
        let rs = results(&v);
        assert_eq!(rs.len(), docs.len());
        let mut last = f64::INFINITY;
        for r in rs {
            let i = r["index"].as_u64().unwrap() as usize;
            let got = r["relevance_score"].as_f64().unwrap();
            assert!(got <= last, "results are not sorted: {v}");
            last = got;
            assert!(
                (got - torch[i]).abs() <= tol,
                "{query:?} / doc {i}: {got} vs PyTorch {}",
                torch[i]
            );
            assert!(
                (got - want[i] as f64).abs() <= 1e-6,
                "{got} vs engine {}",
                want[i]
            );
            assert!(r.get("document").is_none(), "{v}");
        }

        // The default score is the logit's sigmoid; top_n and documents.
        let body = json!({"query": query, "documents": docs, "top_n": 2, "return_documents": true});
        for route in ["/v1/rerank", "/v1/reranking", "/reranking"] {
            let v = post(addr, route, &body).json();
            let rs = results(&v);
            assert_eq!(rs.len(), 2, "{route}: {v}");
            let mut order: Vec<usize> = (0..docs.len()).collect();
            order.sort_by(|&a, &b| want[b].total_cmp(&want[a]));
            for (k, r) in rs.iter().enumerate() {
                let i = order[k];
                assert_eq!(r["index"], i, "{route}: {v}");
                let got = r["relevance_score"].as_f64().unwrap();
                assert!((got - sigmoid(want[i] as f64)).abs() <= 1e-6, "{got}");
                assert!((0.0..=1.0).contains(&got));
                assert_eq!(r["document"]["text"], docs[i].as_str());
            }
        }

        // text-embeddings-inference's shape at /rerank: a bare array.
        let tei = json!({"query": query, "texts": docs, "return_text": true});
        let v = post(addr, "/rerank", &tei).json();
        let rs = v.as_array().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(rs.len(), docs.len());
        for r in rs {
            let i = r["index"].as_u64().unwrap() as usize;
            let got = r["score"].as_f64().unwrap();
            assert!((got - sigmoid(want[i] as f64)).abs() <= 1e-6);
            assert_eq!(r["text"], docs[i].as_str());
        }
        let raw = json!({"query": query, "texts": docs, "raw_scores": true});
        let v = post(addr, "/rerank", &raw).json();
        for r in v.as_array().unwrap() {
            let i = r["index"].as_u64().unwrap() as usize;
            assert!((r["score"].as_f64().unwrap() - want[i] as f64).abs() <= 1e-6);
            assert!(r.get("text").is_none());
        }
    }

    // Concurrent requests are batched into shared passes and score the same.
    let queries = gold_queries();
    let before = metric(
        &get(addr, "/metrics").text(),
        "lamina_embedding_batches_total",
    );
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (q, docs, _, _) = queries[t % queries.len()].clone();
            std::thread::spawn(move || {
                let body = json!({"query": q, "documents": docs, "raw_scores": true});
                (t % 2, post(addr, "/v1/rerank", &body).json())
            })
        })
        .collect();
    for h in handles {
        let (k, v) = h.join().unwrap();
        let (q, docs, _, _) = &queries[k];
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let want = engine
            .rerank(q, &refs, &EmbedOptions::default(), &Rayon)
            .unwrap();
        for r in results(&v) {
            let i = r["index"].as_u64().unwrap() as usize;
            let got = r["relevance_score"].as_f64().unwrap();
            assert!(
                (got - want[i] as f64).abs() <= 1e-6,
                "batched: {got} vs {}",
                want[i]
            );
        }
    }
    let m = get(addr, "/metrics").text();
    assert!(
        metric(&m, "lamina_embedding_batches_total") - before < 8.0,
        "not batched"
    );
    assert!(metric(&m, "lamina_rerank_pairs_total") >= 8.0 * 4.0);
    assert!(
        m.contains("lamina_requests_total{route=\"/v1/rerank\"}"),
        "{m}"
    );
    let models = get(addr, "/v1/models").json();
    let kinds: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["meta"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["rerank", "embedding"]);
}

#[test]
fn rerank_refuses_what_it_cannot_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (reranker, embedder) = models(dir.path());
    let server = start(ServeConfig {
        models: vec![reranker.clone(), embedder],
        max_inputs: 4,
        max_document_bytes: 8192,
        max_request_tokens: 1500,
        ..Default::default()
    });
    let addr = server.addr;
    let ok = json!({"query": "where is the river", "documents": ["by the library", "in Paris"]});
    let bad = |body: Value, param: &str, what: &str| {
        let v = post(addr, "/v1/rerank", &body).assert_error(400, what);
        assert_eq!(v["error"]["param"], param, "{what}: {v}");
        v["error"]["message"].as_str().unwrap().to_string()
    };
    // The model of the other kind, either way.
    let m = bad(
        json!({"model": EMBEDDER, "query": "q", "documents": ["d"]}),
        "model",
        "an embedder asked to rerank",
    );
    assert!(
        m.contains("is an embedding model") && m.contains("/v1/embeddings"),
        "{m}"
    );
    let v = post(
        addr,
        "/v1/embeddings",
        &json!({"model": RERANKER, "input": "x"}),
    )
    .assert_error(400, "a reranker asked to embed");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("is a reranker") && m.contains("/v1/rerank"),
        "{m}"
    );

    bad(json!({"documents": ["d"]}), "query", "no query");
    bad(
        json!({"query": "", "documents": ["d"]}),
        "query",
        "an empty query",
    );
    bad(json!({"query": "q"}), "documents", "no documents");
    bad(
        json!({"query": "q", "documents": []}),
        "documents",
        "an empty array",
    );
    bad(
        json!({"query": "q", "documents": ["a"], "texts": ["a"]}),
        "texts",
        "both shapes",
    );
    let m = bad(
        json!({"query": "q", "documents": vec!["a"; 5]}),
        "documents",
        "5 documents",
    );
    assert!(m.contains("more than the 4 documents"), "{m}");
    let big = "w".repeat(8193);
    let m = bad(
        json!({"query": "q", "documents": ["a", big]}),
        "documents[1]",
        "a big document",
    );
    assert!(m.contains("8193 bytes"), "{m}");
    bad(
        json!({"query": big, "documents": ["a"]}),
        "query",
        "a big query",
    );
    bad(
        json!({"query": "q", "documents": [{"title": "x"}]}),
        "documents[0]",
        "no text",
    );
    bad(
        json!({"query": "q", "documents": [3]}),
        "documents",
        "a number",
    );
    for top_n in [json!(0), json!(-1), json!(1.5), json!("2"), json!(1e30)] {
        bad(
            json!({"query": "q", "documents": ["a"], "top_n": top_n}),
            "top_n",
            "top_n",
        );
    }
    bad(
        json!({"query": "q", "texts": ["a"], "truncation_direction": "Left"}),
        "truncation_direction",
        "left truncation",
    );
    // A top_n past the documents returns them all.
    let mut huge = ok.clone();
    huge["top_n"] = json!(i64::MAX);
    assert_eq!(results(&post(addr, "/v1/rerank", &huge).json()).len(), 2);

    // A document past the context: refused, or its end cut with truncate.
    let long: String = "the river runs under the old stone bridge ".repeat(70);
    let docs = vec![long.clone(), "a short one".to_string()];
    let body = json!({"query": "where is the river", "documents": docs, "raw_scores": true});
    let v = post(addr, "/v1/rerank", &body).assert_error(400, "a document past the context");
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["param"], "documents[0]");
    let mut cut = body.clone();
    cut["truncate"] = json!(true);
    let v = post(addr, "/v1/rerank", &cut).json();
    let mut engine = Embedder::open(&reranker).unwrap();
    let opts = EmbedOptions {
        truncate: true,
        ..EmbedOptions::default()
    };
    let want = engine
        .rerank("where is the river", &[&long, "a short one"], &opts, &Rayon)
        .unwrap();
    let n_ctx = engine.n_ctx();
    let pair = engine
        .tokenize_pair("where is the river", &long, &opts)
        .unwrap();
    assert_eq!(pair.ids.len(), n_ctx, "cut to the context");
    for r in results(&v) {
        let i = r["index"].as_u64().unwrap() as usize;
        assert!((r["relevance_score"].as_f64().unwrap() - want[i] as f64).abs() <= 1e-6);
    }
    // Three cut documents are past the 1500-token budget.
    let three = json!({"query": "q", "documents": [long, long, long], "truncate": true});
    let v = post(addr, "/v1/rerank", &three).assert_error(413, "over the token budget");
    assert_eq!(v["error"]["code"], "too_many_tokens");

    // Malformed bodies.
    let raw = |body: &[u8]| {
        request(
            addr,
            "POST",
            "/v1/rerank",
            &[("Content-Type", "application/json")],
            body,
        )
    };
    raw(b"{\"query\": \"q\", \"documents\": [\"\xff\xfe\"]}").assert_error(400, "invalid UTF-8");
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let deep = format!("{{\"query\": \"q\", \"documents\": {}}}", nest(100_000));
    raw(deep.as_bytes()).assert_error(400, "deep documents");
    let deep = format!("{{\"query\": {}, \"documents\": [\"a\"]}}", nest(100_000));
    raw(deep.as_bytes()).assert_error(400, "a deep query");
    // Deep JSON in an ignored key is skipped without recursion.
    let deep = format!(
        "{{\"query\": \"q\", \"documents\": [{{\"text\": \"a\", \"x\": {}}}]}}",
        nest(100_000)
    );
    let v = raw(deep.as_bytes());
    assert_eq!(v.status, 200, "{}", v.text());
    // A million empty documents: refused at the fifth, without building them.
    let many = format!(
        "{{\"query\": \"q\", \"documents\": [{}\"\"]}}",
        "\"\",".repeat(1_000_000)
    );
    raw(many.as_bytes()).assert_error(400, "a huge documents array");

    // The server still answers.
    assert_eq!(post(addr, "/v1/rerank", &ok).status, 200);
}

#[test]
fn embeddings_take_truncate_per_request_and_as_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let (_, embedder) = models(dir.path());
    let mut engine = Embedder::open(&embedder).unwrap();
    let long = "a lighthouse keeper walked along the river ".repeat(100);
    let opts = EmbedOptions {
        truncate: true,
        ..EmbedOptions::default()
    };
    let want = engine.embed(&[&long], &opts, &Rayon).unwrap().remove(0);
    assert_eq!(want.n_tokens, engine.n_ctx());
    for default in [false, true] {
        let server = start(ServeConfig {
            models: vec![embedder.clone()],
            truncate: default,
            ..Default::default()
        });
        let addr = server.addr;
        let refused = post(
            addr,
            "/v1/embeddings",
            &json!({"input": long, "truncate": false}),
        )
        .assert_error(400, "a text past the context");
        assert_eq!(refused["error"]["code"], "context_length_exceeded");
        let body = if default {
            json!({"input": [long, "short"]})
        } else {
            json!({"input": [long, "short"], "truncate": true})
        };
        let v = post(addr, "/v1/embeddings", &body).json();
        let got: Vec<f32> = v["data"][0]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        for (a, b) in got.iter().zip(&want.vector) {
            assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
        }
        assert_eq!(
            v["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
            want.n_tokens
                + engine
                    .tokenize("short", &EmbedOptions::default())
                    .unwrap()
                    .len()
        );
        // This model has no task prompts.
        let v = post(
            addr,
            "/v1/embeddings",
            &json!({"input": "x", "task": "query"}),
        )
        .assert_error(400, "a task on a model without prompts");
        assert_eq!(v["error"]["code"], "unknown_task");
    }
}

#[test]
fn embeddings_take_the_models_task_prompts() {
    let Some(gemma) = embed_model() else { return };
    let text = "Which planet is known as the red planet?";
    let with_prefix = |server: &lamina_server::Running, body: Value| {
        let v = post(server.addr, "/v1/embeddings", &body).json();
        v["data"][0]["embedding"].clone()
    };
    let server = start(ServeConfig {
        models: vec![gemma.clone()],
        ..Default::default()
    });
    let prefixed = with_prefix(&server, json!({"input": format!("{QUERY_PREFIX}{text}")}));
    let plain = with_prefix(&server, json!({"input": text}));
    assert_ne!(prefixed, plain);
    assert_eq!(
        with_prefix(&server, json!({"input": text, "task": "query"})),
        prefixed
    );
    assert_eq!(
        with_prefix(&server, json!({"input": text, "prompt_name": "query"})),
        prefixed
    );
    let v = post(
        server.addr,
        "/v1/embeddings",
        &json!({"input": text, "task": "nope"}),
    )
    .assert_error(400, "an unknown task");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("query") && m.contains("document"), "{m}");
    assert_eq!(v["error"]["param"], "task");
    post(
        server.addr,
        "/v1/embeddings",
        &json!({"input": text, "task": "query", "prompt_name": "document"}),
    )
    .assert_error(400, "task and prompt_name differ");
    drop(server);

    // --default-task applies to requests that name none.
    let server = start(ServeConfig {
        models: vec![gemma.clone()],
        default_task: Some("query".into()),
        ..Default::default()
    });
    assert_eq!(with_prefix(&server, json!({"input": text})), prefixed);
    drop(server);
    let e = lamina_server::spawn(
        ServeConfig {
            models: vec![gemma],
            default_task: Some("nope".into()),
            ..Default::default()
        },
        "127.0.0.1:0".parse().unwrap(),
    )
    .err()
    .expect("an unknown --default-task is refused");
    assert!(e.to_string().contains("--default-task \"nope\""), "{e}");
}

#[test]
fn tokenize_and_detokenize_as_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let (reranker, embedder) = models(dir.path());
    let server = start(ServeConfig {
        models: vec![reranker.clone(), embedder],
        max_request_tokens: 64,
        ..Default::default()
    });
    let addr = server.addr;
    let tok = Tokenizer::from_gguf(&lamina_gguf::Gguf::open(&reranker).unwrap()).unwrap();
    // Two models: `model` is required.
    post(addr, "/tokenize", &json!({"content": "hello"})).assert_error(400, "no model");
    // bert-base-uncased's ids.
    let v = post(
        addr,
        "/tokenize",
        &json!({"model": RERANKER, "content": "Hello world"}),
    )
    .json();
    assert_eq!(v, json!({"tokens": [7592, 2088]}));
    let v = post(
        addr,
        "/tokenize",
        &json!({"model": RERANKER, "content": "Hello world", "add_special": true}),
    )
    .json();
    assert_eq!(v, json!({"tokens": [101, 7592, 2088, 102]}));
    let text = "Café crème, naïve résumé!";
    let v = post(
        addr,
        "/tokenize",
        &json!({"model": RERANKER, "content": text, "with_pieces": true}),
    )
    .json();
    let want = tok.encode(text, false, true);
    let got = v["tokens"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, &id) in got.iter().zip(&want) {
        assert_eq!(g["id"], id);
        let piece = String::from_utf8(tok.token_to_piece(id, true)).unwrap();
        assert_eq!(g["piece"], piece.as_str());
    }
    let ids: Vec<u32> = want.clone();
    let v = post(
        addr,
        "/detokenize",
        &json!({"model": RERANKER, "tokens": ids}),
    )
    .json();
    let joined: Vec<u8> = want
        .iter()
        .flat_map(|&id| tok.token_to_piece(id, true))
        .collect();
    assert_eq!(v["content"], String::from_utf8(joined).unwrap().as_str());
    let v = post(
        addr,
        "/detokenize",
        &json!({"model": RERANKER, "tokens": []}),
    )
    .json();
    assert_eq!(v, json!({"content": ""}));
    for bad in [
        json!([30522]),
        json!([-1]),
        json!("text"),
        json!([[1]]),
        json!([1.5]),
    ] {
        post(
            addr,
            "/detokenize",
            &json!({"model": RERANKER, "tokens": bad}),
        )
        .assert_error(400, "bad ids");
    }
    post(
        addr,
        "/detokenize",
        &json!({"model": RERANKER, "tokens": vec![1; 65]}),
    )
    .assert_error(413, "too many ids");
    post(
        addr,
        "/tokenize",
        &json!({"model": RERANKER, "content": "word ".repeat(65)}),
    )
    .assert_error(413, "too many tokens");

    // The new routes need the API key as the /v1 routes do.
    drop(server);
    let server = start(ServeConfig {
        models: vec![reranker],
        api_key: Some("k".into()),
        ..Default::default()
    });
    let body = json!({"query": "q", "documents": ["d"], "content": "d", "tokens": [1]});
    for path in ["/v1/rerank", "/rerank", "/tokenize", "/detokenize"] {
        post(server.addr, path, &body).assert_error(401, path);
        let keyed = request(
            server.addr,
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("Authorization", "Bearer k"),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(keyed.status, 200, "{path}: {}", keyed.text());
    }

    // A byte-level BPE model answers pieces that are not UTF-8 as bytes.
    let Some(gen_path) = gen_model() else { return };
    drop(server);
    let server = start(ServeConfig {
        models: vec![gen_path],
        ..Default::default()
    });
    let v = post(
        server.addr,
        "/tokenize",
        &json!({"content": "🦙", "with_pieces": true}),
    )
    .json();
    let mut bytes = Vec::new();
    let mut as_bytes = 0;
    for t in v["tokens"].as_array().unwrap() {
        match &t["piece"] {
            Value::String(s) => bytes.extend_from_slice(s.as_bytes()),
            Value::Array(b) => {
                as_bytes += 1;
                bytes.extend(b.iter().map(|x| x.as_u64().unwrap() as u8));
            }
            other => panic!("{other}"),
        }
    }
    assert_eq!(bytes, "🦙".as_bytes());
    assert!(as_bytes > 0, "the emoji's pieces are byte tokens: {v}");
    let ids: Vec<Value> = v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].clone())
        .collect();
    let back = post(server.addr, "/detokenize", &json!({"tokens": ids})).json();
    assert_eq!(back["content"], "🦙");
}
