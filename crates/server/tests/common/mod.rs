//! Shared by the server tests: finding the models, starting a server on an
//! ephemeral loopback port, and a small HTTP/1.1 client over `TcpStream`
//! (raw, so tests can send malformed requests and drop connections).
#![allow(dead_code, unused_imports)] // each test file uses its own subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use lamina_server::{Running, ServeConfig};
use serde_json::Value;

/// The first of `names` present in the models directory, or `None` after
/// saying the test skipped; under `cargo xtask test`
/// (`LAMINA_REQUIRE_MODELS`) a missing model fails the test instead.
pub use lamina_testkit::first_present as model;

pub fn embed_model() -> Option<PathBuf> {
    model(&["embeddinggemma-300m-Q8_0.gguf"])
}

pub fn gen_model() -> Option<PathBuf> {
    model(&[
        "SmolLM2-135M-Instruct-Q8_0.gguf",
        "SmolLM2-135M-Instruct-Q4_1.gguf",
    ])
}

pub fn start(cfg: ServeConfig) -> Running {
    lamina_server::spawn(cfg, "127.0.0.1:0".parse().unwrap()).expect("the server starts")
}

/// A server of the generative model at `path`: 1024 positions a slot,
/// `parallel` slots, at most 4 choices a request.
pub fn generation_server(path: &std::path::Path, parallel: usize) -> Running {
    start(ServeConfig {
        models: vec![path.to_path_buf()],
        ctx: Some(1024),
        parallel,
        max_n: 4,
        ..Default::default()
    })
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of a server-sent-events body.
    pub fn sse(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .flat_map(|ev| ev.lines())
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .map(str::to_string)
            .collect()
    }

    /// Asserts an OpenAI error body with this status.
    pub fn assert_error(&self, status: u16, what: &str) -> Value {
        assert_eq!(self.status, status, "{what}: {}", self.text());
        let v = self.json();
        let e = &v["error"];
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {v}"
        );
        assert!(e["type"].is_string(), "{what}: {v}");
        assert!(
            e.get("param").is_some() && e.get("code").is_some(),
            "{what}: {v}"
        );
        v
    }
}

/// Decodes a `Transfer-Encoding: chunked` body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_line = std::str::from_utf8(&b[..eol]).unwrap_or("0");
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        b = &b[eol + 2..];
        if size == 0 || b.len() < size {
            out.extend_from_slice(&b[..size.min(b.len())]);
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[(size + 2).min(b.len())..];
    }
}

/// Parses a whole response read until the server closed the connection.
pub fn parse_response(raw: &[u8]) -> Resp {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let body = &raw[head_end + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Resp {
        status,
        headers,
        body,
    }
}

/// Sends raw bytes and reads the whole answer (the request should ask for
/// `Connection: close`).
pub fn raw(addr: SocketAddr, bytes: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    parse_response(&out)
}

/// The bytes of a request with `Connection: close`.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    raw(addr, &request_bytes(method, path, headers, body))
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, &[], b"")
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// A metric's value from `/metrics` text (the first line starting with `name`).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing in:\n{text}"))
}

/// The gold of a conformance checkpoint in `testdata/embedders/NAME/`.
pub fn embedders_gold(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/embedders")
        .join(name)
        .join("gold.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A conformance checkpoint of `testdata/embedders/` (`ms-marco`: a BERT
/// cross-encoder, `minilm`: a BERT embedder) rebuilt from its manifest and
/// converted to an F32 GGUF by `lamina_model::convert` in `dir`, with BERT's
/// pooler kept so a cross-encoder scores as PyTorch does.
pub fn checkpoint_gguf(name: &str, dir: &std::path::Path) -> PathBuf {
    use lamina_model::convert::{ConvertOptions, OutType, convert};
    let folder = lamina_testkit::checkpoint::write_embedder(name, dir)
        .unwrap_or_else(|e| panic!("rebuilding {name}: {e}"));
    let output = dir.join(format!("{name}-F32.gguf"));
    let opts = ConvertOptions {
        input: folder,
        output: output.clone(),
        out_type: OutType::F32,
        dense_modules: false,
        bert_pooler: true,
        model_id: None,
    };
    convert(&opts, &mut |_| {}).unwrap_or_else(|e| panic!("converting {name}: {e}"));
    output
}

/// The ids the server's chat route gives one user message: the model's own
/// chat template, as the in-process references render it.
pub fn chat_ids(
    model: &lamina_model::Model,
    tok: &lamina_model::tokenizer::Tokenizer,
    content: &str,
) -> Vec<u32> {
    use lamina_model::chat::{ChatTemplate, Message};
    let template = ChatTemplate::for_model(&model.file, model.hp.family, tok).unwrap();
    let prompt = template
        .render(&[Message::new("user", content)], true)
        .unwrap();
    tok.encode(&prompt, true, true)
}
