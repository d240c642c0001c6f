//! `lamina serve` from the outside: the official `openai` Python client test
//! that `cargo xtask test` runs, and the load benchmark `cargo xtask bench
//! serve`. Both start the release binary on an ephemeral loopback port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;

use crate::{lamina_bin, models, target_dir};

/// The models the client test and the embedding benchmark serve (first present wins).
const EMBED_MODELS: &[&str] = &["embeddinggemma-300m-Q8_0.gguf"];
const CHAT_MODELS: &[&str] = &[
    "SmolLM2-135M-Instruct-Q8_0.gguf",
    "SmolLM2-135M-Instruct-Q4_1.gguf",
];

fn find_model(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

pub(crate) fn stem(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".gguf").to_string())
        .unwrap_or_default()
}

/// A `lamina serve` child process, killed on drop.
pub(crate) struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
}

impl ServerProcess {
    /// Starts `lamina serve ARGS --port 0` and waits for its address line.
    pub(crate) fn start(lamina: &Path, args: &[String]) -> Result<ServerProcess> {
        let mut child = Command::new(lamina)
            .arg("serve")
            .args(args)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} serve", lamina.display()))?;
        let stderr = child.stderr.take().context("the server's stderr")?;
        let (tx, rx) = mpsc::channel();
        // Forward the address line, then keep draining (and echoing) stderr.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("lamina serve: ")
                    && let Some(at) = rest.find("http://")
                {
                    let addr = rest[at + 7..].split('/').next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                } else {
                    eprintln!("  [server] {line}");
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait()?;
                bail!("lamina serve did not start ({status})");
            }
        };
        let addr = addr
            .parse()
            .with_context(|| format!("the server's address {addr:?}"))?;
        Ok(ServerProcess { child, addr })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// The openai Python client test.

/// Runs crates/server/tests/openai_client.py with the `openai` package
/// (installed by pip into a venv under the target directory) against a
/// `lamina serve` of the embedding and chat models. Skips, saying why, when
/// Python, venv or pip is unavailable, or a model is missing unless
/// `require_models`; fails when the test fails.
pub(crate) fn openai_client_test(require_models: bool) -> Result<()> {
    let skip = |why: String| {
        eprintln!("SKIPPED: the openai Python client test: {why}");
        Ok(())
    };
    let dir = models::default_dir()?;
    let (Some(embed), Some(chat)) = (
        find_model(&dir, EMBED_MODELS),
        find_model(&dir, CHAT_MODELS),
    ) else {
        let why = format!(
            "it needs {} and one of {CHAT_MODELS:?} in {} (`cargo xtask models` makes them)",
            EMBED_MODELS[0],
            dir.display()
        );
        anyhow::ensure!(!require_models, "the openai Python client test: {why}");
        return skip(why);
    };
    let python = match ["python3", "python"].iter().find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) {
        Some(p) => *p,
        None => return skip("no python3 on PATH".into()),
    };
    let venv = target_dir().join("openai-venv");
    let py = venv.join("bin/python");
    if !py.is_file() {
        eprintln!("$ {python} -m venv {}", venv.display());
        let ok = Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir_all(&venv);
            return skip(format!("`{python} -m venv` failed (install python3-venv)"));
        }
    }
    let has_openai = Command::new(&py)
        .args(["-c", "import openai"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_openai {
        eprintln!("$ {} -m pip install --quiet openai", py.display());
        let ok = Command::new(&py)
            .args(["-m", "pip", "install", "--quiet", "openai"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return skip("`pip install openai` failed (no network or no package index?)".into());
        }
    }
    let lamina = lamina_bin()?;
    let key = format!("lamina-test-{}", std::process::id());
    let server = ServerProcess::start(
        &lamina,
        &[
            "-m".into(),
            embed.display().to_string(),
            "-m".into(),
            chat.display().to_string(),
            "--api-key".into(),
            key.clone(),
            "--ctx".into(),
            "1024".into(),
        ],
    )?;
    let script = crate::workspace_root().join("crates/server/tests/openai_client.py");
    eprintln!(
        "$ {} {} (against lamina serve on {})",
        py.display(),
        script.display(),
        server.addr
    );
    let status = Command::new(&py)
        .arg(&script)
        .env("LAMINA_URL", format!("http://{}/v1", server.addr))
        .env("LAMINA_API_KEY", &key)
        .env("LAMINA_EMBED", stem(&embed))
        .env("LAMINA_CHAT", stem(&chat))
        .status()
        .context("running the openai client test")?;
    drop(server);
    ensure!(
        status.success(),
        "the openai Python client test failed ({status})"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// A small keep-alive HTTP/1.1 client for the load test.

pub(crate) struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    pub(crate) fn connect(addr: SocketAddr) -> Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(300)))?;
        Ok(Conn {
            r: BufReader::new(s),
        })
    }

    pub(crate) fn send(&mut self, path: &str, body: &[u8]) -> Result<()> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let s = self.r.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        Ok(())
    }

    /// The status and whether the body is chunked (else its length).
    pub(crate) fn head(&mut self) -> Result<(u16, Option<usize>)> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let mut len = None;
        loop {
            line.clear();
            ensure!(
                self.r.read_line(&mut line)? > 0,
                "connection closed in the head"
            );
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().ok();
            }
        }
        Ok((status, len))
    }

    /// Reads a body, calling `on` with each piece as it arrives.
    pub(crate) fn body(&mut self, len: Option<usize>, on: &mut dyn FnMut(&[u8])) -> Result<()> {
        if let Some(n) = len {
            let mut buf = vec![0; n];
            self.r.read_exact(&mut buf)?;
            on(&buf);
            return Ok(());
        }
        let mut line = String::new();
        loop {
            line.clear();
            self.r.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("bad chunk size {line:?}"))?;
            let mut buf = vec![0; size + 2];
            self.r.read_exact(&mut buf)?;
            if size == 0 {
                return Ok(());
            }
            on(&buf[..size]);
        }
    }
}

