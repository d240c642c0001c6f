//! Dot products and matmul for the model shapes, with the machine's limits.
//!
//! Prints, besides criterion's times: GB/s of weights streamed and GOP/s
//! (2 ops per multiply-add), each as a percentage of this machine's limit
//! measured by probes: memory bandwidth (STREAM-like sum over a buffer far
//! larger than L3), the int8 multiply-add peak (a register-only loop of the
//! selected ISA's dot kernel on L1-resident data) and, for F32 weights, the
//! FMA peak. Under `cargo test` (no `--bench`) it runs one small shape once.
//! Timings on a shared machine are noisy; re-measure on a quiet one.
//! `LAMINA_BENCH_ONLY=Q8_0:576x1536,...` limits the table to those matrices,
//! `LAMINA_BENCH_TOKENS=1,512` to those token counts.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use lamina_kernels::matmul::{Layout, Scratch, Weights, matmul};
use lamina_kernels::spin_pool::SpinPool;
use lamina_kernels::{GgmlType, Isa, kernels};
use std::time::Instant;

/// `rows` rows of `ty`: one quantized row repeated, then every byte but the
/// blocks' f16 scales scrambled, so no two rows (or pages) are alike — on
/// these VMs identical rows streamed measurably faster than a real model's.
/// A zeroed buffer of `len` bytes advised into 2 MiB pages where the OS
/// offers them, as the engine's model mappings are: 4 KiB pages cost
/// streaming reads a page walk every 4 KiB (a tenth of the bandwidth of a
/// 178 MB matrix here).
fn huge(len: usize) -> memmap2::MmapMut {
    let map = memmap2::MmapMut::map_anon(len.max(1)).expect("anonymous memory");
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    map
}

