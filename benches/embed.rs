//! Embedding latency on EmbeddingGemma Q8_0: one short and one long text
//! per call, as `cargo xtask bench embed` measures them.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use lamina_model::embed::{EmbedOptions, Embedder};
use lamina_testkit::texts::{LONG_TEXT, SHORT_TEXT};

const MODEL: &str = "embeddinggemma-300m-Q8_0.gguf";

fn embed(c: &mut Criterion) {
    let Some(path) = common::model(MODEL, "embed") else {
        return;
    };
    let mut embedder =
        Embedder::open(&path).unwrap_or_else(|e| panic!("{} does not load: {e}", path.display()));
    let pool = lamina_model::default_pool();
    let opts = EmbedOptions::default();
    let mut group = c.benchmark_group("embed");
    for (label, text) in [("short", SHORT_TEXT), ("long", LONG_TEXT)] {
        group.bench_function(label, |b| {
            b.iter(|| {
                embedder
                    .embed(&[text], &opts, &pool)
                    .expect("the text embeds")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, embed);
criterion_main!(benches);