// ---------------------------------------------------------------------------
// The load benchmark.

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    /// Seconds each workload (each client count on each server) runs.
    #[arg(long, default_value_t = 30)]
    pub secs: u64,
    /// Concurrent embedding clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Texts per embeddings request.
    #[arg(long, default_value_t = 1)]
    pub inputs: usize,
    /// Tokens per streamed completion.
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// Concurrent streaming clients of the generation phases, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    pub gen_clients: Vec<usize>,
    /// Generative models served, comma-separated: files, names in the models
    /// directory, or `synth:SHAPE` (a random-weight Q4_K_M file of a real shape).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "SmolLM2-135M-Instruct-Q8_0.gguf,gemma-3-270m-Q4_K_M.gguf,synth:Llama-3.2-1B"
    )]
    pub gen_models: Vec<String>,
    /// Leave out llama-server (`cargo xtask llama-cpp` builds it).
    #[arg(long)]
    pub no_llama: bool,
    /// Only the generation phases.
    #[arg(long)]
    pub gen_only: bool,
}

struct Outcome {
    /// Per request: latency (s), time to first token (s), tokens.
    samples: Vec<(f64, f64, usize)>,
    errors: usize,
    first_error: Option<String>,
    wall: f64,
}

/// `clients` threads, each sending `one` back to back for `secs` seconds.
fn load(
    addr: SocketAddr,
    clients: usize,
    secs: u64,
    one: impl Fn(&mut Conn, usize) -> Result<(f64, usize)> + Send + Sync + Copy + 'static,
) -> Outcome {
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(secs);
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                let mut errors = 0;
                let mut first_error = None;
                let mut conn = None;
                let mut k = c * 7919;
                while Instant::now() < deadline {
                    k += 1;
                    let t = Instant::now();
                    let result = match conn.as_mut() {
                        Some(cn) => one(cn, k),
                        None => Conn::connect(addr).and_then(|mut cn| {
                            let r = one(&mut cn, k);
                            conn = Some(cn);
                            r
                        }),
                    };
                    match result {
                        Ok((ttft, tokens)) => {
                            samples.push((t.elapsed().as_secs_f64(), ttft, tokens))
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(format!("{e:#}"));
                            conn = None;
                        }
                    }
                }
                (samples, errors, first_error)
            })
        })
        .collect();
    let mut out = Outcome {
        samples: Vec::new(),
        errors: 0,
        first_error: None,
        wall: 0.0,
    };
    for h in handles {
        if let Ok((s, e, f)) = h.join() {
            out.samples.extend(s);
            out.errors += e;
            if out.first_error.is_none() {
                out.first_error = f;
            }
        }
    }
    out.wall = t0.elapsed().as_secs_f64();
    out
}

pub(crate) fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

/// RSS, as "TOTAL MiB (ANON anon)": the file-backed rest is the mapped model.
pub(crate) fn rss(pid: u32) -> String {
    match crate::bench::measure::read_status(pid) {
        Some(m) => format!(
            "{:.0} MiB ({:.0} anon)",
            m.rss_kb as f64 / 1024.0,
            m.rss_anon_kb as f64 / 1024.0
        ),
        None => "?".into(),
    }
}