fn weights(ty: GgmlType, rows: usize, cols: usize) -> memmap2::MmapMut {
    let k = kernels(ty).unwrap();
    let x: Vec<f32> = (0..cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut row = vec![0u8; k.weight_row_bytes(cols)];
    lamina_quant::quantize_row(ty, &x, &mut row).unwrap();
    let mut w = huge(row.len() * rows);
    for r in w.chunks_exact_mut(row.len()) {
        r.copy_from_slice(&row);
    }
    let scales = match ty {
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => 0..2,
        GgmlType::Q4_K => 0..4,
        GgmlType::Q6_K => 208..210,
        _ => 0..ty.type_size(),
    };
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for block in w.chunks_exact_mut(ty.type_size()) {
        for (i, b) in block.iter_mut().enumerate() {
            if !scales.contains(&i) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
        }
    }
    w
}

/// The int8 multiply-add peak in GOP/s (2 per multiply-add), all threads: a
/// register-only loop of the selected ISA's instruction — twelve independent
/// chains of `vpdpbusd` (AVX-512 VNNI, and AMX's vector side: 256-bit as the
/// kernels use it, and 512-bit; the larger figure is the peak), enough to
/// cover its latency on two ports, or of `vpmaddubsw` (AVX2).
/// Elsewhere, the Q8_0 row kernel on L1-resident rows stands in.
fn probe_int8_peak() -> f64 {
    let threads = rayon::current_num_threads();
    #[cfg(target_arch = "x86_64")]
    if let Some(kernels) = x86_peak::kernels(Isa::selected().unwrap()) {
        let iters = 50_000_000;
        let mut peak = 0.0f64;
        for (name, kernel, bytes) in kernels {
            let t = Instant::now();
            rayon::broadcast(|_| black_box(kernel(iters)));
            let gops = (threads * iters * x86_peak::CHAINS * bytes * 2) as f64
                / t.elapsed().as_secs_f64()
                / 1e9;
            eprintln!("int8 multiply-add, {name}: {gops:.1} GOP/s");
            peak = peak.max(gops);
        }
        return peak;
    }
    let k = kernels(GgmlType::Q8_0).unwrap();
    let n = 1024;
    let w = weights(GgmlType::Q8_0, 1, n);
    let mut a = vec![0u8; k.activation_row_bytes(n)];
    (k.quantize_activation)(&vec![0.5; n], &mut a);
    let iters = 200_000;
    let t = Instant::now();
    rayon::broadcast(|_| {
        let mut s = 0.0;
        for _ in 0..iters {
            s += (k.vec_dot)(n, black_box(&w), black_box(&a));
        }
        black_box(s);
    });
    (threads * iters * n * 2) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// The F32 multiply-add peak in GFLOP/s (2 per multiply-add), all threads:
/// ten independent chains of 256-bit `vfmadd` (enough to cover its latency
/// on both FMA pipes). `None` off x86-64 or without FMA.
fn probe_fma_peak() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        let threads = rayon::current_num_threads();
        let iters = 50_000_000;
        let t = Instant::now();
        rayon::broadcast(|_| {
            // SAFETY: FMA (and so AVX) was detected just above.
            black_box(unsafe { x86_peak::fma(iters) })
        });
        return Some((threads * iters * 10 * 8 * 2) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod x86_peak {
    use super::Isa;
    use std::arch::x86_64::*;

    /// Independent chains per round of a peak loop.
    pub const CHAINS: usize = 12;

    /// `iters` rounds of [`CHAINS`] instructions; returns a value to keep.
    pub type Kernel = fn(usize) -> i32;

    /// The ISA's peak loops: (name, loop, multiply-adds per instruction).
    pub fn kernels(isa: Isa) -> Option<Vec<(&'static str, Kernel, usize)>> {
        match isa {
            Isa::Avx512Vnni | Isa::Amx => Some(vec![
                (
                    "256-bit vpdpbusd",
                    |n| {
                        // SAFETY: only chosen when the selected ISA (detected) is AVX-512 VNNI.
                        unsafe { vnni(n) }
                    },
                    32,
                ),
                (
                    "512-bit vpdpbusd",
                    |n| {
                        // SAFETY: as above.
                        unsafe { vnni512(n) }
                    },
                    64,
                ),
            ]),
            Isa::Avx2 => Some(vec![(
                "vpmaddubsw",
                |n| {
                    // SAFETY: only chosen when the selected ISA (detected) is AVX2.
                    unsafe { avx2(n) }
                },
                32,
            )]),
            _ => None,
        }
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn vnni512(iters: usize) -> i32 {
        let (u, s) = std::hint::black_box((_mm512_set1_epi8(3), _mm512_set1_epi8(-5)));
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_dpbusd_epi32(*a, u, s);
            }
        }
        let t = acc
            .iter()
            .fold(_mm512_setzero_si512(), |x, &y| _mm512_add_epi32(x, y));
        _mm512_reduce_add_epi32(t)
    }

    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
    unsafe fn vnni(iters: usize) -> i32 {
        let (u, s) = std::hint::black_box((_mm256_set1_epi8(3), _mm256_set1_epi8(-5)));
        let mut acc = [_mm256_setzero_si256(); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_dpbusd_epi32(*a, u, s);
            }
        }
        let t = acc
            .iter()
            .fold(_mm256_setzero_si256(), |x, &y| _mm256_add_epi32(x, y));
        _mm256_extract_epi32::<0>(t)
    }

    /// Ten `vfmadd231ps` chains of eight lanes.
    #[target_feature(enable = "avx,fma")]
    pub unsafe fn fma(iters: usize) -> f32 {
        let (a, b) = std::hint::black_box((_mm256_set1_ps(0.999), _mm256_set1_ps(1e-3)));
        let mut acc = [_mm256_setzero_ps(); 10];
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm256_fmadd_ps(a, *c, b);
            }
        }
        let t = acc
            .iter()
            .fold(_mm256_setzero_ps(), |x, &y| _mm256_add_ps(x, y));
        _mm256_cvtss_f32(t)
    }

    /// `vpmaddubsw` chains (32 multiply-adds each; the AVX2 kernels widen
    /// its pairs with one `vpmaddwd` per one to four of them).
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(iters: usize) -> i32 {
        let u = std::hint::black_box(_mm256_set1_epi8(3));
        let mut acc: [__m256i; CHAINS] = std::array::from_fn(|k| _mm256_set1_epi8(k as i8 - 4));
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_maddubs_epi16(u, *a);
            }
        }
        let t = acc
            .iter()
            .fold(_mm256_setzero_si256(), |x, &y| _mm256_add_epi32(x, y));
        _mm256_extract_epi32::<0>(t)
    }
}

