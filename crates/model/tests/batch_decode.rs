//! Continuous batching gives every sequence the same bits as running it
//! alone: the tokens and the logits of each step, whatever shares the
//! batch, however its prompt is chunked, and whether its prefix was
//! computed or copied from another slot (a busy one, or a prompt admitted
//! with it that computed the prefix first). Runs on the `gemma2` (sliding
//! window, soft-caps) and `llama3` conformance checkpoints at F32 and Q8_0,
//! and on SmolLM2-135M-Instruct Q8_0 where it is present.

mod common;

use std::path::Path;

use common::checkpoint::write_checkpoint;
use lamina_kernels::pool::Rayon;
use lamina_model::convert::{ConvertOptions, OutType, convert};
use lamina_model::generate::{GenerateOptions, Session, StopReason};
use lamina_model::requantize::{Target, quantize_file};
use lamina_model::sampling::SamplerParams;
use lamina_model::scheduler::{Event, Refusal, Request, Scheduler, SchedulerOptions, Usage};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model};

const SLOTS: usize = 8;
const N_CTX: usize = 96;
const MAX_TOKENS: usize = 10;

/// What one sequence produced: each sampled token with its logits, then
/// how it ended.
#[derive(Debug, Default, PartialEq)]
struct Trace {
    steps: Vec<(u32, Vec<u32>)>,
    done: Option<(StopReason, usize)>,
    reused: usize,
}

fn bits(l: &[f32]) -> Vec<u32> {
    l.iter().map(|x| x.to_bits()).collect()
}

/// Eight requests: prompts of 2 to 61 tokens, four sharing a 24-token
/// prefix; greedy and seeded sampling with penalties alternate.
fn requests(n_vocab: usize) -> Vec<Request> {
    let shared: Vec<u32> = (0..24)
        .map(|i| (7 + i * 131) as u32 % n_vocab as u32)
        .collect();
    (0..SLOTS)
        .map(|r| {
            let len = [26, 61, 30, 2, 40, 27, 35, 5][r];
            let mut prompt: Vec<u32> = if r % 2 == 0 && len > 24 {
                shared.clone()
            } else {
                Vec::new()
            };
            let mut x = 1 + r as u64 * 7919;
            while prompt.len() < len {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                prompt.push(((x >> 33) % n_vocab as u64) as u32);
            }
            let sampler = if r % 2 == 0 {
                SamplerParams::greedy()
            } else {
                SamplerParams {
                    seed: r as u64,
                    repeat_penalty: 1.1,
                    ..SamplerParams::default()
                }
            };
            Request {
                prompt,
                sampler,
                opts: GenerateOptions {
                    max_tokens: Some(MAX_TOKENS),
                    ignore_eos: true,
                    ..GenerateOptions::default()
                },
                constraint: None,
            }
        })
        .collect()
}

/// Runs `reqs` through one scheduler, admitting request `i` before step
/// `admit_at[i]`, and returns each request's trace.
fn run(
    model: &Model,
    tok: &Tokenizer,
    kv: KvType,
    reqs: &[Request],
    admit_at: &[usize],
    budget: usize,
) -> Vec<Trace> {
    let mut sched = Scheduler::new(
        model,
        tok,
        SchedulerOptions {
            slots: SLOTS,
            n_ctx: N_CTX,
            kv,
            budget,
        },
    )
    .unwrap();
    let mut traces: Vec<Trace> = reqs.iter().map(|_| Trace::default()).collect();
    let mut owner = [usize::MAX; SLOTS];
    let mut step = 0;
    loop {
        for (i, r) in reqs.iter().enumerate() {
            if admit_at[i] == step {
                match sched.admit(r.clone()) {
                    Ok(s) => owner[s] = i,
                    Err(Refusal::Full(_)) => panic!("no slot for request {i}"),
                    Err(Refusal::Invalid(e)) => panic!("request {i}: {e}"),
                }
            }
        }
        let ran = sched.step(&Rayon, &mut |ev| {
            match ev {
                Event::Token {
                    seq, id, logits, ..
                } => {
                    traces[owner[seq]].steps.push((id, bits(logits)));
                }
                Event::Done {
                    seq, stop, usage, ..
                } => {
                    let Usage {
                        completion_tokens,
                        reused_tokens,
                        ..
                    } = usage;
                    let t = &mut traces[owner[seq]];
                    t.done = Some((stop, completion_tokens));
                    t.reused = reused_tokens;
                }
                Event::Failed { seq, error } => panic!("sequence {seq}: {error}"),
            }
            true
        });
        step += 1;
        if ran == 0 && admit_at.iter().all(|&a| a < step) {
            break;
        }
    }
    traces
}

