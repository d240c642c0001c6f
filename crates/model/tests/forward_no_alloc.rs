//! Once its workspace is sized, `Model::forward_sequences` (the per-layer path
//! of embeddings) allocates nothing, for a batch of the same size or smaller,
//! serial and on rayon: a counting global allocator proves it.
//!
//! The forwards run inside `ThreadPool::install`, as `Embedder` runs them:
//! every rayon entry from outside the pool injects a job into rayon's global
//! queue, which allocates a block every 63 jobs.
//!
//! Reads `embeddinggemma-300m-Q8_0.gguf` (else the F32 file) from the models
//! directory; without either it says so on stderr and passes.

mod common;

use std::ops::Range;

use lamina_kernels::alloc_count::{CountingAlloc, allocations};
use lamina_kernels::pool::{Rayon, Serial, ThreadPool};
use lamina_model::{Model, Workspace};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// `n` sequences of the given lengths packed into one batch.
fn batch(lens: &[usize]) -> (Vec<u32>, Vec<Range<usize>>) {
    let mut tokens = Vec::new();
    let mut ranges = Vec::new();
    for (s, &n) in lens.iter().enumerate() {
        let start = tokens.len();
        tokens.push(2);
        tokens.extend((1..n - 1).map(|i| 1000 + (i * 37 + s * 101) as u32 % 50_000));
        tokens.push(1);
        ranges.push(start..tokens.len());
    }
    (tokens, ranges)
}

#[test]
fn forward_sequences_does_not_allocate_once_sized() {
    let Some(path) = common::embedding_model() else {
        return;
    };
    let model = Model::open(&path).unwrap();
    // The sizing batch: several sequences, one longer than the ±256 window.
    let (big, big_seqs) = batch(&[300, 40, 7, 90]);
    let smaller = [
        batch(&[12]),
        batch(&[3, 5, 200]),
        batch(&[437]),
        batch(&[300, 40, 7, 90]),
    ];
    for pool in [&Serial as &dyn ThreadPool, &Rayon] {
        // Driven as the embedder drives it: the pool entered once, then many
        // forwards (see `ThreadPool::install`).
        pool.install(&mut || {
            let mut ws = Workspace::new(&model.hp, 0);
            // Warm-up: sizes the workspace; rayon starts its threads on first use.
            for _ in 0..2 {
                model
                    .forward_sequences(&mut ws, &big, &big_seqs, pool)
                    .unwrap();
            }
            let all = std::iter::once((&big, &big_seqs)).chain(smaller.iter().map(|(t, s)| (t, s)));
            for (tokens, seqs) in all {
                let before = allocations();
                model
                    .forward_sequences(&mut ws, tokens, seqs, pool)
                    .unwrap();
                let after = allocations();
                assert_eq!(
                    after,
                    before,
                    "{} tokens in {} sequences on {} threads: {} allocations",
                    tokens.len(),
                    seqs.len(),
                    pool.threads(),
                    after - before
                );
                assert!(ws.hidden().iter().all(|x| x.is_finite()));
            }
        });
    }
}
