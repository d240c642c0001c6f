//! `lamina`: the command-line front end. Each subcommand lives in its own module;
//! this file parses arguments, sets up logging and reports errors.
#![forbid(unsafe_code)]

mod bench;
mod chat;
mod convert;
mod embed;
mod generate;
mod inspect;
mod logits;
mod models;
mod pull;
mod quantize;
mod rerank;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The environment variables the command reads, for `--help`.
const ENVIRONMENT: &str = "\
Environment:
  LAMINA_MODELS    folder searched for model names (default ~/.cache/lamina/models)
  LAMINA_LOG       log filter (overrides -v), e.g. debug or lamina_server=info
  LAMINA_POOL      compute pool: spin (default) or rayon
  LAMINA_PANELS    0 keeps every model's matrices as the file's rows instead of
                   rewriting them into panels at load (same results, for A/B timings)
  LAMINA_ISA       force a kernel ISA: scalar, avx2, avx512, amx, neon or dotprod
  LAMINA_PREFETCH  software prefetch distance in bytes of the stored-panel
                   kernels, one token and a few (0 turns it off)
  LAMINA_API_KEY   serve: the API key when --api-key is not given";

#[derive(Parser, Debug)]
#[command(
    name = "lamina",
    version,
    about = "Run GGUF language models on the CPU",
    after_help = ENVIRONMENT
)]
struct Cli {
    /// More log output (-v info, -vv debug); LAMINA_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show a GGUF file's header, metadata and tensors.
    Inspect(inspect::Args),
    /// Convert a Hugging Face checkpoint folder (safetensors) to GGUF.
    Convert(convert::Args),
    /// Rewrite a GGUF with its weights in another type, as llama-quantize does.
    Quantize(quantize::Args),
    /// Embed texts with an embedding model (EmbeddingGemma, BERT family, ...).
    Embed(embed::Args),
    /// Score documents against a query with a reranker (cross-encoder).
    Rerank(rerank::Args),
    /// Continue a prompt with a generative model, streaming the text.
    Generate(generate::Args),
    /// Chat with a generative model (multi-turn, interactive).
    Chat(chat::Args),
    /// Top-K next-token logits at every position of a sequence (teacher forcing).
    Logits(logits::Args),
    /// Print the token ids a model's tokenizer gives a text.
    Tokenize(embed::TokenizeArgs),
    /// Serve models over an OpenAI-compatible HTTP API.
    Serve(serve::Args),
    /// Download a model from the Hugging Face Hub (GGUF, or safetensors converted).
    Pull(pull::Args),
    /// In-process timings (used by `cargo xtask bench`).
    Bench(bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Convert(args) => {
            remove_temporaries_on_ctrl_c();
            convert::run(args)
        }
        Command::Embed(args) => embed::run(args),
        Command::Rerank(args) => rerank::run(args),
        Command::Quantize(args) => {
            remove_temporaries_on_ctrl_c();
            quantize::run(args)
        }
        Command::Generate(args) => generate::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Logits(args) => logits::run(args),
        Command::Tokenize(args) => embed::tokenize(args),
        Command::Serve(args) => serve::run(args),
        Command::Pull(args) => {
            remove_temporaries_on_ctrl_c();
            pull::run(args)
        }
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole context chain on one line.
            eprintln!("error: {}", escape_hidden(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}

/// An error message with the control and invisible characters it may carry
/// from a file (key and tensor names) escaped, all but line breaks.
fn escape_hidden(msg: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(msg.len());
    for c in msg.chars() {
        if c != '\n' && inspect::is_hidden(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Removes the temporaries of an interrupted `quantize` or `convert` before
/// exiting as a shell does on Ctrl-C.
fn remove_temporaries_on_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        lamina_gguf::remove_all_staged();
        std::process::exit(130);
    });
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LAMINA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