fn check(path: &Path) {
    check_with(path, KvType::F16);
}

/// [`check`] over a cache of `kv` elements.
fn check_with(path: &Path, kv: KvType) {
    let model = Model::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    let reqs = requests(tok.n_vocab().min(model.hp.n_vocab));

    // Each request alone, its prompt in one pass.
    let alone: Vec<Trace> = reqs
        .iter()
        .map(|r| run(&model, &tok, kv, std::slice::from_ref(r), &[0], N_CTX).remove(0))
        .collect();
    for (i, t) in alone.iter().enumerate() {
        assert_eq!(
            t.done,
            Some((StopReason::Length, MAX_TOKENS)),
            "{name}: request {i} alone"
        );
        assert_eq!(t.steps.len(), MAX_TOKENS, "{name}: request {i} alone");
    }

    // The single-sequence path (`Session`) gives the greedy ones the same
    // logits, teacher-forced over the same tokens.
    let mut session = Session::new(&model, &tok, N_CTX, kv).unwrap();
    for (i, (r, t)) in reqs.iter().zip(&alone).enumerate() {
        session.prefill(&r.prompt, &Rayon).unwrap();
        for (k, (id, logits)) in t.steps.iter().enumerate() {
            assert!(
                bits(session.logits().unwrap()) == *logits,
                "{name}: request {i}, step {k}: Session's logits differ from the scheduler's"
            );
            session.eval(&[*id], &Rayon).unwrap();
        }
    }

    // All together, prompts chunked by a budget of 16 tokens and mixed with
    // decoding steps; then admitted one step apart, so some take a shared
    // prefix from a busy slot.
    for (how, admit_at, budget) in [
        ("together, budget 16", vec![0; SLOTS], 16),
        (
            "staggered, budget 24",
            (0..SLOTS).map(|i| 3 * i).collect(),
            24,
        ),
        ("together, budget 512", vec![0; SLOTS], 512),
    ] {
        let got = run(&model, &tok, kv, &reqs, &admit_at, budget);
        for (i, (g, a)) in got.iter().zip(&alone).enumerate() {
            assert_eq!(
                g.done, a.done,
                "{name}, {how}: request {i} ended differently"
            );
            for (k, (gs, as_)) in g.steps.iter().zip(&a.steps).enumerate() {
                assert!(
                    gs == as_,
                    "{name}, {how}: request {i}, step {k}: token {} vs {} alone, or different logits",
                    gs.0,
                    as_.0
                );
            }
        }
        // Admitted together, three wait for the first's prefix and copy it;
        // admitted apart, they copy it from a busy slot.
        let reused: Vec<usize> = got.iter().map(|t| t.reused).collect();
        assert!(
            reused.iter().filter(|&&n| n >= 24).count() >= 3,
            "{name}, {how}: the shared 24-token prefix was recomputed: reused {reused:?}"
        );
    }
}

fn checkpoint_files(family: &str, dir: &Path) -> Vec<std::path::PathBuf> {
    let src = write_checkpoint(family, dir).unwrap();
    let f32 = dir.join(format!("{family}-F32.gguf"));
    let opts = ConvertOptions {
        input: src,
        output: f32.clone(),
        out_type: OutType::F32,
        dense_modules: false,
        bert_pooler: false,
        model_id: None,
    };
    convert(&opts, &mut |_| {}).unwrap();
    let q8 = dir.join(format!("{family}-Q8_0.gguf"));
    quantize_file(&f32, &q8, Target::parse("q8_0").unwrap(), &mut |_, _, _| {}).unwrap();
    vec![f32, q8]
}

#[test]
fn gemma2_sequences_match_alone_and_batched() {
    let tmp = tempfile::tempdir().unwrap();
    for f in checkpoint_files("gemma2", tmp.path()) {
        check(&f);
    }
}

#[test]
fn llama3_sequences_match_alone_and_batched() {
    let tmp = tempfile::tempdir().unwrap();
    for f in checkpoint_files("llama3", tmp.path()) {
        check(&f);
    }
}