pub(crate) fn bench(a: &ServeArgs, threads: usize, model: Option<&str>) -> Result<()> {
    ensure!(
        a.secs >= 1 && a.clients >= 1 && a.inputs >= 1 && a.max_tokens >= 1,
        "--secs, --clients, --inputs and --max-tokens must be at least 1"
    );
    ensure!(
        !a.gen_clients.is_empty() && a.gen_clients.iter().all(|&c| c >= 1),
        "--gen-clients needs counts of at least 1"
    );
    let lamina = lamina_bin()?;
    // Every model is found (or written) before anything is measured.
    let gen_models = a
        .gen_models
        .iter()
        .map(|m| match m.strip_prefix("synth:") {
            Some(shape) => crate::synth::ensure(
                crate::synth::find(shape)?,
                crate::synth::SynthType::Q4KM,
                crate::synth::DEFAULT_SEED,
            ),
            None => crate::bench::resolve_model(m),
        })
        .collect::<Result<Vec<_>>>()?;
    let llama_server = if a.no_llama {
        None
    } else {
        let bin = crate::llama_cpp::cached_bin_dir().join("llama-server");
        ensure!(
            bin.is_file(),
            "{} is missing: run `cargo xtask llama-cpp`, or pass --no-llama",
            bin.display()
        );
        Some(bin)
    };
    if !a.gen_only {
        bench_embeddings(a, threads, model, &lamina)?;
    }
    crate::serve_gen::compare(
        &lamina,
        llama_server.as_deref(),
        &gen_models,
        &a.gen_clients,
        a.secs,
        a.max_tokens,
        threads,
    )
}

/// `/v1/embeddings` under `--clients` clients, against the in-process batch figure.
fn bench_embeddings(
    a: &ServeArgs,
    threads: usize,
    model: Option<&str>,
    lamina: &Path,
) -> Result<()> {
    let dir = models::default_dir()?;
    let embed = match model {
        Some(m) => crate::bench::resolve_model(m)?,
        None => {
            find_model(&dir, EMBED_MODELS).map_or_else(crate::bench::default_embed_model, Ok)?
        }
    };
    let t = threads.to_string();

    // The in-process reference: `lamina bench embed` on a batch of 96 texts.
    eprintln!("bench serve: in-process batch throughput (lamina bench embed --batch 96)");
    let out = Command::new(lamina)
        .args([
            "bench", "embed", "--json", "--batch", "96", "--runs", "5", "-t", &t, "-m",
        ])
        .arg(&embed)
        .output()?;
    ensure!(
        out.status.success(),
        "lamina bench embed failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(
        out.stdout
            .split(|&b| b == b'\n')
            .find(|l| l.starts_with(b"{"))
            .context("no JSON from lamina bench embed")?,
    )?;
    let in_process = v["embeddings_per_s"].as_f64().context("embeddings_per_s")?;
    let isa = v["isa"].as_str().unwrap_or("?").to_string();

    let server = ServerProcess::start(
        lamina,
        &[
            "-m".into(),
            embed.display().to_string(),
            "-t".into(),
            t.clone(),
            "--max-queue".into(),
            (a.clients * 4).max(128).to_string(),
        ],
    )?;
    let addr = server.addr;
    let pid = server.pid();
    let rss_start = rss(pid);
    let texts = crate::bench::embed::batch_texts(crate::bench::SHORT_TEXT, 96);
    let embed_name = stem(&embed);

    // Each request carries --inputs of the 96 texts.
    let bodies: Vec<Vec<u8>> = (0..96)
        .map(|i| {
            let input: Vec<&String> = (0..a.inputs).map(|j| &texts[(i + j) % 96]).collect();
            json!({"model": embed_name, "input": input})
                .to_string()
                .into_bytes()
        })
        .collect();
    let bodies: &'static [Vec<u8>] = Box::leak(bodies.into_boxed_slice());
    eprintln!(
        "bench serve: /v1/embeddings, {} clients × {} s, {} text(s) per request",
        a.clients, a.secs, a.inputs
    );
    let emb = load(addr, a.clients, a.secs, move |c, k| {
        c.send("/v1/embeddings", &bodies[k % 96])?;
        let (status, len) = c.head()?;
        let mut body = Vec::new();
        c.body(len, &mut |b| body.extend_from_slice(b))?;
        ensure!(
            status == 200,
            "status {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok((0.0, 0))
    });
    let rss_end = rss(pid);
    drop(server);

    let mut lat: Vec<f64> = emb.samples.iter().map(|s| s.0 * 1e3).collect();
    let n_emb = emb.samples.len();
    let emb_rps = n_emb as f64 / emb.wall;
    let emb_tps = emb_rps * a.inputs as f64;
    let (e50, e99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));
    println!(
        "\n### lamina serve: /v1/embeddings, {} clients, {} s, {threads} threads, {isa}\n",
        a.clients, a.secs
    );
    println!(
        "| workload | requests | requests/s | throughput | P50 latency | P99 latency | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    println!(
        "| /v1/embeddings ({embed_name}, {} text/request) | {n_emb} | {emb_rps:.1} | {emb_tps:.1} texts/s | {e50:.1} ms | {e99:.1} ms | {} |",
        a.inputs, emb.errors
    );
    println!(
        "\nIn-process batch throughput (`lamina bench embed --batch 96`): {in_process:.1} texts/s; \
         through the server: {emb_tps:.1} texts/s = {:.0}%.",
        100.0 * emb_tps / in_process
    );
    println!("Server RSS: {rss_start} at start, {rss_end} at the end.");
    if let Some(e) = &emb.first_error {
        println!("First embeddings error: {e}");
    }
    Ok(())
}
