//! `lamina generate`, and what `chat` and `logits` share with it: loading a
//! generative model, the context size, the sampling flags.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lamina_model::generate::{DEFAULT_BATCH, GenerateOptions, Session};
use lamina_model::grammar::{Constraint, Grammar, Grammars};
use lamina_model::sampling::{Sampler, SamplerParams};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvElement, KvType, Load, Model, ModelError, ThreadPool};
use serde_json::json;

use crate::embed::thread_pool;
use crate::models;

mod batch;

/// The default context: the training context, at most this.
pub const DEFAULT_CTX: usize = 4096;

/// Model, context and threading flags shared by `generate`, `chat` and `logits`.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// Model file, a name in the models directory, or hf://ORG/REPO[:QUANT].
    #[arg(short, long)]
    pub model: String,
    /// Context size in tokens (default: the training context, at most 4096).
    #[arg(short = 'c', long = "ctx")]
    pub ctx: Option<usize>,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub kv: KvCacheArgs,
    /// Prompt tokens per forward pass.
    #[arg(long, default_value_t = DEFAULT_BATCH)]
    pub batch: usize,
    #[command(flatten)]
    pub load: LoadArg,
}

/// `--no-mmap`, shared by the commands that generate.
#[derive(clap::Args, Debug)]
pub struct LoadArg {
    /// Read the model file into memory (on 2 MiB pages where the OS offers
    /// them) instead of mapping it: generation streams every weight once a
    /// token, and a file whose page cache holds 4 KiB pages (one written or
    /// read before it was mapped) makes it a few % slower. Costs the model's
    /// size in memory and a read at start.
    #[arg(long)]
    pub no_mmap: bool,
}

impl LoadArg {
    pub fn load(&self) -> Load {
        if self.no_mmap { Load::Read } else { Load::Map }
    }
}

/// The KV cache's element types, as llama.cpp's flags name them.
#[derive(clap::Args, Debug)]
pub struct KvCacheArgs {
    /// Element type of the cached keys: f16, f32, or q8_0 (about half f16's
    /// memory; heads of a multiple of 32 values).
    #[arg(
        long = "cache-type-k",
        alias = "ctk",
        value_enum,
        default_value = "f16"
    )]
    pub cache_type_k: KvArg,
    /// Element type of the cached values: f16, f32, or q8_0.
    #[arg(
        long = "cache-type-v",
        alias = "ctv",
        value_enum,
        default_value = "f16"
    )]
    pub cache_type_v: KvArg,
    /// Keys and values at once.
    #[arg(long, value_enum, conflicts_with_all = ["cache_type_k", "cache_type_v"])]
    pub kv_type: Option<KvArg>,
}

impl KvCacheArgs {
    /// The cache's key and value types.
    pub fn kv_type(&self) -> KvType {
        match self.kv_type {
            Some(both) => KvType::both(both.element()),
            None => KvType {
                k: self.cache_type_k.element(),
                v: self.cache_type_v.element(),
            },
        }
    }
}

/// A KV cache element type.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvArg {
    F16,
    F32,
    /// ggml's Q8_0 blocks: about half f16's memory (heads of a multiple of 32 values).
    #[value(name = "q8_0")]
    Q8_0,
}

impl KvArg {
    pub fn element(self) -> KvElement {
        match self {
            KvArg::F16 => KvElement::F16,
            KvArg::F32 => KvElement::F32,
            KvArg::Q8_0 => KvElement::Q8_0,
        }
    }
}

/// Sampling flags (llama.cpp's names and defaults).
#[derive(clap::Args, Debug)]
pub struct SampleArgs {
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over (0: off).
    #[arg(long, default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Frequency penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    /// Presence penalty (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    /// Random seed (default: a fresh one each run).
    #[arg(short, long)]
    pub seed: Option<u64>,
}

impl SampleArgs {
    pub fn params(&self) -> Result<SamplerParams> {
        if !(0.0..=1.0).contains(&self.top_p) || !(0.0..=1.0).contains(&self.min_p) {
            bail!("--top-p and --min-p must lie in 0..=1");
        }
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ u64::from(std::process::id())
        });
        Ok(SamplerParams {
            temp: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            penalty_last_n: self.repeat_last_n,
            seed,
        })
    }
}