/// A q8_0 cache keeps the invariant: its rows are quantized alone, and
/// each query's scores and sums read only its own rows.
#[test]
fn q8_0_cache_sequences_match_alone_and_batched() {
    let tmp = tempfile::tempdir().unwrap();
    let files = checkpoint_files("llama3", tmp.path());
    check_with(&files[1], KvType::Q8_0);
}

#[test]
fn smollm2_sequences_match_alone_and_batched() {
    let Some(path) = common::gold_model("SmolLM2-135M-Instruct-Q8_0.gguf") else {
        return;
    };
    check(&path);
}

/// A full scheduler refuses the next request and hands it back; a prompt
/// longer than a slot is refused outright.
#[test]
fn a_full_scheduler_hands_requests_back() {
    let tmp = tempfile::tempdir().unwrap();
    let f = checkpoint_files("llama3", tmp.path()).remove(0);
    let model = Model::open(&f).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let mut sched = Scheduler::new(
        &model,
        &tok,
        SchedulerOptions {
            slots: 2,
            n_ctx: 16,
            kv: KvType::F16,
            budget: 8,
        },
    )
    .unwrap();
    let req = |n: usize| Request {
        prompt: (1..=n as u32).collect(),
        sampler: SamplerParams::greedy(),
        opts: GenerateOptions {
            max_tokens: Some(100),
            ignore_eos: true,
            ..GenerateOptions::default()
        },
        constraint: None,
    };
    assert!(matches!(sched.admit(req(17)), Err(Refusal::Invalid(_))));
    assert!(matches!(sched.admit(req(0)), Err(Refusal::Invalid(_))));
    let a = sched.admit(req(10)).unwrap();
    let b = sched.admit(req(3)).unwrap();
    assert_ne!(a, b);
    match sched.admit(req(4)) {
        Err(Refusal::Full(r)) => assert_eq!(r.prompt.len(), 4),
        other => panic!("expected Full, got {other:?}"),
    }
    // Both run to the end of their 16-position slots.
    let mut done = Vec::new();
    while sched.step(&Rayon, &mut |ev| {
        if let Event::Done {
            seq, stop, usage, ..
        } = ev
        {
            done.push((seq, stop, usage.completion_tokens));
        }
        true
    }) > 0
    {}
    done.sort_by_key(|d| d.0);
    let mut want = vec![(a, StopReason::Context, 7), (b, StopReason::Context, 14)];
    want.sort_by_key(|d| d.0);
    assert_eq!(done, want);
    assert!(sched.has_room());
}

/// The token that completes a stop string goes out in no `Token` event:
/// `Done` reports it with the logits it was sampled from.
#[test]
fn done_reports_the_token_that_ended_the_generation() {
    let Some(path) = common::gold_model("SmolLM2-135M-Instruct-Q8_0.gguf") else {
        return;
    };
    let model = Model::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    let opts = SchedulerOptions {
        slots: 1,
        n_ctx: 64,
        kv: KvType::F16,
        budget: 64,
    };
    let prompt = tok.encode("The capital of France is", true, true);
    let run = |stop: Vec<String>| {
        let mut sched = Scheduler::new(&model, &tok, opts).unwrap();
        let req = Request {
            prompt: prompt.clone(),
            sampler: SamplerParams::greedy(),
            opts: GenerateOptions {
                max_tokens: Some(6),
                stop,
                ignore_eos: true,
            },
            constraint: None,
        };
        sched.admit(req).unwrap();
        let (mut tokens, mut last, mut text) = (Vec::new(), None, String::new());
        while sched.step(&Rayon, &mut |ev| {
            match ev {
                Event::Token {
                    id,
                    text: t,
                    logits,
                    ..
                } => {
                    tokens.push((id, bits(logits)));
                    text.push_str(t);
                }
                Event::Done { stop, last: l, .. } => {
                    last = Some((stop, l.map(|(id, logits)| (id, bits(logits)))))
                }
                Event::Failed { error, .. } => panic!("{error}"),
            }
            true
        }) > 0
        {}
        (tokens, last, text)
    };
    let (all, done, _) = run(Vec::new());
    assert_eq!(done, Some((StopReason::Length, None)));
    // The text of the first three tokens as the stop string.
    let stop =
        String::from_utf8(tok.detokenize(&[all[0].0, all[1].0, all[2].0], true, false)).unwrap();
    assert!(!stop.is_empty());
    let (tokens, done, text) = run(vec![stop]);
    assert_eq!(tokens, all[..2]);
    assert_eq!(text, "");
    assert_eq!(done, Some((StopReason::StopString, Some(all[2].clone()))));
}
