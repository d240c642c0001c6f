//! Scaled dot-product attention with an online softmax (no score matrix).
//!
//! Each query attends to one contiguous range of key rows, which covers every
//! mask the models need: causal (`0..=pos`), causal sliding window
//! (`pos+1-w..=pos`) and the symmetric window of a bidirectional sequence
//! (`max(start, i-w/2)..min(end, i+w/2+1)`). Keys are visited in blocks of
//! `KEY_BLOCK`: scores of a block land in a stack array, the running max
//! and sum are updated once per block, and the value rows are accumulated
//! straight into the output row. Prompt-sized calls over an f16 cache widen
//! each task's key and value rows to f32 once, for all its query heads and
//! positions, into a per-thread buffer (grown, never shrunk), where its
//! queries read each row twice on average (a prompt's overlapping ranges);
//! otherwise (decoding, alone or many sequences batched) rows are widened
//! as they are read and nothing is allocated.
//!
//! Work is split over (query chunk × kv head for prompts, or × part of a kv
//! head's query heads for a few queries, as `group_parts` splits them) tasks on a
//! [`ThreadPool`]; tasks write disjoint output rows. A query's heads go
//! through the row kernel of the selected ISA (`AttendFn`: the portable
//! one here, the AVX2 one on x86-64, built for AVX-512 VL's registers where
//! that is the ISA, or AVX-512's in 512-bit vectors with AVX2's bits for
//! heads of a multiple of 16 values) one at a time, or up to `MAX_HEADS`
//! of a kv head's group together, reading each key and value row once for
//! all of them. In a prompt, consecutive queries that start at the same key
//! go through the ISA's tile kernel together where it has one (AVX-512, AVX2):
//! the key blocks they all attend are read once for all their heads. Where
//! no tile serves a group (three heads or more) and the queries' rows
//! outgrow L2 (a long cache), runs of them walk their keys chunk by chunk
//! together through the ISA's chunked kernel (AVX-512), so each chunk's
//! rows are read from memory once for the run. A
//! row's result depends only on its query, its key range and the ISA, never
//! on the other rows or heads of the call, so a token's output is the same
//! alone or inside a batch.
//!
//! Keys and values come interleaved (a row holds every kv head: a prompt's
//! own projections, [`attention`]) or head-major (each kv head's rows back
//! to back: a cache, [`attention_head_major`]). A decoded token's pass over
//! a long cache is one contiguous stream per kv head in the second layout;
//! in the first it reads a head's slice of every row, a stride the memory
//! system serves at a fraction of its bandwidth. Both give the same bits.

use std::ops::Range;

use half::f16;

use crate::ops;
use crate::pool::ThreadPool;
use crate::{Isa, KernelError};

/// Keys scored per softmax update.
pub(crate) const KEY_BLOCK: usize = 32;
/// Largest head dimension supported.
pub const MAX_HEAD_DIM: usize = 512;
/// Most bytes of f32 a task widens its f16 keys (and as many values) into
/// at once; longer spans are widened per row as they are read, the same
/// values either way. A kv head's rows lie a whole cache row apart, and
/// scoring a long cache from contiguous f32 rows is the faster of the two
/// well past the L2, so the cap is set by memory: about 16 MiB a thread.
const WIDEN_MAX_BYTES: usize = 8 << 20;
/// Widening buffers grow in steps of this many keys.
const WIDEN_STEP: usize = 512;

thread_local! {
    /// A worker's widened key and value rows (prompt processing only: a
    /// single query never widens, so decoding allocates nothing here).
    static WIDENED: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Key or value rows: `n` rows of `n_head_kv × head_dim` values.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    /// ggml's Q8_0 blocks (34 bytes per 32 values), rows of whole blocks.
    Q8_0(&'a [u8]),
}

impl KvRows<'_> {
    /// Values held.
    fn len(&self) -> usize {
        match self {
            KvRows::F32(s) => s.len(),
            KvRows::F16(s) => s.len(),
            KvRows::Q8_0(b) => b.len() / Q8_0_BYTES * Q8_0_VALUES,
        }
    }

    pub(crate) fn is_q8_0(&self) -> bool {
        matches!(self, KvRows::Q8_0(_))
    }
}

