//! Embeds the texts given on the command line and prints each vector's
//! dimensions and the cosine similarity of every pair.
//!
//! ```text
//! cargo run --release -p lamina-model --example embed -- MODEL.gguf "a text" "another text"
//! ```

use std::process::ExitCode;

use lamina_model::embed::{EmbedOptions, Embedder};

const USAGE: &str = "usage: embed MODEL.gguf TEXT [TEXT...]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, texts @ ..] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if texts.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    match run(path, texts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &str, texts: &[String]) -> Result<(), lamina_model::ModelError> {
    let pool = lamina_model::default_pool();
    let mut embedder = Embedder::open(path)?;
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&texts, &EmbedOptions::default(), &pool)?;
    for (text, v) in texts.iter().zip(&vectors) {
        println!(
            "{text:?}: {} tokens, {} dimensions",
            v.n_tokens,
            v.vector.len()
        );
    }
    for i in 0..vectors.len() {
        for j in i + 1..vectors.len() {
            let sim = cosine(&vectors[i].vector, &vectors[j].vector);
            println!("cosine({:?}, {:?}) = {sim:.4}", texts[i], texts[j]);
        }
    }
    Ok(())
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}
