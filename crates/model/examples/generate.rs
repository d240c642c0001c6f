//! Greedy completion of a prompt: the most likely token every step, printed
//! as it comes.
//!
//! ```text
//! cargo run --release -p lamina-model --example generate -- MODEL.gguf "The capital of France is" [MAX_TOKENS]
//! ```

use std::io::Write;
use std::process::ExitCode;

use lamina_model::generate::{GenerateOptions, Session};
use lamina_model::sampling::{Sampler, SamplerParams};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model, ModelError};

const USAGE: &str = "usage: generate MODEL.gguf PROMPT [MAX_TOKENS (default 32)]";

/// The context a session reserves, at most (a small model's whole training
/// context would allocate a cache far larger than a short completion needs).
const MAX_CTX: usize = 2048;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, prompt, max_tokens) = match args.as_slice() {
        [path, prompt] => (path, prompt, 32),
        [path, prompt, n] => match n.parse::<usize>() {
            Ok(n) if n > 0 => (path, prompt, n),
            _ => {
                eprintln!("MAX_TOKENS must be a positive whole number, not {n:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(path, prompt, max_tokens) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &str, prompt: &str, max_tokens: usize) -> Result<(), ModelError> {
    let pool = lamina_model::default_pool();
    let model = Model::open(path)?;
    let tok = Tokenizer::from_gguf(&model.file)?;
    let n_ctx = model.hp.n_ctx_train.min(MAX_CTX);
    let ids = tok.encode(prompt, true, true);
    if ids.len() >= n_ctx {
        return Err(ModelError::ContextExceeded {
            n_tokens: ids.len(),
            n_ctx,
            at_least: false,
        });
    }
    let mut session = Session::new(&model, &tok, n_ctx, KvType::F16)?;
    session.prefill(&ids, &pool)?;
    let mut sampler = Sampler::new(SamplerParams::greedy(), model.hp.n_vocab);
    let opts = GenerateOptions {
        max_tokens: Some(max_tokens),
        ..GenerateOptions::default()
    };
    print!("{prompt}");
    let mut out = std::io::stdout();
    let generation = session.generate(&mut sampler, &opts, &pool, &mut |piece| {
        print!("{piece}");
        let _ = out.flush();
        true
    })?;
    println!();
    println!(
        "[{} prompt tokens, {} generated, stopped: {}]",
        ids.len(),
        generation.ids.len(),
        generation.stop
    );
    Ok(())
}
