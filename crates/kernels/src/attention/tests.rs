use super::*;
use crate::pool::{Rayon, Serial};

/// The textbook definition: full score vector, softmax, weighted sum.
fn naive(
    shape: &AttnShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    keys: &dyn Fn(usize) -> Range<usize>,
) -> Vec<f32> {
    let (nh, nkv, hd) = (shape.n_head, shape.n_head_kv, shape.head_dim);
    let n_q = q.len() / (nh * hd);
    let mut out = vec![0.0; q.len()];
    for t in 0..n_q {
        for h in 0..nh {
            let g = h / (nh / nkv);
            let qh = &q[(t * nh + h) * hd..][..hd];
            let r = keys(t);
            let mut s: Vec<f32> = r
                .clone()
                .map(|j| {
                    let kh = &k[(j * nkv + g) * hd..][..hd];
                    let mut x = qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() * shape.scale;
                    if let Some(c) = shape.softcap {
                        x = c * (x / c).tanh();
                    }
                    x
                })
                .collect();
            if s.is_empty() {
                continue;
            }
            ops::softmax(&mut s);
            for (p, j) in s.iter().zip(r) {
                let vh = &v[(j * nkv + g) * hd..][..hd];
                for d in 0..hd {
                    out[(t * nh + h) * hd + d] += p * vh[d];
                }
            }
        }
    }
    out
}

/// `x` as Q8_0 blocks (ggml's quantizer), and those blocks dequantized.
fn q8_0(x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    use lamina_quant::blocks::BlockQ8_0;
    let mut blocks = vec![<BlockQ8_0 as bytemuck::Zeroable>::zeroed(); x.len() / Q8_0_VALUES];
    lamina_quant::quantize::quantize_q8_0(x, &mut blocks);
    let mut back = vec![0.0; x.len()];
    lamina_quant::dequant::dequantize_q8_0(&blocks, &mut back);
    (bytemuck::cast_slice(&blocks).to_vec(), back)
}

fn pseudo(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Every available ISA's row kernel against the naive definition, f32
/// and f16 rows, for masks whose ranges have every length mod 8 and 32.
#[test]
fn matches_naive_for_causal_window_and_symmetric_masks() {
    for &(nh, nkv, hd, n, softcap) in &[
        (3usize, 1usize, 16usize, 70usize, None),
        (4, 2, 8, 33, Some(50.0)),
        (2, 2, 64, 5, None),
        (2, 1, 256, 41, None),
        (2, 1, 12, 20, None),
    ] {
        let shape = AttnShape {
            n_head: nh,
            n_head_kv: nkv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap,
        };
        let q = pseudo(n * nh * hd, 1);
        let k: Vec<f32> = pseudo(n * nkv * hd, 2).iter().map(|x| x * 4.0).collect();
        let v = pseudo(n * nkv * hd, 3);
        let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
        let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        let k16: Vec<f32> = kh.iter().map(|x| x.to_f32()).collect();
        let v16: Vec<f32> = vh.iter().map(|x| x.to_f32()).collect();
        let whole = |x: &[f32]| x.len() - x.len() % Q8_0_VALUES;
        let ((k8, k8d), (v8, v8d), (_, q8d)) = (
            q8_0(&k[..whole(&k)]),
            q8_0(&v[..whole(&v)]),
            q8_0(&q[..whole(&q)]),
        );
        let masks: [&(dyn Fn(usize) -> Range<usize> + Sync); 4] = [
            &|t| 0..t + 1,
            &|t| (t + 1).saturating_sub(7)..t + 1,
            &|t| t.saturating_sub(5)..(t + 6).min(n),
            &|t| if t % 3 == 0 { t..t } else { 0..n },
        ];
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for keys in masks {
                let mut cases = vec![
                    (
                        "f32",
                        KvRows::F32(&k),
                        KvRows::F32(&v),
                        naive(&shape, &q, &k, &v, keys),
                    ),
                    (
                        "f16",
                        KvRows::F16(&kh),
                        KvRows::F16(&vh),
                        naive(&shape, &q, &k16, &v16, keys),
                    ),
                ];
                // A q8_0 cache scores against the query quantized as
                // llama.cpp quantizes it: the naive definition over the
                // dequantized query, keys and values.
                if hd.is_multiple_of(Q8_0_VALUES) {
                    cases.push((
                        "q8_0",
                        KvRows::Q8_0(&k8),
                        KvRows::Q8_0(&v8),
                        naive(&shape, &q8d, &k8d, &v8d, keys),
                    ));
                    cases.push((
                        "q8_0 keys, f16 values",
                        KvRows::Q8_0(&k8),
                        KvRows::F16(&vh),
                        naive(&shape, &q8d, &k8d, &v16, keys),
                    ));
                    // f16 keys score the query itself, unquantized.
                    cases.push((
                        "f16 keys, q8_0 values",
                        KvRows::F16(&kh),
                        KvRows::Q8_0(&v8),
                        naive(&shape, &q, &k16, &v8d, keys),
                    ));
                }
                cases.push((
                    "f32 keys, f16 values",
                    KvRows::F32(&k),
                    KvRows::F16(&vh),
                    naive(&shape, &q, &k, &v16, keys),
                ));
                for (ty, kr, vr, want) in cases {
                    for pool in [&Serial as &dyn ThreadPool, &Rayon] {
                        let mut got = vec![f32::NAN; q.len()];
                        attention_on(isa, &shape, &q, kr, vr, keys, &mut got, pool).unwrap();
                        for (a, b) in got.iter().zip(&want) {
                            // The q8_0 scores sum block products in another order.
                            let tol = if ty.starts_with("q8_0") { 1e-4 } else { 1e-5 };
                            assert!((a - b).abs() < tol, "{isa} hd {hd} {ty}: {a} vs {b}");
                        }
                    }
                }
            }
        }
    }
}

