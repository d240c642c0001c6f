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
use lamina_model::{KvCache, KvType, Model, Workspace};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// The count is of every thread's allocations, and the test harness runs
/// this file's tests on parallel threads: each holds this lock throughout,
/// so one test's setup (loading a model) never lands in the other's
/// measured window (it once did, under load: a spurious failure).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let _serial = one_at_a_time();
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

/// Decoding: after a prompt (batched, causal, over an f16 cache) each new
/// token's forward allocates nothing, on one thread or several.
#[test]
fn decoding_a_token_does_not_allocate() {
    let _serial = one_at_a_time();
    let Some(path) = common::present("SmolLM2-135M-Instruct-Q8_0.gguf") else {
        return;
    };
    let model = Model::open(&path).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 100 + i * 7).collect();
    for pool in [&Serial as &dyn ThreadPool, &Rayon] {
        pool.install(&mut || {
            let mut ws = Workspace::new(&model.hp, prompt.len());
            let mut cache = KvCache::new(&model.hp, 128, KvType::F16);
            let mut logits = vec![0.0; model.hp.n_vocab];
            model
                .forward_cached(&mut ws, &mut cache, &prompt, false, &mut logits, pool)
                .unwrap();
            // One token to warm up, then count.
            model
                .forward_cached(&mut ws, &mut cache, &[42], false, &mut logits, pool)
                .unwrap();
            for step in 0..8u32 {
                let before = allocations();
                model
                    .forward_cached(&mut ws, &mut cache, &[500 + step], false, &mut logits, pool)
                    .unwrap();
                let after = allocations();
                assert_eq!(
                    after,
                    before,
                    "decode step {step} on {} threads: {} allocations",
                    pool.threads(),
                    after - before
                );
                assert!(logits.iter().all(|x| x.is_finite()));
            }
        });
    }
}
