//! Attention for the model shapes: a prompt's causal attention over an f16
//! cache, and one decoded token over a long one, in GFLOP/s (2 per
//! multiply-add of the scores and of the value sums).
//!
//! `cargo bench -p lamina-kernels --bench attention`; under `cargo test` it
//! runs the smallest case once. Times are medians, with the fastest call. `LAMINA_BENCH_ONLY=qwen3` limits it to the
//! shapes whose name contains that text.

use std::time::Instant;

use half::f16;
use lamina_kernels::attention::{AttnShape, KvRows, attention};
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

fn main() {
    let smoke = !std::env::args().any(|a| a == "--bench");
    let only = std::env::var("LAMINA_BENCH_ONLY").ok();
    let pool = SpinPool::new(rayon::current_num_threads());
    // (queries, keys): a prompt attending to itself, one token over a cache.
    let cases: &[(usize, usize)] = if smoke {
        &[(16, 16)]
    } else {
        &[(512, 512), (1, 4096)]
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
        for &(n_q, n_kv) in cases {
            let q: Vec<f32> = values(n_q * h.n_head * h.head_dim, 1).collect();
            let kv_len = n_kv * h.n_head_kv * h.head_dim;
            let k: Vec<f16> = values(kv_len, 2).map(f16::from_f32).collect();
            let v: Vec<f16> = values(kv_len, 3).map(f16::from_f32).collect();
            let mut out = vec![0f32; q.len()];
            // Query `t` of the last `n_q` positions attends to every key up to its own.
            let keys = |t: usize| 0..n_kv - n_q + t + 1;
            let pairs: usize = (0..n_q).map(|t| keys(t).len()).sum();
            let flops = 4.0 * (pairs * h.n_head * h.head_dim) as f64;
            let mut time = || {
                let t = Instant::now();
                let (k, v) = (KvRows::F16(&k), KvRows::F16(&v));
                attention(&shape, &q, k, v, &keys, &mut out, &pool).unwrap();
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
            eprintln!(
                "{:14} {n_q:>4} queries x {n_kv:>5} keys  {:9.3} ms  {:7.1} GFLOP/s  (fastest {:9.3} ms)",
                h.name,
                dt * 1e3,
                flops / dt / 1e9,
                best * 1e3
            );
        }
    }
}