/// A generative model, its tokenizer and the compute pool.
pub struct Loaded {
    pub model: Model,
    pub tok: Tokenizer,
    pub n_ctx: usize,
    pub pool: Box<dyn ThreadPool>,
}

impl ModelArgs {
    /// Starts the thread pool, opens the model and its tokenizer, and picks the context.
    pub fn load(&self) -> Result<Loaded> {
        let pool = thread_pool(self.threads)?;
        let path = models::resolve(&self.model)?;
        let t0 = Instant::now();
        let model = models::load_options(self.load.load(), None)
            .open(&path)
            .with_context(|| format!("loading {}", path.display()))?;
        if !model.has_lm_head() {
            bail!(
                "{} is an embedding model ({}): use `lamina embed`",
                path.display(),
                model.hp.arch_name
            );
        }
        let tok = Tokenizer::from_gguf(&model.file)
            .with_context(|| format!("reading the tokenizer of {}", path.display()))?;
        let n_ctx = match self.ctx {
            Some(0) => bail!("--ctx must be at least 1"),
            Some(n) => n,
            None => model.hp.n_ctx_train.min(DEFAULT_CTX),
        };
        if n_ctx > model.hp.n_ctx_train {
            tracing::warn!(
                "--ctx {n_ctx} exceeds the model's training context of {}",
                model.hp.n_ctx_train
            );
        }
        tracing::info!(
            "loaded {} ({}) in {:.0} ms; kernels {:?}, {} threads, context {n_ctx}",
            path.display(),
            model.hp.arch_name,
            t0.elapsed().as_secs_f64() * 1e3,
            model.isa(),
            rayon::current_num_threads()
        );
        Ok(Loaded {
            model,
            tok,
            n_ctx,
            pool,
        })
    }

    pub fn kv(&self) -> KvType {
        self.kv.kv_type()
    }
}

impl Loaded {
    pub fn session(&self, args: &ModelArgs) -> Result<Session<'_>> {
        Ok(Session::with_batch(
            &self.model,
            &self.tok,
            self.n_ctx,
            args.kv(),
            args.batch.max(1),
        )?)
    }

    /// Errors clearly when `n` prompt tokens do not fit the context.
    pub fn check_fits(&self, n: usize) -> Result<()> {
        if n > self.n_ctx {
            bail!(
                "the prompt has {n} tokens, more than the context of {} tokens \
                 (raise --ctx; the model was trained on {})",
                self.n_ctx,
                self.model.hp.n_ctx_train
            );
        }
        Ok(())
    }
}

pub fn tokens_per_s(n: usize, t: Duration) -> f64 {
    n as f64 / t.as_secs_f64().max(1e-9)
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt (else --prompt-file, else stdin).
    #[arg(short, long)]
    prompt: Option<String>,
    /// Read the prompt from a file (all of it, one prompt; llama.cpp's `-f`).
    #[arg(short = 'f', long)]
    prompt_file: Option<PathBuf>,
    /// Batch mode: one prompt a line, generated together on the batch
    /// scheduler, one JSON object a line out ({"line", "text", "ids",
    /// "stop", token counts}) in the file's order.
    #[arg(long, conflicts_with_all = ["prompt", "prompt_file"])]
    file: Option<PathBuf>,
    /// Batch mode: prompts generated at once (each holds a KV cache of --ctx tokens).
    #[arg(long, default_value_t = 8)]
    parallel: usize,
    /// Tokens to generate (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    #[command(flatten)]
    sample: SampleArgs,
    /// Stop when the text contains this (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Print the prompt before the continuation.
    #[arg(long)]
    echo: bool,
    /// Print one JSON object {"ids", "text", "stop", ...} instead of streaming.
    #[arg(long)]
    json: bool,
    /// Constrain the reply to this JSON Schema (llama.cpp's -j).
    #[arg(short = 'j', long, conflicts_with = "json_schema_file")]
    json_schema: Option<String>,
    /// Constrain the reply to the JSON Schema in this file.
    #[arg(long)]
    json_schema_file: Option<PathBuf>,
}