/// A q8_0 cache gives every ISA the portable kernel's bits: the query
/// quantizers agree byte for byte and the block sums run in one order.
#[test]
fn q8_0_rows_give_every_isa_the_same_bits() {
    let (nh, nkv, hd, n) = (6usize, 2usize, 64usize, 41usize);
    let shape = AttnShape {
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        softcap: Some(30.0),
    };
    let q = pseudo(3 * nh * hd, 21);
    let (k8, _) = q8_0(
        &pseudo(n * nkv * hd, 22)
            .iter()
            .map(|x| x * 4.0)
            .collect::<Vec<_>>(),
    );
    let (v8, _) = q8_0(&pseudo(n * nkv * hd, 23));
    let keys = |t: usize| [0..n, 5..17, 40..41][t].clone();
    let run = |isa: Isa| {
        let mut out = vec![f32::NAN; q.len()];
        let (k, v) = (KvRows::Q8_0(&k8), KvRows::Q8_0(&v8));
        attention_on(isa, &shape, &q, k, v, &keys, &mut out, &Serial).unwrap();
        out
    };
    let want = run(Isa::Scalar);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let got = run(isa);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{isa} value {i}: {a} vs scalar {b}"
            );
        }
    }
}

/// The AVX-512 kernel (512-bit lanes, heads of a multiple of 16 values)
/// gives AVX2's bits, and is near the naive definition, for one to four
/// heads per kv head, f32 and f16 rows, key ranges around the pass and
/// block sizes; small enough for Miri (`.ci/isa-tests.sh` runs the tests
/// named `miri_avx512*`), where it must run; natively only where the CPU
/// has AVX-512.
#[cfg(target_arch = "x86_64")]
#[test]
fn miri_avx512_attention_matches_naive() {
    if !crate::testutil::runs_here(Isa::Avx512Vnni) {
        return;
    }
    let n = 37;
    for (nh, hd) in [(1usize, 16usize), (4, 32), (3, 16), (2, 48), (1, 80)] {
        let shape = AttnShape {
            n_head: nh,
            n_head_kv: 1,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            softcap: None,
        };
        let q = pseudo(nh * hd * 4, 11);
        let k: Vec<f32> = pseudo(n * hd, 12).iter().map(|x| x * 3.0).collect();
        let v = pseudo(n * hd, 13);
        // `half`'s software conversions (Miri lacks F16C).
        let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32_const(x)).collect();
        let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32_const(x)).collect();
        let k16: Vec<f32> = kh.iter().map(|x| x.to_f32_const()).collect();
        let v16: Vec<f32> = vh.iter().map(|x| x.to_f32_const()).collect();
        // Four queries (a kv head's heads share the kernel calls, f16 rows are
        // widened once): keys 0..37 and shorter ranges.
        let keys = |t: usize| [0..n, 3..8, 9..10, 1..34][t].clone();
        for (ty, kr, vr, want) in [
            (
                "f32",
                KvRows::F32(&k),
                KvRows::F32(&v),
                naive(&shape, &q, &k, &v, &keys),
            ),
            (
                "f16",
                KvRows::F16(&kh),
                KvRows::F16(&vh),
                naive(&shape, &q, &k16, &v16, &keys),
            ),
        ] {
            let mut got = vec![f32::NAN; q.len()];
            attention_on(
                Isa::Avx512Vnni,
                &shape,
                &q,
                kr,
                vr,
                &keys,
                &mut got,
                &Serial,
            )
            .unwrap();
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-5, "{nh} heads of {hd} {ty}: {a} vs {b}");
            }
            let mut avx2 = vec![f32::NAN; q.len()];
            attention_on(Isa::Avx2, &shape, &q, kr, vr, &keys, &mut avx2, &Serial).unwrap();
            assert_eq!(got, avx2, "{nh} heads of {hd} {ty}: AVX2's bits");
            // Query 0 alone (one head per call, f16 rows widened as read):
            // the same bits.
            let mut one = vec![0.0; nh * hd];
            let q0 = &q[..nh * hd];
            attention_on(
                Isa::Avx512Vnni,
                &shape,
                q0,
                kr,
                vr,
                &|_| 0..n,
                &mut one,
                &Serial,
            )
            .unwrap();
            assert_eq!(&got[..nh * hd], &one[..], "{nh} heads of {hd} {ty}");
        }
    }
}

