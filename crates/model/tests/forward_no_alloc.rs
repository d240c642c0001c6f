//! Once its workspace is sized, `Model::forward_sequences` (the per-layer path
//! of embeddings) allocates nothing, for a batch of the same size or smaller,
//! serial and on rayon: a counting global allocator proves it. So do a
//! decoded token (`forward_cached`) and a batched decode step (`Scheduler`).
//!
//! The forwards run inside `ThreadPool::install`, as `Embedder` runs them:
//! every rayon entry from outside the pool injects a job into rayon's global
//! queue, which allocates a block every 63 jobs.
//!
//! Reads `embeddinggemma-300m-Q8_0.gguf` (else the F32 file) from the models
//! directory; without either it says so on stderr and passes.

mod common;

use std::ops::Range;

use lamina_kernels::alloc_count::{CountingAlloc, allocations, count_threads};
use lamina_kernels::pool::{Rayon, Serial, ThreadPool};
use lamina_model::{KvCache, KvType, Model, Workspace};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// The count is of every counted thread's allocations, rayon's workers
/// included, which this file's tests share, and the test harness runs them
/// on parallel threads: each holds this lock throughout, so one test's setup
/// (loading a model) never lands in the other's measured window.
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
    count_threads();
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

/// Decoding: after a prompt (batched, causal, over an f16 or a q8_0 cache)
/// each new token's forward allocates nothing, on one thread or several.
#[test]
fn decoding_a_token_does_not_allocate() {
    let _serial = one_at_a_time();
    count_threads();
    let Some(path) = common::present("SmolLM2-135M-Instruct-Q8_0.gguf") else {
        return;
    };
    let model = Model::open(&path).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| 100 + i * 7).collect();
    for (pool, kv) in [
        (&Serial as &dyn ThreadPool, KvType::F16),
        (&Rayon, KvType::F16),
        (&Rayon, KvType::Q8_0),
    ] {
        pool.install(&mut || {
            let mut ws = Workspace::new(&model.hp, prompt.len());
            let mut cache = KvCache::new(&model.hp, 128, kv);
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
                    "decode step {step} on {} threads, {kv:?} cache: {} allocations",
                    pool.threads(),
                    after - before
                );
                assert!(logits.iter().all(|x| x.is_finite()));
            }
        });
    }
}

/// Batched decoding: once every sequence's prompt is in, a scheduler step
/// (one forward pass over four sequences, their sampling and text) allocates
/// nothing, on one thread or several.
#[test]
fn a_batched_decode_step_does_not_allocate() {
    use lamina_model::generate::GenerateOptions;
    use lamina_model::sampling::SamplerParams;
    use lamina_model::scheduler::{Event, Request, Scheduler, SchedulerOptions};
    use lamina_model::tokenizer::Tokenizer;

    let _serial = one_at_a_time();
    count_threads();
    let Some(path) = common::present("SmolLM2-135M-Instruct-Q8_0.gguf") else {
        return;
    };
    let model = Model::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    for pool in [&Serial as &dyn ThreadPool, &Rayon] {
        pool.install(&mut || {
            let opts = SchedulerOptions {
                slots: 4,
                n_ctx: 128,
                kv: KvType::F16,
                budget: 64,
            };
            let mut sched = Scheduler::new(&model, &tok, opts).unwrap();
            for s in 0..4u32 {
                let sampler = if s % 2 == 0 {
                    SamplerParams::greedy()
                } else {
                    SamplerParams {
                        seed: u64::from(s),
                        ..SamplerParams::default()
                    }
                };
                let req = Request {
                    prompt: (0..20 + 5 * s).map(|i| 100 + i * 7 + s).collect(),
                    sampler,
                    opts: GenerateOptions {
                        max_tokens: Some(64),
                        ignore_eos: true,
                        stop: vec!["\n\nUser:".into()],
                    },
                    constraint: None,
                };
                sched.admit(req).unwrap();
            }
            let mut tokens = 0;
            let mut on = |ev: Event<'_>| {
                if let Event::Token { .. } = ev {
                    tokens += 1;
                }
                true
            };
            // Prompts in, and one decode step to warm up.
            while sched.step(pool, &mut on) > 4 {}
            sched.step(pool, &mut on);
            for step in 0..8 {
                let before = allocations();
                let ran = sched.step(pool, &mut on);
                let after = allocations();
                assert_eq!(ran, 4, "step {step}: every sequence decodes");
                assert_eq!(
                    after,
                    before,
                    "batched decode step {step} on {} threads: {} allocations",
                    pool.threads(),
                    after - before
                );
            }
        });
    }
}