impl Args {
    /// The JSON Schema of --json-schema or --json-schema-file, compiled for
    /// this model's vocabulary.
    pub(crate) fn constraint(&self, tok: &Tokenizer) -> Result<Option<Constraint>> {
        let text = match (&self.json_schema, &self.json_schema_file) {
            (Some(s), _) => s.clone(),
            (None, Some(f)) => std::fs::read_to_string(f)
                .with_context(|| format!("reading the JSON Schema {}", f.display()))?,
            (None, None) => return Ok(None),
        };
        let schema: serde_json::Value =
            serde_json::from_str(&text).context("the JSON Schema is not valid JSON")?;
        let grammar = Grammar::JsonSchema(schema);
        Ok(Some(Grammars::new(tok)?.constraint(&grammar)?))
    }
}

fn read_prompt(prompt: Option<String>, file: Option<&PathBuf>) -> Result<String> {
    match (prompt, file) {
        (Some(p), _) => Ok(p),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading {} (it must be UTF-8 text)", f.display())),
        (None, None) => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .context("stdin is not valid UTF-8 text")?;
            Ok(s)
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    if let Some(file) = &args.file {
        return batch::run(&args, file);
    }
    let loaded = args.model.load()?;
    // Compiled before the run: a bad schema fails fast.
    let constraint = args.constraint(&loaded.tok)?;
    let prompt = read_prompt(args.prompt, args.prompt_file.as_ref())?;
    let ids = match loaded.tok.encode_within(&prompt, true, true, loaded.n_ctx) {
        Err(ModelError::ContextExceeded {
            n_tokens, at_least, ..
        }) => bail!(
            "the prompt has {}{n_tokens} tokens, more than the context of {} tokens \
             (raise --ctx; the model was trained on {})",
            if at_least { "at least " } else { "" },
            loaded.n_ctx,
            loaded.model.hp.n_ctx_train
        ),
        other => other?,
    };
    if ids.is_empty() {
        bail!("the prompt is empty (and the model adds no BOS token to start from)");
    }
    let params = args.sample.params()?;
    let seed = params.seed;
    tracing::info!("sampling {params:?}");
    let mut sampler = Sampler::new(params, loaded.model.hp.n_vocab);
    if let Some(c) = constraint {
        sampler.constrain(c);
    }
    let mut session = loaded.session(&args.model)?;
    let opts = GenerateOptions {
        max_tokens: usize::try_from(args.n_predict).ok(),
        stop: args.stop,
        ignore_eos: args.ignore_eos,
    };

    let mut out = std::io::stdout().lock();
    if args.echo && !args.json {
        write!(out, "{prompt}")?;
        out.flush()?;
    }
    let pre = session.prefill(&ids, &*loaded.pool)?;
    let mut write_err = None;
    let json = args.json;
    let output = session.generate(&mut sampler, &opts, &*loaded.pool, &mut |piece| {
        if json || piece.is_empty() {
            return true;
        }
        match out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                write_err = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = write_err {
        // A closed pipe (`| head`) is not worth a message.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e).context("writing to stdout");
    }
    if json {
        let mut doc = json!({
            "ids": output.ids,
            "text": output.text,
            "stop": output.stop.as_str(),
            "prompt_ids": ids,
            "seed": seed,
        });
        if args.echo {
            doc["prompt"] = json!(prompt);
        }
        writeln!(out, "{doc}")?;
    } else {
        writeln!(out)?;
    }
    out.flush()?;
    eprintln!(
        "prompt: {} tokens in {:.0} ms ({:.1} tokens/s){}; generation: {} tokens in {:.0} ms ({:.1} tokens/s); stop: {}",
        pre.evaluated,
        pre.time.as_secs_f64() * 1e3,
        tokens_per_s(pre.evaluated, pre.time),
        if pre.reused > 0 {
            format!(", {} reused", pre.reused)
        } else {
            String::new()
        },
        output.ids.len(),
        output.eval_time.as_secs_f64() * 1e3,
        tokens_per_s(output.ids.len(), output.eval_time),
        output.stop
    );
    Ok(())
}