/// The AVX-512 tile kernels (a prompt's queries sharing key blocks) give
/// each query the bits it gets alone, f32 and f16 rows; small enough for
/// Miri (`.ci/isa-tests.sh`), natively only where the CPU has AVX-512.
#[cfg(target_arch = "x86_64")]
#[test]
fn miri_avx512_prompt_tiles_match_queries_alone() {
    if !crate::testutil::runs_here(Isa::Avx512Vnni) {
        return;
    }
    let (n, hd, nq) = (41, 16, 8);
    for nh in [1usize, 2] {
        let shape = AttnShape {
            n_head: nh,
            n_head_kv: 1,
            head_dim: hd,
            scale: 0.25,
            softcap: None,
        };
        let q = pseudo(nh * hd * nq, 31);
        let k: Vec<f32> = pseudo(n * hd, 32).iter().map(|x| x * 3.0).collect();
        let v = pseudo(n * hd, 33);
        let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32_const(x)).collect();
        let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32_const(x)).collect();
        // Every query attends the first key block, some the second's start;
        // or every query the same 20 keys, less than a block (a short text).
        let causal = |t: usize| 0..t + 34;
        let text = |_: usize| 0..20;
        let masks: [&KeysFn; 2] = [&causal, &text];
        for ((ty, kr, vr), keys) in [
            ("f32", KvRows::F32(&k), KvRows::F32(&v)),
            ("f16", KvRows::F16(&kh), KvRows::F16(&vh)),
        ]
        .into_iter()
        .flat_map(|rows| masks.map(|keys| (rows, keys)))
        {
            let mut all = vec![f32::NAN; q.len()];
            attention_on(
                Isa::Avx512Vnni,
                &shape,
                &q,
                kr,
                vr,
                &keys,
                &mut all,
                &Serial,
            )
            .unwrap();
            for t in [0, 5, nq - 1] {
                let row = nh * hd;
                let mut one = vec![f32::NAN; row];
                let qt = &q[t * row..(t + 1) * row];
                let r = keys(t);
                attention_on(
                    Isa::Avx512Vnni,
                    &shape,
                    qt,
                    kr,
                    vr,
                    &|_| r.clone(),
                    &mut one,
                    &Serial,
                )
                .unwrap();
                assert_eq!(
                    &all[t * row..(t + 1) * row],
                    &one[..],
                    "{nh} heads {ty}, query {t}, keys {r:?}"
                );
            }
        }
    }
}