/// Values and bytes of a Q8_0 block.
pub(crate) const Q8_0_VALUES: usize = 32;
pub(crate) const Q8_0_BYTES: usize = 34;

/// Where a kv head's rows lie in the key and value buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KvLayout {
    /// Row `j` holds every kv head, head `g` from `j · n_head_kv · head_dim
    /// + g · head_dim`.
    Interleaved,
    /// Kv head `g`'s `rows` rows back to back from `g · rows · head_dim`.
    HeadMajor { rows: usize },
}

/// Head layout and scaling of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (query head `h` reads kv head `h / (n_head / n_head_kv)`).
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Multiplies every score (usually `1/√head_dim`).
    pub scale: f32,
    /// Attention logit soft-capping `c·tanh(s/c)` (Gemma 2), when set.
    pub softcap: Option<f32>,
}

/// One query's heads that share a kv head (one to [`MAX_HEADS`]), in one
/// attention call.
#[derive(Clone, Debug)]
pub(crate) struct RowArgs<'a> {
    /// The query heads, one after the other (`head_dim` values each).
    pub q: &'a [f32],
    pub head_dim: usize,
    pub k: KvRows<'a>,
    pub v: KvRows<'a>,
    /// Index of the kv head's first value (key row 0).
    pub off: usize,
    /// Values from one of the kv head's rows to the next (`n_head_kv ×
    /// head_dim` interleaved, `head_dim` head-major).
    pub kv_row: usize,
    /// The key rows attended to.
    pub keys: Range<usize>,
    pub scale: f32,
    pub softcap: Option<f32>,
}

