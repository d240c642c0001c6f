//! Attention for the model shapes: a prompt's causal attention over an f16
//! cache, and one decoded token over a long one, in GFLOP/s (2 per
//! multiply-add of the scores and of the value sums).
//!
//! A decoded token's calls rotate over enough caches to outgrow the
//! last-level cache, as a model's layers do, so its keys and values come
//! from memory.
//!
//! `cargo bench -p lamina-kernels --bench attention`; under `cargo test` it
//! runs the smallest case once. Times are medians, with the fastest call. `LAMINA_BENCH_ONLY=qwen3` limits it to the
//! shapes whose name contains that text.

use std::time::Instant;

use half::f16;
use lamina_kernels::attention::{AttnShape, KvRows, attention, attention_head_major};
use lamina_kernels::spin_pool::SpinPool;

/// A model's attention heads: query heads, kv heads, head dimension.
struct Heads {
    name: &'static str,
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
}

const MODELS: [Heads; 4] = [
    Heads {
        name: "qwen2.5-0.5b",
        n_head: 14,
        n_head_kv: 2,
        head_dim: 64,
    },
    Heads {
        name: "qwen3-0.6b",
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
    },
    Heads {
        name: "llama-3.2-1b",
        n_head: 32,
        n_head_kv: 8,
        head_dim: 64,
    },
    Heads {
        name: "gemma-3-270m",
        n_head: 4,
        n_head_kv: 1,
        head_dim: 256,
    },
];

/// Values in [-1, 1) from a fixed sequence, so no two rows are alike.
fn values(n: usize, seed: u32) -> impl Iterator<Item = f32> {
    (0..n as u32).map(move |i| {
        let x = (i ^ seed).wrapping_mul(2_654_435_761) >> 8;
        x as f32 / (1 << 23) as f32 - 1.0
    })
}

/// Bytes of keys and values a decoding case's calls rotate over: several
/// times any last-level cache.
const ROTATE_BYTES: usize = 256 << 20;

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let only = std::env::var("LAMINA_BENCH_ONLY").ok();
    let pool = SpinPool::new(rayon::current_num_threads());
    // (queries, keys, head-major): a prompt attending to itself, one token
    // over a cache, the cache's rows interleaved (every kv head in a row) or
    // head-major (as the engine's cache holds them).
    let cases: &[(usize, usize, bool)] = if smoke {
        &[(16, 16, false), (1, 16, true)]
    } else {
        &[
            (512, 512, false),
            (1, 4096, false),
            (1, 4096, true),
            (1, 8192, false),
            (1, 8192, true),
        ]
    };
    for h in &MODELS {
        if only.as_deref().is_some_and(|o| !h.name.contains(o)) || (smoke && h.name != "qwen3-0.6b")
        {
            continue;
        }
        let shape = AttnShape {
            n_head: h.n_head,
            n_head_kv: h.n_head_kv,
            head_dim: h.head_dim,
            scale: 1.0 / (h.head_dim as f32).sqrt(),
            softcap: None,
        };
        for &(n_q, n_kv, head_major) in cases {
            let q: Vec<f32> = values(n_q * h.n_head * h.head_dim, 1).collect();
            let kv_len = n_kv * h.n_head_kv * h.head_dim;
            // A prompt's tile stays in cache by design; decoding's pass over
            // a layer's cache does not, so its calls take one copy each in turn.
            let copies = match n_q {
                1 if !smoke => (ROTATE_BYTES / (4 * kv_len)).max(1),
                _ => 1,
            };
            let caches: Vec<(Vec<f16>, Vec<f16>)> = (0..copies as u32)
                .map(|c| {
                    let k = values(kv_len, 2 + 2 * c).map(f16::from_f32).collect();
                    let v = values(kv_len, 3 + 2 * c).map(f16::from_f32).collect();
                    (k, v)
                })
                .collect();
            let mut call = 0usize;
            let mut out = vec![0f32; q.len()];
            // Query `t` of the last `n_q` positions attends to every key up to its own.
            let keys = |t: usize| 0..n_kv - n_q + t + 1;
            let pairs: usize = (0..n_q).map(|t| keys(t).len()).sum();
            let flops = 4.0 * (pairs * h.n_head * h.head_dim) as f64;
            let mut time = || {
                let (k, v) = &caches[call % copies];
                call += 1;
                let t = Instant::now();
                let (k, v) = (KvRows::F16(k), KvRows::F16(v));
                if head_major {
                    attention_head_major(&shape, n_kv, &q, k, v, &keys, &mut out, &pool).unwrap();
                } else {
                    attention(&shape, &q, k, v, &keys, &mut out, &pool).unwrap();
                }
                t.elapsed().as_secs_f64()
            };
            let first = time();
            let reps = if smoke {
                1
            } else {
                ((0.5 / first) as usize).clamp(5, 500)
            };
            let mut times: Vec<f64> = (0..reps).map(|_| time()).collect();
            times.sort_by(f64::total_cmp);
            // The fastest call too: on a busy machine it is the steadier figure.
            let (dt, best) = (times[reps / 2], times[0]);
            let bytes = 4 * kv_len;
            let layout = if head_major {
                "head-major"
            } else {
                "interleaved"
            };
            eprintln!(
                "{:14} {n_q:>4} queries x {n_kv:>5} keys {layout:11}  {:9.3} ms  {:7.1} GFLOP/s  {:6.1} GB/s of keys and values  (fastest {:9.3} ms)",
                h.name,
                dt * 1e3,
                flops / dt / 1e9,
                bytes as f64 / dt / 1e9,
                best * 1e3
            );
        }
    }
}
