//! The generation half of `cargo xtask bench serve`: `lamina serve` and
//! `llama-server` side by side, each in turn alone on the machine, under 1,
//! 4 and 8 concurrent streaming `/v1/completions` clients on each model.
//! Reports aggregate tokens/s, time to first token and inter-token latency
//! (P50/P99), errors and the server's memory, next to `lamina bench
//! generate`'s tg on the same model in the same run.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use crate::serve::{Conn, ServerProcess, percentile, rss};

/// Positions per sequence both servers get.
const CTX_PER_SLOT: usize = 1024;

/// One request's stream: time to first token, gaps between tokens, tokens.
#[derive(Default)]
struct Stream {
    ttft: f64,
    gaps: Vec<f64>,
    tokens: usize,
}

/// What one load phase measured.
pub(crate) struct Phase {
    pub clients: usize,
    pub tokens_per_s: f64,
    pub ttft: (f64, f64),
    pub itl: (f64, f64),
    pub requests: usize,
    pub errors: usize,
    pub first_error: Option<String>,
}

/// Sends one streamed completion and times its tokens.
fn one(c: &mut Conn, body: &[u8]) -> Result<Stream> {
    let t0 = Instant::now();
    c.send("/v1/completions", body)?;
    let (status, len) = c.head()?;
    let mut s = Stream::default();
    let mut last: Option<Instant> = None;
    let mut line = Vec::new();
    let mut usage = None;
    let mut body_text = Vec::new();
    c.body(len, &mut |b| {
        // The start of the body, for the error message.
        let room = 4096usize.saturating_sub(body_text.len());
        body_text.extend_from_slice(&b[..b.len().min(room)]);
        for &byte in b {
            if byte != b'\n' {
                line.push(byte);
                continue;
            }
            let data = line.strip_prefix(b"data: ").unwrap_or(&[]);
            if let Ok(v) = serde_json::from_slice::<Value>(data) {
                let text = v["choices"][0]["text"].as_str().unwrap_or("");
                if !text.is_empty() {
                    let now = Instant::now();
                    match last {
                        None => s.ttft = (now - t0).as_secs_f64(),
                        Some(l) => s.gaps.push((now - l).as_secs_f64()),
                    }
                    last = Some(now);
                    s.tokens += 1;
                }
                if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                    usage = Some(n as usize);
                }
            }
            line.clear();
        }
    })?;
    ensure!(
        status == 200,
        "status {status}: {}",
        String::from_utf8_lossy(&body_text)
    );
    ensure!(s.tokens > 0, "no tokens streamed");
    s.tokens = s.tokens.max(usage.unwrap_or(0));
    Ok(s)
}