/// The row kernel of an ISA: writes the heads' outputs (`q.len()` values).
/// Each head's result is the same bits whichever heads share its call.
pub(crate) type AttendFn = fn(RowArgs<'_>, &mut [f32]);

/// Most query heads one row-kernel call takes.
pub(crate) const MAX_HEADS: usize = 4;

/// The row kernel `isa` uses for heads of `head_dim` values.
fn row_kernel(isa: Isa, head_dim: usize) -> AttendFn {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx512() && head_dim.is_multiple_of(16) {
        return crate::x86_64::avx512::attend_row;
    }
    #[cfg(target_arch = "x86_64")]
    if head_dim.is_multiple_of(8) {
        match isa {
            Isa::Avx2 => return crate::x86_64::avx2::attend_row,
            Isa::Avx512Vnni | Isa::Amx => return crate::x86_64::avx2::attend_row_vl,
            _ => {}
        }
    }
    let _ = (isa, head_dim);
    attend_one
}

/// Consecutive queries of one kv head's heads ([`RowArgs`] each, one output
/// each) through one kernel call where they share key rows; each head gets
/// the bits the row kernel gives it.
pub(crate) type AttendTileFn = fn(&[RowArgs<'_>], &mut [&mut [f32]]);

/// Most queries a tile kernel takes.
const MAX_TILE: usize = 8;
/// Most queries a chunked kernel takes.
const MAX_CHUNKED: usize = 32;
/// Runs whose key and value rows (as f32) span less than this go query by
/// query: their rows stay in L2 from one query to the next anyway.
const CHUNKED_MIN_BYTES: usize = 512 << 10;

/// An ISA's tile kernel, and how many queries of `n` heads it takes (1: no
/// tile for such queries).
#[derive(Clone, Copy)]
struct TileKernel {
    run: AttendTileFn,
    queries: fn(usize) -> usize,
}

/// The tile kernel `isa` has for heads of `head_dim` values.
fn tile_kernel(isa: Isa, head_dim: usize) -> Option<TileKernel> {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx512() && head_dim.is_multiple_of(16) {
        return Some(TileKernel {
            run: crate::x86_64::avx512::attend_tile,
            queries: crate::x86_64::avx512::tile_queries,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && head_dim.is_multiple_of(8) {
        return Some(TileKernel {
            run: crate::x86_64::avx2::attend_tile,
            queries: crate::x86_64::avx2::tile_queries,
        });
    }
    let _ = (isa, head_dim);
    None
}

/// The row, tile and chunked kernels `isa` runs on f32 or f16 rows of
/// `head_dim` values, as addresses: ISAs with the same three compute the
/// same bits by the same code, so tests run one of them.
#[cfg(test)]
pub(crate) fn float_kernels(isa: Isa, head_dim: usize) -> [Option<usize>; 3] {
    [
        Some(row_kernel(isa, head_dim) as usize),
        tile_kernel(isa, head_dim).map(|t| t.run as usize),
        chunked_kernel(isa, head_dim).map(|c| c.run as usize),
    ]
}

/// An ISA's kernel for runs of a prompt's queries that walk their keys
/// chunk by chunk together, and how many queries a run takes at most.
#[derive(Clone, Copy)]
struct ChunkedKernel {
    run: AttendTileFn,
    queries: usize,
}

/// The chunked kernel `isa` has for heads of `head_dim` values.
fn chunked_kernel(isa: Isa, head_dim: usize) -> Option<ChunkedKernel> {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx512() && head_dim.is_multiple_of(16) {
        return Some(ChunkedKernel {
            run: crate::x86_64::avx512::attend_chunked,
            queries: crate::x86_64::avx512::CHUNKED_QUERIES,
        });
    }
    let _ = (isa, head_dim);
    None
}

/// A shared pointer to the output, written at disjoint (query, head) rows by the tasks.
struct Out(*mut f32);
// SAFETY: each task writes only the `head_dim` values of its own (query, head) pairs
// (see `attention`), so sharing the pointer across threads cannot race.
unsafe impl Sync for Out {}

/// `out[t, h] = Σ_j softmax_j(scale · q[t, h]·k[j, g]) · v[j, g]` over `j ∈ keys(t)`,
/// `g` the kv head of `h`. `q`/`out` are `n_q × n_head × head_dim`; `k`/`v`
/// hold at least `max(keys(t).end)` rows of `n_head_kv × head_dim`.
/// A query with an empty key range gets a zero output.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    shape: &AttnShape,
    q: &[f32],
    k: KvRows<'_>,
    v: KvRows<'_>,
    keys: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    attention_on(Isa::selected()?, shape, q, k, v, keys, out, pool)
}

/// [`attention`] over head-major key and value buffers: kv head `g`'s
/// `rows` rows back to back from value `g · rows · head_dim` (so `k` and
/// `v` hold `n_head_kv · rows · head_dim` values). The same bits as
/// [`attention`] over the same rows interleaved.
#[allow(clippy::too_many_arguments)]
pub fn attention_head_major(
    shape: &AttnShape,
    rows: usize,
    q: &[f32],
    k: KvRows<'_>,
    v: KvRows<'_>,
    keys: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    attention_head_major_on(Isa::selected()?, shape, rows, q, k, v, keys, out, pool)
}

/// [`attention_head_major`] with the row kernel of `isa`, which this CPU
/// must execute.
#[allow(clippy::too_many_arguments)]
pub fn attention_head_major_on(
    isa: Isa,
    shape: &AttnShape,
    rows: usize,
    q: &[f32],
    k: KvRows<'_>,
    v: KvRows<'_>,
    keys: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    let layout = KvLayout::HeadMajor { rows };
    attention_layout(isa, shape, layout, q, k, v, keys, out, pool)
}

/// [`attention`] with the row kernel of `isa`, which this CPU must execute.
#[allow(clippy::too_many_arguments)]
pub fn attention_on(
    isa: Isa,
    shape: &AttnShape,
    q: &[f32],
    k: KvRows<'_>,
    v: KvRows<'_>,
    keys: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    attention_layout(isa, shape, KvLayout::Interleaved, q, k, v, keys, out, pool)
}

#[allow(clippy::too_many_arguments)]
fn attention_layout(
    isa: Isa,
    shape: &AttnShape,
    layout: KvLayout,
    q: &[f32],
    k: KvRows<'_>,
    v: KvRows<'_>,
    keys: &(dyn Fn(usize) -> Range<usize> + Sync),
    out: &mut [f32],
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    if !isa.is_available() {
        return Err(KernelError::IsaUnavailable {
            requested: isa.name(),
            missing: isa.features(),
            best: Isa::best_available().name(),
        });
    }
    let AttnShape {
        n_head,
        n_head_kv,
        head_dim: hd,
        ..
    } = *shape;
    if hd == 0 || hd > MAX_HEAD_DIM || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
        return Err(KernelError::AttentionHeads {
            n_head,
            n_head_kv,
            head_dim: hd,
        });
    }
    // A q8_0 side goes through the portable kernel built from the ISA's Q8_0
    // kernels; its rows hold each head in whole blocks.
    let q8_0 = match k.is_q8_0() || v.is_q8_0() {
        true if !hd.is_multiple_of(Q8_0_VALUES) => {
            return Err(KernelError::Q8_0HeadDim { head_dim: hd });
        }
        true => {
            // The query is quantized to Q8_0 blocks: the ISA's quantizer where
            // its Q8_0 weights take Q8_0 activations, else the scalar one.
            let simd = crate::kernels_for(crate::GgmlType::Q8_0, isa)?;
            Some(match simd.activation {
                crate::GgmlType::Q8_0 => simd,
                _ => crate::kernels_for(crate::GgmlType::Q8_0, Isa::Scalar)?,
            })
        }
        false => None,
    };
    let q_row = n_head * hd;
    let kv_row = n_head_kv * hd;
    // Values from one of a kv head's rows to the next, and where head `g`'s
    // first row starts.
    let (stride, head_at) = match layout {
        KvLayout::Interleaved => (kv_row, hd),
        KvLayout::HeadMajor { rows } => (hd, rows * hd),
    };
    let whole = match layout {
        KvLayout::Interleaved => true,
        KvLayout::HeadMajor { rows } => rows.checked_mul(kv_row) == Some(k.len()),
    };
    if !q.len().is_multiple_of(q_row) || q.len() != out.len() || k.len() != v.len() || !whole {
        return Err(KernelError::AttentionBuffers {
            q: q.len(),
            out: out.len(),
            k: k.len(),
            v: v.len(),
            q_row,
            kv_row,
        });
    }
    let n_q = q.len() / q_row;
    let n_kv = k.len() / kv_row;
    for t in 0..n_q {
        let r = keys(t);
        if r.end > n_kv || r.start > r.end {
            return Err(KernelError::KeysOutOfRange {
                query: t,
                start: r.start,
                end: r.end,
                rows: n_kv,
            });
        }
    }
    let group = n_head / n_head_kv;
    // f32 keys with f16 values (or the reverse) take the portable kernel:
    // the SIMD ones read both sides alike.
    let simd_row = match (k, v) {
        (KvRows::F32(_), KvRows::F16(_)) | (KvRows::F16(_), KvRows::F32(_)) => attend_one,
        _ => row_kernel(isa, hd),
    };
    let row = |args: RowArgs<'_>, out: &mut [f32]| match q8_0 {
        Some(kernels) => crate::attention_q8_0::attend(isa, kernels, args, out),
        None => simd_row(args, out),
    };
    // A prompt's queries share key rows: consecutive ones with the same
    // first key go through the tile kernel together where the ISA has one.
    let (tile, chunked) = match (k, v) {
        (KvRows::F32(_), KvRows::F32(_)) | (KvRows::F16(_), KvRows::F16(_)) => {
            (tile_kernel(isa, hd), chunked_kernel(isa, hd))
        }
        _ => (None, None),
    };
    // Tasks: (chunk of queries) × head, or × kv head when there are enough
    // queries to balance the threads that way: then the task's query heads
    // go through the row kernel together (each key row read once for all),
    // and its f16 key and value rows are widened once for all its heads and
    // positions.
    let threads = pool.threads().max(1);
    let per_kv = n_q >= 4 * threads;
    // Each kv head's query heads in `parts` tasks.
    let parts = if per_kv {
        1
    } else {
        group_parts(group, n_head_kv, threads)
    };
    let task_heads = n_head_kv * parts;
    let q_chunk = n_q
        .div_ceil((threads * 4).div_ceil(task_heads).max(1))
        .max(1);
    let n_chunks = n_q.div_ceil(q_chunk);
    let out_ptr = Out(out.as_mut_ptr());
    let out_ptr = &out_ptr;
    pool.run(n_chunks * task_heads, &|task| {
        let (chunk, th) = (task / task_heads, task % task_heads);
        let (g, part) = (th / parts, th % parts);
        let heads = g * group + part * group / parts..g * group + (part + 1) * group / parts;
        let queries = chunk * q_chunk..((chunk + 1) * q_chunk).min(n_q);
        let run_rows = |k: KvRows<'_>, v: KvRows<'_>, off: usize, kv_row: usize, base: usize| {
            let local = |t: usize| {
                let r = keys(t);
                if r.is_empty() {
                    0..0
                } else {
                    r.start - base..r.end - base
                }
            };
            // Query `t`'s heads `h..h + nh`: their arguments, and their output rows.
            let args = |t: usize, h: usize, nh: usize| {
                let o_start = t * q_row + h * hd;
                RowArgs {
                    q: &q[o_start..o_start + nh * hd],
                    head_dim: hd,
                    k,
                    v,
                    off,
                    kv_row,
                    keys: local(t),
                    scale: shape.scale,
                    softcap: shape.softcap,
                }
            };
            let rows_out = |t: usize, h: usize, nh: usize| {
                // SAFETY: `t * q_row + (h + nh) * hd <= n_q * q_row == out.len()`
                // (checked above), and each (t, head) pair is visited by exactly
                // one task, once, so these rows are not aliased.
                unsafe {
                    std::slice::from_raw_parts_mut(out_ptr.0.add(t * q_row + h * hd), nh * hd)
                }
            };
            // The task's heads share the kv head and the key range: up to
            // MAX_HEADS of them per call read each key row once, for up to
            // `tile_queries` consecutive queries where a tile kernel serves.
            let mut h = heads.start;
            while h < heads.end {
                let nh = (heads.end - h).min(MAX_HEADS);
                let per_tile = match tile {
                    Some(tile) if per_kv => (tile.queries)(nh).min(MAX_TILE),
                    _ => 1,
                };
                // Where no tile serves these heads, runs of queries with the
                // same first key walk their keys chunk by chunk together.
                let chunked = chunked.filter(|_| per_kv && per_tile == 1);
                let mut t = queries.start;
                while t < queries.end {
                    // A tile's queries share their first key: where a sequence's
                    // queries end before a tile's worth (a batch of short texts),
                    // they go alone and the next tile starts with the next
                    // sequence's.
                    let first = keys(t).start;
                    let run = match tile {
                        Some(_) if per_tile > 1 && t + per_tile <= queries.end => (t..t + per_tile)
                            .take_while(|&u| keys(u).start == first)
                            .count(),
                        _ => 1,
                    };
                    let run_span =
                        |n: usize| (t..t + n).map(|u| keys(u).end).max().unwrap_or(first) - first;
                    let chunked_run = chunked.map(|c| {
                        let n = (t..(t + c.queries.min(MAX_CHUNKED)).min(queries.end))
                            .take_while(|&u| keys(u).start == first)
                            .count();
                        (c, n)
                    });
                    if let Some((chunked, n)) =
                        chunked_run.filter(|&(_, n)| run_span(n) * hd * 8 > CHUNKED_MIN_BYTES)
                    {
                        let run_args: [RowArgs<'_>; MAX_CHUNKED] =
                            std::array::from_fn(|i| args(t + i.min(n - 1), h, nh));
                        let mut outs: [&mut [f32]; MAX_CHUNKED] = Default::default();
                        for (i, o) in outs.iter_mut().take(n).enumerate() {
                            *o = rows_out(t + i, h, nh);
                        }
                        (chunked.run)(&run_args[..n], &mut outs[..n]);
                        t += n;
                        continue;
                    }
                    match tile {
                        Some(tile) if per_tile > 1 && run == per_tile => {
                            let n = per_tile;
                            let tile_args: [RowArgs<'_>; MAX_TILE] =
                                std::array::from_fn(|i| args(t + i.min(n - 1), h, nh));
                            let mut outs: [&mut [f32]; MAX_TILE] = Default::default();
                            for (i, o) in outs.iter_mut().take(n).enumerate() {
                                *o = rows_out(t + i, h, nh);
                            }
                            (tile.run)(&tile_args[..n], &mut outs[..n]);
                            t += n;
                        }
                        _ => {
                            for u in t..t + run {
                                row(args(u, h, nh), rows_out(u, h, nh));
                            }
                            t += run;
                        }
                    }
                }
                h += nh;
            }
        };
        let span = queries
            .clone()
            .map(keys)
            .filter(|r| !r.is_empty())
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end));
        // Widening pays where the queries share rows (a prompt), not where
        // they read disjoint sequences (a batch of decoding sequences).
        let reads: usize = queries.clone().map(|t| keys(t).len()).sum();
        match (k, v, span) {
            (KvRows::F16(k16), KvRows::F16(v16), Some(span))
                if per_kv && span.len() * hd * 4 <= WIDEN_MAX_BYTES && reads >= 2 * span.len() =>
            {
                WIDENED.with_borrow_mut(|(kw, vw)| {
                    let n = span.len() * hd;
                    for buf in [&mut *kw, &mut *vw] {
                        if buf.len() < n {
                            buf.resize(n.next_multiple_of(WIDEN_STEP * hd), 0.0);
                        }
                    }
                    for (i, j) in span.clone().enumerate() {
                        let at = j * stride + g * head_at;
                        ops::f16_to_f32(&k16[at..at + hd], &mut kw[i * hd..(i + 1) * hd]);
                        ops::f16_to_f32(&v16[at..at + hd], &mut vw[i * hd..(i + 1) * hd]);
                    }
                    // f16 → f32 is exact: the rows get the same bits as from the f16 rows.
                    run_rows(
                        KvRows::F32(&kw[..n]),
                        KvRows::F32(&vw[..n]),
                        0,
                        hd,
                        span.start,
                    );
                });
            }
            _ => run_rows(k, v, g * head_at, stride, 0),
        }
    });
    Ok(())
}

/// How many tasks to split each kv head's `group` query heads into when a
/// call has few queries (decoding): the split whose busiest thread does
/// the least, a task of `r` heads costing `2r + 2` (each head's scores and
/// value sums, plus reading and widening the key and value rows once for
/// all of them), ties going to more, smaller tasks. A task per head would
/// read every key row once per head; one task per group leaves a late
/// worker's share with nobody to take it over.
fn group_parts(group: usize, n_head_kv: usize, threads: usize) -> usize {
    let makespan = |parts: usize| {
        let mut load = [0usize; 64];
        let load = &mut load[..threads.clamp(1, 64)];
        // Largest tasks first, each to the least-loaded thread.
        let (big, small) = (group.div_ceil(parts), group / parts);
        let n_big = group % parts;
        for (r, n) in [(big, n_big), (small, parts - n_big)] {
            for _ in 0..n * n_head_kv {
                *load.iter_mut().min().expect("a thread") += 2 * r + 2;
            }
        }
        load.iter().copied().max().unwrap_or(0)
    };
    // At least two tasks a thread where the heads allow, so a thread that
    // starts late (vCPUs far apart) has its second
    // task taken from it.
    let enough = match threads {
        1 => 1,
        _ => (2 * threads).div_ceil(n_head_kv.max(1)).min(group.max(1)),
    };
    (enough..=group.max(1))
        .filter(|&p| group.div_ceil(p) <= MAX_HEADS)
        .min_by_key(|&p| (makespan(p), std::cmp::Reverse(p)))
        .unwrap_or(group.max(1))
}

/// The portable row kernel (and the reference of the SIMD ones): one query
/// head against its key rows.
fn attend_one(args: RowArgs<'_>, out: &mut [f32]) {
    let hd = args.head_dim;
    for (q, out) in args.q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        attend_head(RowArgs { q, ..args.clone() }, out);
    }
}

/// [`attend_one`] for one head.
fn attend_head(args: RowArgs<'_>, out: &mut [f32]) {
    let hd = args.q.len();
    let (mut kw, mut vw) = ([0.0f32; MAX_HEAD_DIM], [0.0f32; MAX_HEAD_DIM]);
    let mut rows = FloatRows {
        args: &args,
        kw: &mut kw[..hd],
        vw: &mut vw[..hd],
    };
    online_softmax(&args, out, &mut rows);
}

/// One head's f32 or f16 key and value rows, widened as they are read.
struct FloatRows<'a, 'b> {
    args: &'a RowArgs<'b>,
    kw: &'a mut [f32],
    vw: &'a mut [f32],
}

impl HeadRows for FloatRows<'_, '_> {
    fn dot(&mut self, j: usize) -> f32 {
        let RowArgs {
            q, k, off, kv_row, ..
        } = *self.args;
        ops::dot(q, float_row(k, j * kv_row + off, self.kw))
    }

    fn add(&mut self, j: usize, p: f32, out: &mut [f32]) {
        let RowArgs { v, off, kv_row, .. } = *self.args;
        ops::axpy(p, float_row(v, j * kv_row + off, self.vw), out);
    }
}

/// Values `at..at + buf.len()` of f32 or f16 rows as f32: the f32 rows
/// themselves, or `buf` filled. A q8_0 side takes `attention_q8_0`'s own
/// block loops, never this.
#[inline(always)]
pub(crate) fn float_row<'a>(rows: KvRows<'a>, at: usize, buf: &'a mut [f32]) -> &'a [f32] {
    let n = buf.len();
    match rows {
        KvRows::F32(r) => &r[at..at + n],
        KvRows::F16(r) => {
            ops::f16_to_f32(&r[at..at + n], buf);
            buf
        }
        KvRows::Q8_0(_) => unreachable!("q8_0 rows take attention_q8_0's block loops"),
    }
}

/// One head's key and value rows as [`online_softmax`] reads them.
pub(crate) trait HeadRows {
    /// The query's raw dot product with key row `j`.
    fn dot(&mut self, j: usize) -> f32;
    /// [`dot`](Self::dot) with key rows `j0..j0 + out.len()` into `out`.
    #[inline(always)]
    fn dot_block(&mut self, j0: usize, out: &mut [f32]) {
        for (i, s) in out.iter_mut().enumerate() {
            *s = self.dot(j0 + i);
        }
    }
    /// `out += p ·` value row `j`.
    fn add(&mut self, j: usize, p: f32, out: &mut [f32]);
    /// [`add`](Self::add) for value rows `j0..` with the weights `ps`, in
    /// order (an implementation may keep `out` in registers meanwhile).
    #[inline(always)]
    fn add_block(&mut self, j0: usize, ps: &[f32], out: &mut [f32]) {
        for (i, &p) in ps.iter().enumerate() {
            self.add(j0 + i, p, out);
        }
    }
}

/// The online softmax of one head over `args.keys` into `out`, the raw
/// scores scaled and capped here (inlined, so that its callers' loops
/// compile with their target features).
#[inline(always)]
pub(crate) fn online_softmax(args: &RowArgs<'_>, out: &mut [f32], rows: &mut impl HeadRows) {
    let (range, scale, softcap) = (args.keys.clone(), args.scale, args.softcap);
    out.fill(0.0);
    let mut max = f32::NEG_INFINITY;
    let mut sum = 0.0f32;
    let mut scores = [0.0f32; KEY_BLOCK];
    let mut j0 = range.start;
    while j0 < range.end {
        let n = (range.end - j0).min(KEY_BLOCK);
        let mut block_max = f32::NEG_INFINITY;
        rows.dot_block(j0, &mut scores[..n]);
        for s in &mut scores[..n] {
            let mut x = *s * scale;
            if let Some(c) = softcap {
                x = c * (x / c).tanh();
            }
            *s = x;
            block_max = block_max.max(x);
        }
        if block_max > max {
            let rescale = ops::exp_fast(max - block_max);
            if sum > 0.0 {
                ops::scale(out, rescale);
            }
            sum *= rescale;
            max = block_max;
        }
        // The weights in a loop of their own, which vectorizes.
        for s in &mut scores[..n] {
            *s = ops::exp_fast(*s - max);
        }
        for &p in &scores[..n] {
            sum += p;
        }
        rows.add_block(j0, &scores[..n], out);
        j0 += n;
    }
    if sum > 0.0 {
        ops::scale(out, 1.0 / sum);
    }
}

#[cfg(test)]
mod tests;