/// Whether `LAMINA_BENCH_ONLY` (a comma-separated list such as
/// `Q8_0:576x1536,Q4_K:768x3072`; unset: every shape) names this matrix.
fn selected(only: &Option<String>, ty: GgmlType, rows: usize, cols: usize) -> bool {
    only.as_ref().is_none_or(|o| {
        let name = format!("{ty}:{rows}x{cols}");
        o.split(',').any(|s| s.trim() == name)
    })
}

fn bench(c: &mut Criterion) {
    // The engine's default pool (rayon's wakes its workers through the OS on
    // every call, which costs single-token calls of tens of microseconds a
    // visible share).
    let pool = SpinPool::new(rayon::current_num_threads());
    let bw = lamina_kernels::bandwidth::memory_bandwidth(&pool, 5).expect("1 GiB for the probe");
    let peak = probe_int8_peak();
    let fma_peak = probe_fma_peak();
    eprintln!(
        "ISA {} | memory bandwidth {bw:.1} GB/s | int8 dot peak {peak:.1} GOP/s | f32 FMA peak {}",
        Isa::selected().unwrap(),
        fma_peak.map_or("unmeasured".to_string(), |p| format!("{p:.1} GFLOP/s"))
    );
    // (rows, cols): every weight shape of the project's models, the projections
    // both ways round.
    let shapes = [
        // all-MiniLM-L6-v2.
        (384, 384),
        (1536, 384),
        (384, 1536),
        (768, 768),
        (1152, 768),
        (768, 1152),
        (3072, 768),
        (768, 3072),
        (2048, 640),
        (640, 2048),
        (1536, 576),
        (576, 1536),
        (262_144, 640),
        // The Llama-3.2-1B shape's feed-forward (`cargo xtask synth`).
        (8192, 2048),
        (2048, 8192),
        // Larger than L3 with whole 256-value blocks, so the K-quants'
        // single-token rows are measured streaming from memory too.
        (131_072, 768),
    ];
    // `cargo test` runs this target without `--bench`: one small shape, as a
    // smoke test, not the whole table.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let only = match std::env::var("LAMINA_BENCH_ONLY") {
        Ok(o) => Some(o),
        Err(_) if smoke => Some("Q8_0:768x768,F32:768x768".to_string()),
        Err(_) => None,
    };
    let token_counts: Vec<usize> = match std::env::var("LAMINA_BENCH_TOKENS") {
        Ok(v) => v
            .split(',')
            .map(|t| {
                t.trim()
                    .parse()
                    .expect("LAMINA_BENCH_TOKENS: token counts such as 1,512")
            })
            .collect(),
        Err(_) => vec![1, 12, 59, 512],
    };
    let mut g = c.benchmark_group("matmul");
    g.sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(300));
    g.measurement_time(std::time::Duration::from_secs(1));
    for ty in [
        GgmlType::F32,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        let k = kernels(ty).unwrap();
        for &(rows, cols) in &shapes {
            let (rows, cols): (usize, usize) = (rows, cols);
            // K-quants need rows that are whole 256-element blocks; llama.cpp
            // stores such tensors in another type, and so do we.
            if !cols.is_multiple_of(ty.block_size()) {
                continue;
            }
            if !selected(&only, ty, rows, cols) {
                continue;
            }
            let w = weights(ty, rows, cols);
            // Where the ISA has them, the same matrix stored as panels too.
            let stored = k.stored.filter(|_| rows % 16 == 0).map(|st| {
                let mut p = huge(w.len());
                let pb = 16 * k.weight_row_bytes(cols);
                let store = |p: &mut [u8]| {
                    for (src, dst) in w.chunks_exact(pb).zip(p.chunks_exact_mut(pb)) {
                        (st.store)(cols, src, dst);
                    }
                };
                store(&mut p);
                // Again, timed (the best of three), on pages already in place:
                // what a load's rewrite costs beside the first touch of its memory.
                let dt = (0..3)
                    .map(|_| {
                        let t = Instant::now();
                        store(&mut p);
                        t.elapsed().as_secs_f64()
                    })
                    .fold(f64::INFINITY, f64::min);
                eprintln!(
                    "{ty:5} {rows:>6}x{cols:<5} storing panels {:9.3} ms  {:6.1} GB/s (one thread)",
                    dt * 1e3,
                    w.len() as f64 / dt / 1e9
                );
                p
            });
            let layouts = std::iter::once((&w[..], Layout::Rows))
                .chain(stored.as_deref().map(|p| (p, Layout::Panels)));
            for (data, layout) in layouts {
                let wm = Weights {
                    kernels: k,
                    data,
                    rows,
                    cols,
                    layout,
                };
                let label = match layout {
                    Layout::Rows => "",
                    Layout::Panels => " stored",
                };
                for &tokens in &token_counts {
                    let x: Vec<f32> = (0..tokens * cols)
                        .map(|i| (i % 13) as f32 * 0.1 - 0.6)
                        .collect();
                    let mut y = vec![0f32; tokens * rows];
                    let mut s = Scratch::with_capacity(k, cols, tokens);
                    // One warm-up call (scratch growth, page faults, waking the
                    // pool), then the median of enough calls to fill ~0.3 s.
                    let time = |s: &mut Scratch, y: &mut [f32]| {
                        let t = Instant::now();
                        matmul(&wm, &x, tokens, y, s, &pool).unwrap();
                        t.elapsed().as_secs_f64()
                    };
                    let first = time(&mut s, &mut y);
                    let reps = if smoke {
                        1
                    } else {
                        ((0.3 / first) as usize).clamp(5, 200)
                    };
                    let mut times: Vec<f64> = (0..reps).map(|_| time(&mut s, &mut y)).collect();
                    times.sort_by(f64::total_cmp);
                    let dt = times[reps / 2];
                    let gbs = w.len() as f64 / dt / 1e9;
                    let gops = 2.0 * (rows * cols * tokens) as f64 / dt / 1e9;
                    // Float weights multiply in f32: judged against the FMA peak.
                    let (of, limit) = match (ty, fma_peak) {
                        (GgmlType::F32, Some(p)) => ("f32 FMA", p),
                        _ => ("int8", peak),
                    };
                    eprintln!(
                        "{ty:5}{label} {rows:>6}x{cols:<5} T={tokens:<4} {:9.3} ms  {gbs:6.1} GB/s ({:5.1}% of bw)  {gops:7.1} GOP/s ({:5.1}% of {of} peak)",
                        dt * 1e3,
                        100.0 * gbs / bw,
                        100.0 * gops / limit
                    );
                    if rows <= 3072 && (tokens == 1 || tokens == 59) {
                        g.bench_function(format!("{ty}{label}/{rows}x{cols}/T{tokens}"), |b| {
                            b.iter(|| {
                                matmul(&wm, black_box(&x), tokens, &mut y, &mut s, &pool).unwrap()
                            })
                        });
                    }
                }
            }
        }
    }
    g.finish();
    let mut g = c.benchmark_group("vec_dot");
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::F16,
        GgmlType::F32,
    ] {
        let k = kernels(ty).unwrap();
        let n = 3072;
        let w = weights(ty, 1, n);
        let mut a = vec![0u8; k.activation_row_bytes(n)];
        (k.quantize_activation)(&vec![0.25; n], &mut a);
        g.bench_function(format!("{ty}/{n}"), |b| {
            b.iter(|| (k.vec_dot)(n, black_box(&w), black_box(&a)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