/// The AVX-512 chunked kernel (a run of a prompt's queries walking their
/// keys chunk by chunk) gives each query the bits it gets alone, across a
/// chunk boundary, f32 and f16 rows; small enough for Miri
/// (`.ci/isa-tests.sh`), natively only where the CPU has AVX-512.
#[cfg(target_arch = "x86_64")]
#[test]
fn miri_avx512_chunked_queries_match_queries_alone() {
    use crate::attention::RowArgs;
    if !crate::testutil::runs_here(Isa::Avx512Vnni) {
        return;
    }
    let (n, hd, nh) = (300, 16, 3);
    let ends = [250, 270, 300];
    let q = pseudo(nh * hd * ends.len(), 41);
    let k: Vec<f32> = pseudo(n * hd, 42).iter().map(|x| x * 3.0).collect();
    let v = pseudo(n * hd, 43);
    let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32_const(x)).collect();
    let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32_const(x)).collect();
    for (ty, kr, vr) in [
        ("f32", KvRows::F32(&k), KvRows::F32(&v)),
        ("f16", KvRows::F16(&kh), KvRows::F16(&vh)),
    ] {
        let args: Vec<RowArgs<'_>> = ends
            .iter()
            .enumerate()
            .map(|(i, &end)| RowArgs {
                q: &q[i * nh * hd..(i + 1) * nh * hd],
                head_dim: hd,
                k: kr,
                v: vr,
                off: 0,
                kv_row: hd,
                keys: 0..end,
                scale: 0.25,
                softcap: None,
            })
            .collect();
        let mut all = vec![f32::NAN; q.len()];
        let mut outs: Vec<&mut [f32]> = all.chunks_exact_mut(nh * hd).collect();
        crate::x86_64::avx512::attend_chunked(&args, &mut outs);
        for (i, a) in args.iter().enumerate() {
            let mut one = vec![f32::NAN; nh * hd];
            crate::x86_64::avx512::attend_row(a.clone(), &mut one);
            assert_eq!(
                &all[i * nh * hd..(i + 1) * nh * hd],
                &one[..],
                "{ty}, query {i}, keys 0..{}",
                ends[i]
            );
        }
    }
}

/// A row's output does not depend on the other rows of the call: the
/// same query and keys give the same bits at any place in a batch, and
/// whichever heads of its kv head's group share its kernel call.
#[test]
fn rows_are_independent_of_the_batch() {
    for (n_head, softcap) in [(2, None), (3, Some(0.5)), (5, None), (8, None)] {
        let shape = AttnShape {
            n_head,
            n_head_kv: 1,
            head_dim: 64,
            scale: 0.125,
            softcap,
        };
        let (n, q_row) = (50, n_head * 64);
        let q = pseudo(n * q_row, 4);
        let k = pseudo(n * 64, 5);
        let v = pseudo(n * 64, 6);
        let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
        let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        let ((k8, _), (v8, _)) = (q8_0(&k), q8_0(&v));
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for (k, v) in [
                (KvRows::F32(&k), KvRows::F32(&v)),
                // Among 50 queries the f16 rows are widened once per task; alone, per row.
                (KvRows::F16(&kh), KvRows::F16(&vh)),
                (KvRows::Q8_0(&k8), KvRows::Q8_0(&v8)),
            ] {
                // Query 37 attends keys 20..45, alone and among 50 queries (where
                // its heads share kernel calls).
                let keys = |t: usize| if t == 37 { 20..45 } else { 0..t + 1 };
                let mut all = vec![0.0; q.len()];
                attention_on(isa, &shape, &q, k, v, &keys, &mut all, &Rayon).unwrap();
                let mut one = vec![0.0; q_row];
                let q37 = &q[37 * q_row..38 * q_row];
                attention_on(isa, &shape, q37, k, v, &|_| 20..45, &mut one, &Serial).unwrap();
                assert_eq!(
                    &all[37 * q_row..38 * q_row],
                    &one[..],
                    "{isa} {n_head} heads"
                );
            }
        }
    }
}

