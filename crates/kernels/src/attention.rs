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
//! go through the ISA's tile kernel together where it has one (AVX-512):
//! the key blocks they all attend are read once for all their heads. A
//! row's result depends only on its query, its key range and the ISA, never
//! on the other rows or heads of the call, so a token's output is the same
//! alone or inside a batch.

use std::ops::Range;

use half::f16;

use crate::ops;
use crate::pool::ThreadPool;
use crate::{Isa, KernelError};

/// Keys scored per softmax update.
pub(crate) const KEY_BLOCK: usize = 32;
/// Largest head dimension supported.
pub const MAX_HEAD_DIM: usize = 512;
/// Most keys a task widens from f16 at once (longer spans are widened per row
/// as they are read: the same values either way).
const WIDEN_MAX_KEYS: usize = 4096;
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
    /// Offset of the kv head inside each key/value row.
    pub off: usize,
    /// Values per key/value row (`n_head_kv × head_dim`).
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
    if isa == Isa::Avx512Vnni && head_dim.is_multiple_of(16) {
        return crate::x86_64::avx512::attend_row;
    }
    #[cfg(target_arch = "x86_64")]
    if head_dim.is_multiple_of(8) {
        match isa {
            Isa::Avx2 => return crate::x86_64::avx2::attend_row,
            Isa::Avx512Vnni => return crate::x86_64::avx2::attend_row_vl,
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
const MAX_TILE: usize = 4;

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
    if isa == Isa::Avx512Vnni && head_dim.is_multiple_of(16) {
        return Some(TileKernel {
            run: crate::x86_64::avx512::attend_tile,
            queries: crate::x86_64::avx512::tile_queries,
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
    if !q.len().is_multiple_of(q_row) || q.len() != out.len() || k.len() != v.len() {
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
    let tile = match (k, v) {
        (KvRows::F32(_), KvRows::F32(_)) | (KvRows::F16(_), KvRows::F16(_)) => tile_kernel(isa, hd),
        _ => None,
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
                let mut t = queries.start;
                while t < queries.end {
                    match tile {
                        Some(tile) if per_tile > 1 && t + per_tile <= queries.end => {
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
                            row(args(t, h, nh), rows_out(t, h, nh));
                            t += 1;
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
                if per_kv && span.len() <= WIDEN_MAX_KEYS && reads >= 2 * span.len() =>
            {
                WIDENED.with_borrow_mut(|(kw, vw)| {
                    let n = span.len() * hd;
                    for buf in [&mut *kw, &mut *vw] {
                        if buf.len() < n {
                            buf.resize(n.next_multiple_of(WIDEN_STEP * hd), 0.0);
                        }
                    }
                    for (i, j) in span.clone().enumerate() {
                        let at = j * kv_row + g * hd;
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
            _ => run_rows(k, v, g * hd, kv_row, 0),
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
mod tests {
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
                        let mut x =
                            qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() * shape.scale;
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
        for (nh, hd) in [(1usize, 16usize), (4, 32), (3, 16), (2, 48)] {
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
            // Every query attends the first key block, some the second's start.
            let keys = |t: usize| 0..t + 34;
            for (ty, kr, vr) in [
                ("f32", KvRows::F32(&k), KvRows::F32(&v)),
                ("f16", KvRows::F16(&kh), KvRows::F16(&vh)),
            ] {
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
                        "{nh} heads {ty}, query {t}"
                    );
                }
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

    /// A causal prompt's queries go through tile kernels several at a time
    /// where the ISA has them (sharing the key blocks they all attend): each
    /// query's rows are the bits it gets alone, for groups of one to seven
    /// heads (tiled groups of one and two, untiled ones, groups split four
    /// and three), f32 and f16 rows, soft-capped or not.
    #[test]
    fn prompt_tiles_give_each_query_its_bits_alone() {
        for (n_head, hd, softcap) in [
            (1, 64, None),
            (2, 32, Some(0.5)),
            (3, 48, None),
            (4, 64, None),
            (5, 16, None),
            (7, 128, None),
        ] {
            let shape = AttnShape {
                n_head: 2 * n_head,
                n_head_kv: 2,
                head_dim: hd,
                scale: 0.125,
                softcap,
            };
            let (n, q_row, kv_row) = (75, 2 * n_head * hd, 2 * hd);
            let q = pseudo(n * q_row, 21);
            let k: Vec<f32> = pseudo(n * kv_row, 22).iter().map(|x| 4.0 * x).collect();
            let v = pseudo(n * kv_row, 23);
            let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
            let vh: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                for (kr, vr) in [
                    (KvRows::F32(&k), KvRows::F32(&v)),
                    (KvRows::F16(&kh), KvRows::F16(&vh)),
                ] {
                    // Causal, after 3 tokens of an earlier turn.
                    let keys = |t: usize| 0..t + 4;
                    let nq = n - 3;
                    let qs = &q[..nq * q_row];
                    let mut all = vec![f32::NAN; qs.len()];
                    attention_on(isa, &shape, qs, kr, vr, &keys, &mut all, &Rayon).unwrap();
                    for t in 0..nq {
                        let mut one = vec![f32::NAN; q_row];
                        let qt = &q[t * q_row..(t + 1) * q_row];
                        attention_on(isa, &shape, qt, kr, vr, &|_| 0..t + 4, &mut one, &Serial)
                            .unwrap();
                        assert_eq!(
                            &all[t * q_row..(t + 1) * q_row],
                            &one[..],
                            "{isa} {n_head} heads of {hd}, query {t}"
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
}
