//! Text generation on SmolLM2-135M-Instruct Q8_0: prompt processing of a
//! 512-token prompt (pp512) and decoding from a short prompt (tg), reported
//! as tokens per second.

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lamina_model::generate::Session;
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model};

const MODEL: &str = "SmolLM2-135M-Instruct-Q8_0.gguf";
/// Prompt tokens of the pp figure, as llama-bench's `-p 512`.
const PP: usize = 512;
/// Tokens decoded per tg iteration.
const TG: usize = 32;
const SHORT_PROMPT: &str = "The quick brown fox";

/// Deterministic pseudo-random ids, as llama-bench times random tokens.
fn prompt_ids(n: usize, n_vocab: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| ((i * 2_654_435_761 + 12_345) % n_vocab as u64) as u32)
        .collect()
}

fn generate(c: &mut Criterion) {
    let Some(path) = common::model(MODEL, "generate") else {
        return;
    };
    let model =
        Model::open(&path).unwrap_or_else(|e| panic!("{} does not load: {e}", path.display()));
    let tok = Tokenizer::from_gguf(&model.file).expect("the model's tokenizer");
    let pool = lamina_model::default_pool();
    let mut session = Session::new(&model, &tok, PP + TG, KvType::F16).expect("a session");
    let mut group = c.benchmark_group("generate");
    // An iteration takes a large fraction of a second: fewer, longer samples.
    group.sample_size(20);

    let prompt = prompt_ids(PP, model.hp.n_vocab);
    group.throughput(Throughput::Elements(PP as u64));
    group.bench_function("pp512", |b| {
        b.iter(|| {
            session.clear();
            session.prefill(&prompt, &pool).expect("the prompt runs")
        })
    });

    let short = tok.encode(SHORT_PROMPT, true, false);
    group.throughput(Throughput::Elements(TG as u64));
    group.bench_function("tg32", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Each iteration decodes from the same short prompt, which
                // is not timed.
                session.clear();
                session.prefill(&short, &pool).expect("the prompt runs");
                let start = Instant::now();
                for _ in 0..TG {
                    let logits = session.logits().expect("logits after the last token");
                    let next = lamina_model::sampling::argmax(logits) as u32;
                    session.eval(&[next], &pool).expect("a token decodes");
                }
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, generate);
criterion_main!(benches);