/// Each x86 row kernel (AVX2's, and its AVX-512 VL build) gives a head
/// the bits it gets alone whichever heads share its call: one to four
/// heads, whose score passes take two or four keys and whose value passes
/// keep one to eight chunks in registers, f32 and f16 rows, heads of one to
/// seventeen 8-value chunks, ranges of every length mod 8 and 32.
#[cfg(target_arch = "x86_64")]
#[test]
fn x86_row_kernels_give_each_head_its_bits_alone() {
    let kernels: [(Isa, AttendFn); 2] = [
        (Isa::Avx2, crate::x86_64::avx2::attend_row),
        (Isa::Avx512Vnni, crate::x86_64::avx2::attend_row_vl),
    ];
    for (isa, kernel) in kernels {
        if !isa.is_available() {
            continue;
        }
        for hd in [8, 24, 64, 136] {
            let n = 75;
            let k = pseudo(n * hd, 21);
            let v = pseudo(n * hd, 22);
            let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
            let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            for heads in 1..=MAX_HEADS {
                let q = pseudo(heads * hd, 23 + heads as u32);
                for (kr, vr) in [
                    (KvRows::F32(&k), KvRows::F32(&v)),
                    (KvRows::F16(&kh), KvRows::F16(&vh)),
                ] {
                    for keys in [0..n, 3..40, 5..6, 1..34, 9..17] {
                        let args = |q| RowArgs {
                            q,
                            head_dim: hd,
                            k: kr,
                            v: vr,
                            off: 0,
                            kv_row: hd,
                            keys: keys.clone(),
                            scale: 0.3,
                            softcap: None,
                        };
                        let mut together = vec![f32::NAN; heads * hd];
                        kernel(args(&q), &mut together);
                        for (h, want) in together.chunks_exact(hd).enumerate() {
                            let mut alone = vec![f32::NAN; hd];
                            kernel(args(&q[h * hd..(h + 1) * hd]), &mut alone);
                            assert_eq!(
                                want,
                                &alone[..],
                                "{isa} head {h} of {heads}, {hd} values, keys {keys:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A query's key range, as `attention` takes it.
type KeysFn<'a> = dyn Fn(usize) -> Range<usize> + Sync + 'a;

/// A causal prompt's queries go through tile kernels several at a time
/// where the ISA has them (sharing the key blocks they all attend): each
/// query's rows are the bits it gets alone, for groups of one to seven
/// heads (tiled groups of one and two, untiled ones, groups split four
/// and three), heads of one to eight 16-value chunks (value passes of
/// equal and unequal widths), f32 and f16 rows, soft-capped or not;
/// queries that start apart (a sliding window, packed sequences) are not
/// tiled.
#[test]
fn prompt_tiles_give_each_query_its_bits_alone() {
    // Causal after 3 tokens of an earlier turn; a sliding window of 40 keys;
    // two sequences packed with the later one's rows first (the last two:
    // queries that start apart, not tiled).
    let causal = |t: usize| 0..t + 4;
    let window = |t: usize| (t + 4).saturating_sub(40)..t + 4;
    let packed = |t: usize| if t < 21 { 54..t + 55 } else { 0..t - 20 };
    // A batch of short texts, each attending to all of itself: tiles of
    // fewer keys than a block, and texts shorter than a tile.
    let texts = |t: usize| {
        let ends = [13, 33, 36, 43, 72];
        let i = ends.iter().position(|&e| t < e).unwrap_or(ends.len() - 1);
        if i == 0 {
            0..ends[0]
        } else {
            ends[i - 1]..ends[i]
        }
    };
    let masks: [(&str, &KeysFn); 4] = [
        ("causal", &causal),
        ("window", &window),
        ("packed", &packed),
        ("texts", &texts),
    ];
    for (n_head, hd, softcap) in [
        (1, 64, None),
        (1, 96, None),
        (1, 80, Some(0.5)),
        (2, 32, Some(0.5)),
        (3, 48, None),
        (4, 64, None),
        (5, 16, None),
        (7, 128, None),
    ] {
        assert_batch_is_alone(n_head, hd, softcap, 75, 72, 21, &masks, 1);
    }
}

/// A long prompt's queries walk their keys chunk by chunk together where
/// the ISA has a chunked kernel (AVX-512, groups no tile serves) and their
/// rows outgrow L2: each query's rows are the bits it gets alone, across
/// several chunks and where the prompt switches to chunks, for groups of
/// three and four heads, f32 and f16 rows, a causal mask after an earlier
/// turn and a sliding window (queries that start apart).
#[test]
fn long_prompts_give_each_query_its_bits_alone() {
    let causal = |t: usize| 0..t + 37;
    let window = |t: usize| (t + 37).saturating_sub(600)..t + 37;
    let masks: [(&str, &KeysFn); 2] = [("causal", &causal), ("window", &window)];
    for n_head in [3, 4] {
        assert_batch_is_alone(n_head, 128, None, 700, 663, 31, &masks, 7);
    }
}

/// Every ISA here with kernels of its own, f32 and f16 rows, each of
/// `masks`: the first `nq` queries of `n_head` heads of `hd` values (two kv
/// heads, `n` key rows) at once, then every `step`-th query and the last
/// alone: the same bits.
#[allow(clippy::too_many_arguments)]
fn assert_batch_is_alone(
    n_head: usize,
    hd: usize,
    softcap: Option<f32>,
    n: usize,
    nq: usize,
    seed: u32,
    masks: &[(&str, &KeysFn)],
    step: usize,
) {
    let shape = AttnShape {
        n_head: 2 * n_head,
        n_head_kv: 2,
        head_dim: hd,
        scale: 0.125,
        softcap,
    };
    let (q_row, kv_row) = (2 * n_head * hd, 2 * hd);
    let q = pseudo(n * q_row, seed);
    let k: Vec<f32> = pseudo(n * kv_row, seed + 1)
        .iter()
        .map(|x| 4.0 * x)
        .collect();
    let v = pseudo(n * kv_row, seed + 2);
    let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
    let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    let mut tested = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        // aarch64's ISAs all take the portable kernels here; once is enough.
        let kernels = crate::attention::float_kernels(isa, hd);
        if tested.contains(&kernels) {
            continue;
        }
        tested.push(kernels);
        for (kr, vr) in [
            (KvRows::F32(&k), KvRows::F32(&v)),
            (KvRows::F16(&kh), KvRows::F16(&vh)),
        ] {
            for &(mask, keys) in masks {
                let qs = &q[..nq * q_row];
                let mut all = vec![f32::NAN; qs.len()];
                attention_on(isa, &shape, qs, kr, vr, keys, &mut all, &Rayon).unwrap();
                for t in (0..nq).step_by(step).chain([nq - 1]) {
                    let mut one = vec![f32::NAN; q_row];
                    let qt = &q[t * q_row..(t + 1) * q_row];
                    let r = keys(t);
                    attention_on(isa, &shape, qt, kr, vr, &|_| r.clone(), &mut one, &Serial)
                        .unwrap();
                    assert_eq!(
                        &all[t * q_row..(t + 1) * q_row],
                        &one[..],
                        "{isa} {mask} {n_head} heads of {hd}, query {t}"
                    );
                }
            }
        }
    }
}

/// Packed sequences with symmetric windows (a batch of embeddings): each
/// sequence's rows are the same bits as the sequence alone.
#[test]
fn packed_sequences_match_each_alone() {
    let shape = AttnShape {
        n_head: 3,
        n_head_kv: 1,
        head_dim: 256,
        scale: 0.0625,
        softcap: None,
    };
    let lens = [7usize, 342, 2, 40, 300];
    let n: usize = lens.iter().sum();
    let q_row = 3 * 256;
    let q = pseudo(n * q_row, 7);
    let k = pseudo(n * 256, 8);
    let v = pseudo(n * 256, 9);
    let starts: Vec<usize> = lens
        .iter()
        .scan(0, |s, &l| {
            *s += l;
            Some(*s - l)
        })
        .collect();
    let window = |start: usize, end: usize| {
        move |i: usize| i.saturating_sub(128).max(start)..(i + 129).min(end)
    };
    let seq_of = |t: usize| starts.iter().rposition(|&s| s <= t).unwrap();
    let packed = |t: usize| {
        let s = seq_of(t);
        window(starts[s], starts[s] + lens[s])(t)
    };
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let mut all = vec![0.0; q.len()];
        let (kr, vr) = (KvRows::F32(&k), KvRows::F32(&v));
        attention_on(isa, &shape, &q, kr, vr, &packed, &mut all, &Rayon).unwrap();
        for (s, (&st, &len)) in starts.iter().zip(&lens).enumerate() {
            let (a, b) = (st * 256, (st + len) * 256);
            let (kr, vr) = (KvRows::F32(&k[a..b]), KvRows::F32(&v[a..b]));
            let mut one = vec![0.0; len * q_row];
            let qs = &q[st * q_row..(st + len) * q_row];
            attention_on(isa, &shape, qs, kr, vr, &window(0, len), &mut one, &Rayon).unwrap();
            if len > 1 {
                assert_eq!(
                    &all[st * q_row..(st + len) * q_row],
                    &one[..],
                    "{isa} sequence {s}"
                );
            }
        }
    }
}

/// Decoding's kv groups are split so two threads share the work and
/// heads that can share key rows do.
#[test]
fn few_queries_split_groups_to_balance_the_threads() {
    // (group, kv heads, threads) → tasks per group.
    for (case, want) in [
        ((3, 3, 2), 2), // SmolLM2: tasks of two heads and one
        ((4, 1, 2), 4), // Gemma 3 270M: a task a head
        ((8, 4, 2), 2), // TinyLlama: tasks of four (MAX_HEADS)
        ((1, 12, 2), 1),
        ((4, 1, 1), 1),
        ((4, 1, 4), 4),
    ] {
        assert_eq!(group_parts(case.0, case.1, case.2), want, "{case:?}");
    }
}

#[test]
fn bad_shapes_are_errors() {
    let shape = AttnShape {
        n_head: 3,
        n_head_kv: 2,
        head_dim: 4,
        scale: 1.0,
        softcap: None,
    };
    let x = vec![0.0; 24];
    let mut out = vec![0.0; 24];
    assert!(
        attention(
            &shape,
            &x,
            KvRows::F32(&x),
            KvRows::F32(&x),
            &|_| 0..1,
            &mut out,
            &Serial
        )
        .is_err()
    );
    let shape = AttnShape {
        n_head: 2,
        n_head_kv: 1,
        head_dim: 4,
        scale: 1.0,
        softcap: None,
    };
    assert!(
        attention(
            &shape,
            &x,
            KvRows::F32(&x[..8]),
            KvRows::F32(&x[..8]),
            &|t| 0..t + 1,
            &mut out,
            &Serial
        )
        .is_err()
    );
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        // A q8_0 cache of heads that are not whole blocks.
        let blocks = [0u8; 2 * Q8_0_BYTES];
        let e = attention_on(
            isa,
            &shape,
            &x[..8],
            KvRows::Q8_0(&blocks),
            KvRows::Q8_0(&blocks),
            &|_| 0..1,
            &mut out[..8],
            &Serial,
        )
        .unwrap_err();
        assert!(e.to_string().contains("multiple of 32"), "{e}");
    }
}

/// `x`'s interleaved rows (`rows` of `nkv` heads of `hd` values) head-major.
fn head_major<T: Copy>(x: &[T], rows: usize, nkv: usize, hd: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(x.len());
    for g in 0..nkv {
        for j in 0..rows {
            out.extend_from_slice(&x[(j * nkv + g) * hd..][..hd]);
        }
    }
    out
}

/// Head-major keys and values give every ISA the interleaved rows' bits,
/// f32, f16 and Q8_0 rows: a prompt whose kv groups of two heads take the
/// tiles, one whose groups of four walk a long span through the chunked
/// kernel (and widen their f16 rows), and a decoded token, each with the
/// used rows a prefix of the buffer's (a cache not yet full).
#[test]
fn head_major_rows_give_the_interleaved_bits() {
    let tiles = |t: usize| 0..t + 31;
    assert_head_major_is_interleaved(4, 2, 64, 300, 260, &tiles);
    let chunked = |t: usize| 0..t + 661;
    assert_head_major_is_interleaved(8, 2, 128, 720, 40, &chunked);
    let decode = |_: usize| 0..290;
    assert_head_major_is_interleaved(8, 2, 64, 300, 1, &decode);
    // A head-major buffer must hold whole heads of `rows` rows.
    let shape = AttnShape {
        n_head: 8,
        n_head_kv: 2,
        head_dim: 64,
        scale: 0.125,
        softcap: None,
    };
    let (q, kv) = (pseudo(8 * 64, 44), pseudo(300 * 2 * 64, 45));
    let mut out = vec![0.0; q.len()];
    let (k, v) = (KvRows::F32(&kv), KvRows::F32(&kv));
    let err = attention_head_major(&shape, 299, &q, k, v, &decode, &mut out, &Serial);
    assert!(
        matches!(err, Err(KernelError::AttentionBuffers { .. })),
        "{err:?}"
    );
}

/// `nq` queries of `nh` heads (`nkv` kv heads of `hd` values) against
/// `rows` key rows, interleaved and head-major: the same bits on every ISA.
fn assert_head_major_is_interleaved(
    nh: usize,
    nkv: usize,
    hd: usize,
    rows: usize,
    nq: usize,
    keys: &KeysFn,
) {
    let shape = AttnShape {
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        softcap: None,
    };
    let kf = pseudo(rows * nkv * hd, 41);
    let vf = pseudo(rows * nkv * hd, 42);
    let kh: Vec<f16> = kf.iter().map(|&x| f16::from_f32(x)).collect();
    let vh: Vec<f16> = vf.iter().map(|&x| f16::from_f32(x)).collect();
    let (k8, _) = q8_0(&kf);
    let (v8, _) = q8_0(&vf);
    // Q8_0 head-major: the same blocks, each head's run of rows together.
    let blocks = |b: &[u8]| -> Vec<u8> {
        let chunks: Vec<[u8; Q8_0_BYTES]> = b
            .chunks_exact(Q8_0_BYTES)
            .map(|c| c.try_into().unwrap())
            .collect();
        head_major(&chunks, rows, nkv, hd / Q8_0_VALUES).concat()
    };
    let (k8h, v8h) = (blocks(&k8), blocks(&v8));
    let (kfh, vfh) = (
        head_major(&kf, rows, nkv, hd),
        head_major(&vf, rows, nkv, hd),
    );
    let (khh, vhh) = (
        head_major(&kh, rows, nkv, hd),
        head_major(&vh, rows, nkv, hd),
    );
    let q = pseudo(nq * nh * hd, 43);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let sides = [
            (
                "f32",
                [KvRows::F32(&kf), KvRows::F32(&vf)],
                [KvRows::F32(&kfh), KvRows::F32(&vfh)],
            ),
            (
                "f16",
                [KvRows::F16(&kh), KvRows::F16(&vh)],
                [KvRows::F16(&khh), KvRows::F16(&vhh)],
            ),
            (
                "q8_0",
                [KvRows::Q8_0(&k8), KvRows::Q8_0(&v8)],
                [KvRows::Q8_0(&k8h), KvRows::Q8_0(&v8h)],
            ),
        ];
        for (name, [k, v], [kh, vh]) in sides {
            let mut want = vec![f32::NAN; q.len()];
            attention_on(isa, &shape, &q, k, v, keys, &mut want, &Rayon).unwrap();
            let mut got = vec![f32::NAN; q.len()];
            attention_head_major_on(isa, &shape, rows, &q, kh, vh, keys, &mut got, &Rayon).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{isa} {name}, {nh} heads of {hd}, {nq} queries, value {i}: {a} vs {b}"
                );
            }
        }
    }
}