/// `clients` threads streaming completions back to back for `secs` seconds.
fn phase(addr: SocketAddr, model: &str, clients: usize, secs: u64, max_tokens: usize) -> Phase {
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let model = model.to_string();
            std::thread::spawn(move || {
                let mut out: Vec<Stream> = Vec::new();
                let (mut errors, mut first_error) = (0, None);
                let mut k = c * 7919;
                while Instant::now() < deadline {
                    k += 1;
                    // Distinct prompts: no request reuses another's cache.
                    let body = json!({"model": model, "max_tokens": max_tokens,
                        "prompt": format!("Once upon a time, in a land far away numbered {k},"),
                        "temperature": 0, "stream": true, "ignore_eos": true,
                        "stream_options": {"include_usage": true}})
                    .to_string();
                    // A connection per request: servers differ in how they keep one alive.
                    let r = Conn::connect(addr).and_then(|mut cn| one(&mut cn, body.as_bytes()));
                    match r {
                        Ok(s) => out.push(s),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(format!("{e:#}"));
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
                (out, errors, first_error)
            })
        })
        .collect();
    let mut streams = Vec::new();
    let (mut errors, mut first_error) = (0, None);
    for h in handles {
        if let Ok((s, e, f)) = h.join() {
            streams.extend(s);
            errors += e;
            first_error = first_error.or(f);
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let tokens: usize = streams.iter().map(|s| s.tokens).sum();
    let mut ttft: Vec<f64> = streams.iter().map(|s| s.ttft * 1e3).collect();
    let mut itl: Vec<f64> = streams
        .iter()
        .flat_map(|s| s.gaps.iter().map(|g| g * 1e3))
        .collect();
    Phase {
        clients,
        tokens_per_s: tokens as f64 / wall,
        ttft: (percentile(&mut ttft, 0.5), percentile(&mut ttft, 0.99)),
        itl: (percentile(&mut itl, 0.5), percentile(&mut itl, 0.99)),
        requests: streams.len(),
        errors,
        first_error,
    }
}

/// A `llama-server` child process, killed on drop.
struct LlamaServer {
    child: Child,
    addr: SocketAddr,
}

impl LlamaServer {
    fn start(bin: &Path, model: &Path, threads: usize, slots: usize) -> Result<LlamaServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let t = threads.to_string();
        let child = Command::new(bin)
            .arg("-m")
            .arg(model)
            .args(["-t", &t, "-tb", &t, "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["-np", &slots.to_string(), "-c"])
            .arg((slots * CTX_PER_SLOT).to_string())
            .args(["--no-webui", "--log-disable"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut s = LlamaServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(180) {
            if let Some(status) = s.child.try_wait()? {
                bail!("llama-server exited while starting ({status})");
            }
            if health_ok(s.addr) {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let _ = s.child.kill();
        bail!("llama-server did not become healthy in 180 s")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn health_ok(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if n >= 12 && &buf[9..12] == b"200")
}

/// `lamina bench generate`'s tg on `model` (128 tokens, as llama-bench's tg128).
fn in_process_tg(lamina: &Path, model: &Path, threads: usize) -> Result<f64> {
    let out = Command::new(lamina)
        .args([
            "bench", "generate", "--json", "--pp", "16", "--tg", "128", "-t",
        ])
        .arg(threads.to_string())
        .arg("-m")
        .arg(model)
        .output()?;
    ensure!(
        out.status.success(),
        "lamina bench generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = out
        .stdout
        .split(|&b| b == b'\n')
        .find(|l| l.starts_with(b"{"))
        .context("no JSON from lamina bench generate")?;
    let v: Value = serde_json::from_slice(line)?;
    v["tg_tokens_per_s"].as_f64().context("tg_tokens_per_s")
}

/// How one model fared on one server.
struct Run {
    server: &'static str,
    phases: Vec<Phase>,
    rss: (String, String),
}

/// The phases one server goes through.
struct Load<'a> {
    name: &'a str,
    clients: &'a [usize],
    secs: u64,
    max_tokens: usize,
}

impl Load<'_> {
    /// Every phase against the server at `addr` (process `pid`).
    fn run(&self, server: &'static str, addr: SocketAddr, pid: u32) -> Run {
        let rss0 = rss(pid);
        let phases = self
            .clients
            .iter()
            .map(|&c| {
                eprintln!(
                    "bench serve: {}: {server}, {c} clients × {} s",
                    self.name, self.secs
                );
                phase(addr, self.name, c, self.secs, self.max_tokens)
            })
            .collect();
        Run {
            server,
            phases,
            rss: (rss0, rss(pid)),
        }
    }
}

/// The side-by-side generation benchmark; prints its table.
#[allow(clippy::too_many_arguments)]
pub(crate) fn compare(
    lamina: &Path,
    llama_server: Option<&Path>,
    models: &[PathBuf],
    clients: &[usize],
    secs: u64,
    max_tokens: usize,
    threads: usize,
) -> Result<()> {
    let slots = clients.iter().copied().max().unwrap_or(1).max(1);
    for model in models {
        let name = crate::serve::stem(model);
        eprintln!("bench serve: {name}: in-process tg (lamina bench generate)");
        let tg = in_process_tg(lamina, model, threads)?;
        let mut runs = Vec::new();
        {
            let server = ServerProcess::start(
                lamina,
                &[
                    "-m".into(),
                    model.display().to_string(),
                    "-t".into(),
                    threads.to_string(),
                    "--ctx".into(),
                    CTX_PER_SLOT.to_string(),
                    "--parallel".into(),
                    slots.to_string(),
                    "--max-queue".into(),
                    "256".into(),
                ],
            )?;
            let load = Load {
                name: &name,
                clients,
                secs,
                max_tokens,
            };
            runs.push(load.run("lamina serve", server.addr, server.pid()));
        }
        if let Some(bin) = llama_server {
            let server = LlamaServer::start(bin, model, threads, slots)?;
            let load = Load {
                name: &name,
                clients,
                secs,
                max_tokens,
            };
            runs.push(load.run("llama-server", server.addr, server.child.id()));
        }
        print_model(&name, tg, &runs, secs, max_tokens, threads, slots);
    }
    Ok(())
}

fn print_model(
    name: &str,
    tg: f64,
    runs: &[Run],
    secs: u64,
    max_tokens: usize,
    threads: usize,
    slots: usize,
) {
    println!(
        "\n### {name}: streamed /v1/completions, {max_tokens} tokens a request, {secs} s a phase, \
         {threads} threads, {slots} slots\n"
    );
    println!(
        "| server | clients | aggregate tokens/s | TTFT P50 / P99 | inter-token P50 / P99 | requests | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        for p in &r.phases {
            println!(
                "| {} | {} | {:.1} | {:.0} / {:.0} ms | {:.1} / {:.1} ms | {} | {} |",
                r.server,
                p.clients,
                p.tokens_per_s,
                p.ttft.0,
                p.ttft.1,
                p.itl.0,
                p.itl.1,
                p.requests,
                p.errors
            );
        }
    }
    println!("\n`lamina bench generate` tg128 in this run: {tg:.1} tokens/s.");
    let lam = runs.iter().find(|r| r.server == "lamina serve");
    let lcpp = runs.iter().find(|r| r.server == "llama-server");
    if let Some(l) = lam {
        let at = |c: usize, r: &Run| {
            r.phases
                .iter()
                .find(|p| p.clients == c)
                .map(|p| p.tokens_per_s)
        };
        if let Some(one) = at(1, l) {
            println!(
                "One client through lamina serve: {:.0} % of that tg.",
                100.0 * one / tg
            );
            if let Some(four) = at(4, l) {
                println!(
                    "lamina serve at 4 clients: {:.2}x its single-client figure.",
                    four / one
                );
            }
        }
        if let (Some(a), Some(b)) = (at(4, l), lcpp.and_then(|r| at(4, r))) {
            println!("At 4 clients: lamina serve {:.2}x llama-server.", a / b);
        }
        let itl = |c: usize| l.phases.iter().find(|p| p.clients == c).map(|p| p.itl.1);
        if let (Some(one), Some(eight)) = (itl(1), itl(8)) {
            println!(
                "lamina serve inter-token P99: {:.2}x the single-client figure at 8 clients.",
                eight / one
            );
        }
    }
    for r in runs {
        println!(
            "{} memory: {} at start, {} at the end.",
            r.server, r.rss.0, r.rss.1
        );
        for p in &r.phases {
            if let Some(e) = &p.first_error {
                println!("{} at {} clients, first error: {e}", r.server, p.clients);
            }
        }
    }
}
