//! What large hostile bodies cost: the peak resident memory (VmHWM) of this
//! test process, which runs the server in-process. One test in its own
//! binary, so no other test's allocations mix in.
//!
//! The test re-runs itself in a child process with glibc's mmap threshold
//! pinned. Left dynamic, glibc raises it past each large block freed, so
//! the next request's buffers come from whichever thread's arena serves
//! it and stay resident there: the peak then adds up what glibc keeps for
//! reuse, varying from run to run, rather than what one request holds.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use lamina_server::ServeConfig;

const MB: u64 = 1 << 20;
/// Set in the child process the test runs its measurement in.
const CHILD: &str = "LAMINA_MEMORY_TEST_CHILD";
const NAME: &str = "large_bodies_cost_little_memory";

/// The process's peak resident set, in bytes.
fn peak() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// `prefix` + `fill` repeated + `suffix`, `size` bytes in all.
fn body(prefix: &str, fill: &str, suffix: &str, size: usize) -> Vec<u8> {
    let mut b = prefix.as_bytes().to_vec();
    while b.len() + fill.len() + suffix.len() <= size {
        b.extend_from_slice(fill.as_bytes());
    }
    if b.last() == Some(&b',') {
        b.pop();
    }
    b.extend_from_slice(suffix.as_bytes());
    b
}

#[test]
fn large_bodies_cost_little_memory() {
    if std::env::var_os(CHILD).is_none() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            // glibc's default initial threshold, fixed (see the file's comment).
            .env("MALLOC_MMAP_THRESHOLD_", "131072")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        eprintln!("{stdout}{stderr}");
        assert!(out.status.success(), "the measuring child failed");
        assert!(stdout.contains("1 passed"), "the child ran no test");
        return;
    }
    measure();
}

fn measure() {
    let (Some(embed), Some(gen_path)) = (embed_model(), gen_model()) else {
        return;
    };
    let size = (8 << 20) - 64;
    let server = start(ServeConfig {
        models: vec![embed, gen_path],
        ctx: Some(512),
        parallel: 1,
        // Every id is parsed, then refused by the context check.
        max_request_tokens: usize::MAX,
        ..Default::default()
    });
    let addr = server.addr;
    let bodies: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "/v1/embeddings",
            "token ids",
            body("{\"input\": [", "1,", "]}", size),
        ),
        (
            "/v1/embeddings",
            "arrays of token ids",
            body("{\"input\": [", "[1,2,3,4,5,6,7],", "]}", size),
        ),
        (
            "/v1/embeddings",
            "a string of spaces",
            body("{\"input\": \"", " ", "\"}", size),
        ),
        (
            "/v1/completions",
            "prompt token ids",
            body("{\"prompt\": [", "1,", "]}", size),
        ),
        (
            "/v1/chat/completions",
            "a tree of tools",
            body(
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [",
                "[],",
                "]}",
                size,
            ),
        ),
        (
            "/v1/chat/completions",
            "a tree in json_schema",
            body(
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"json_schema\": {\"a\": [",
                "{},",
                "]}}",
                size,
            ),
        ),
        (
            "/v1/chat/completions",
            "a tree of tool calls",
            body(
                "{\"messages\": [{\"role\": \"assistant\", \"content\": \"hi\", \"tool_calls\": [",
                "[1],",
                "]}]}",
                size,
            ),
        ),
        (
            "/v1/chat/completions",
            "a tree of logit_bias",
            body(
                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logit_bias\": {\"a\": [",
                "{},",
                "]}}",
                size,
            ),
        ),
    ];
    // Warm up both models so their pages are resident before measuring.
    let r = post(
        addr,
        "/v1/embeddings",
        &serde_json::json!({"input": "warm up"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(
        addr,
        "/v1/chat/completions",
        &serde_json::json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    let base = peak();
    for (route, what, b) in &bodies {
        let t = Instant::now();
        let r = request(
            addr,
            "POST",
            route,
            &[("Content-Type", "application/json")],
            b,
        );
        let took = t.elapsed();
        assert!(
            r.status == 400 || r.status == 413,
            "{what}: {} {}",
            r.status,
            r.text()
        );
        let grew = peak().saturating_sub(base);
        eprintln!("{what}: {} in {took:?}, peak +{} MB", r.status, grew / MB);
        assert!(grew < 64 * MB, "{what}: the peak grew by {} MB", grew / MB);
        assert!(took < Duration::from_secs(20), "{what}: {took:?}");
    }
}
