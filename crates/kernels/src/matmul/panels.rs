//! The panel strategies: batches through weight panels unpacked per call
//! or stored, and one token over stored panels (see [`crate::panel`] for the
//! layouts).

use super::tasks::{RowTasks, TaperedTasks, panel_chunk_rows};
use super::{Out, Scratch, Weights};
use crate::TypeKernels;
use crate::act_pack::TILE;
use crate::panel::{MANY_TOKENS, PANEL_ROWS, PANEL_TOKENS, PanelFns};
use crate::pool::ThreadPool;

/// Unpacked panels one panel task holds at once, at most (bytes).
const PANEL_SLAB_BYTES: usize = 256 << 10;
/// Prepared activations run over a slab of panels before the next ones, at
/// most (bytes; always at least [`PANEL_TOKENS`] tokens, at most
/// [`PANEL_TOKEN_BLOCK`]). Slab and block together stay inside a 512 KiB L2.
const PANEL_ACT_BLOCK_BYTES: usize = 128 << 10;
/// Tokens run over a slab of panels before the next ones, at most (a
/// multiple of [`PANEL_TOKENS`]).
const PANEL_TOKEN_BLOCK: usize = 128;
const _: () = assert!(PANEL_TOKEN_BLOCK.is_multiple_of(MANY_TOKENS));

/// A cache line, where the prepared rows start.
const LINE: usize = 64;

/// Grows (never shrinks) `buf` to `len` bytes.
fn grow(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// One activation row `x` prepared for `p`'s kernels into `prepared`: in one
/// pass where the ISA has one, else quantized into `act` first.
fn prepare_row(
    k: &TypeKernels,
    p: PanelFns,
    cols: usize,
    x: &[f32],
    act: &mut [u8],
    prepared: &mut [u8],
) {
    match p.quantize_prepared {
        Some(quantize_prepared) => quantize_prepared(x, prepared),
        None => {
            (k.quantize_activation)(x, act);
            (p.prepare)(cols, act, prepared);
        }
    }
}

/// [`super::matmul_many`] for one token over stored panels (shapes checked, any
/// weight types): the activation prepared once per weight type, then
/// [`TaperedTasks`] of whole panels, each streaming its panels through its
/// type's one-token kernel into its rows of the output. Matrices of several
/// types (Q5_0 queries and keys with Q8_0 values) so share one parallel
/// region.
pub(super) fn stored_single<const N: usize>(
    wms: [&Weights<'_>; N],
    x: &[f32],
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let cols = wms[0].cols;
    // `check_shapes` made sure stored panels come with their kernels.
    let fns = wms.map(|w| match (w.kernels.stored, w.kernels.panel) {
        (Some(s), Some(p)) => (s, p),
        _ => unreachable!("stored panels without their kernels"),
    });
    // Matrix `m`'s activation row: where it starts and its bytes (the row
    // prepared for the type's panels, or quantized where its kernel reads
    // that); the first of its type makes it (growing the buffers keeps the
    // rows made before).
    let mut at = [(0usize, 0usize); N];
    let mut total = 0;
    for m in 0..N {
        if let Some(j) = (0..m).find(|&j| std::ptr::eq(wms[j].kernels, wms[m].kernels)) {
            at[m] = at[j];
            continue;
        }
        let (k, (s, p)) = (wms[m].kernels, fns[m]);
        let arow = k.activation_row_bytes(cols);
        let bytes = if s.single_reads_quantized {
            arow
        } else {
            p.act_row_bytes(cols)
        };
        at[m] = (total, bytes);
        total += bytes;
        grow(&mut scratch.buf, arow);
        grow(&mut scratch.packed, total);
        let row = &mut scratch.packed[at[m].0..total];
        if s.single_reads_quantized {
            (k.quantize_activation)(x, row);
        } else {
            prepare_row(k, p, cols, x, &mut scratch.buf[..arow], row);
        }
    }
    let acts = &scratch.packed[..total];
    let tasks = TaperedTasks::new(&wms, PANEL_ROWS, pool.threads());
    let mut ys = ys;
    let outs: [Out<f32>; N] = std::array::from_fn(|m| Out(ys[m].as_mut_ptr()));
    let outs = &outs;
    pool.run(tasks.count(), &|task| {
        // Every matrix's rows are whole panels, so each task's rows are too.
        tasks.for_each(task, |m, r0, r1| {
            let (s, k) = (fns[m].0, wms[m].kernels);
            let wrow = k.weight_row_bytes(cols);
            // SAFETY: `ys[m]` holds `rows` values (one token, `check_shapes`) and
            // `r0 < r1 <= rows`; each task owns rows `r0..r1` of its matrices, so no
            // two tasks write the same element, and `ys` were distinct `&mut` slices.
            let out = unsafe { std::slice::from_raw_parts_mut(outs[m].0.add(r0), r1 - r0) };
            let act = &acts[at[m].0..at[m].0 + at[m].1];
            (s.single)(cols, &wms[m].data[r0 * wrow..r1 * wrow], act, out);
        });
    });
}

/// A batch through panels unpacked once per call (from ggml's rows, or from
/// stored panels that unpack to the type's panels): each task unpacks its
/// slab of panels into its own part of the scratch.
pub(super) fn unpacked_panels<const N: usize>(
    p: PanelFns,
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let cols = wms[0].cols;
    let unpack = Unpack {
        p,
        cols,
        wrow: wms[0].kernels.weight_row_bytes(cols),
        pbytes: p.panel_bytes(cols),
    };
    panel_batch(p, unpack, wms, x, tokens, ys, scratch, pool);
}

/// A batch over stored panels, multiplied where they lie: no buffers.
pub(super) fn stored_panels<const N: usize>(
    p: PanelFns,
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let in_place = InPlace {
        wrow: wms[0].kernels.weight_row_bytes(wms[0].cols),
    };
    panel_batch(p, in_place, wms, x, tokens, ys, scratch, pool);
}

/// Where a panel task finds the panels of a slab of its rows.
trait SlabPanels: Sync {
    /// Scratch bytes a task holds per panel of its slab.
    fn buf_bytes(&self) -> usize;
    /// The panels of rows `s0..s1` of the matrix `w` (whole panels), made
    /// in `buf` where they must be.
    fn panels<'b>(&self, w: &'b [u8], s0: usize, s1: usize, buf: &'b mut [u8]) -> &'b [u8];
}

/// Panels unpacked from the matrix's bytes into the task's buffer.
struct Unpack {
    p: PanelFns,
    cols: usize,
    wrow: usize,
    pbytes: usize,
}

impl SlabPanels for Unpack {
    fn buf_bytes(&self) -> usize {
        self.pbytes
    }
    #[inline(always)]
    fn panels<'b>(&self, w: &'b [u8], s0: usize, s1: usize, buf: &'b mut [u8]) -> &'b [u8] {
        let Self {
            p,
            cols,
            wrow,
            pbytes,
        } = *self;
        for (r, panel) in (s0..s1)
            .step_by(PANEL_ROWS)
            .zip(buf.chunks_exact_mut(pbytes))
        {
            let re = (r + PANEL_ROWS).min(s1);
            (p.unpack)(cols, &w[r * wrow..re * wrow], panel);
        }
        &*buf
    }
}

/// Stored panels, read where they lie.
struct InPlace {
    wrow: usize,
}

impl SlabPanels for InPlace {
    fn buf_bytes(&self) -> usize {
        0
    }
    #[inline(always)]
    fn panels<'b>(&self, w: &'b [u8], s0: usize, s1: usize, _: &'b mut [u8]) -> &'b [u8] {
        // Whole panels (`check_shapes`), each its sixteen rows' bytes.
        &w[s0 * self.wrow..s1 * self.wrow]
    }
}

/// The panel strategies' shared run (shapes checked, one weight type): the
/// activations quantized and prepared 8 tokens per task (padded with zero
/// rows to a multiple of 4), then tasks of whole panels, each taking its
/// slabs' panels from `source`.
#[allow(clippy::too_many_arguments)]
fn panel_batch<const N: usize>(
    p: PanelFns,
    source: impl SlabPanels,
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let k = wms[0].kernels;
    let cols = wms[0].cols;
    let (arow, prow, wrow) = (
        k.activation_row_bytes(cols),
        p.act_row_bytes(cols),
        k.weight_row_bytes(cols),
    );
    let padded = tokens.next_multiple_of(PANEL_TOKENS / 2);
    scratch.reserve(k, cols, tokens);
    // The prepared rows start on a cache line, as their blocks' quants do
    // within them (the tile unit's loads of 64 quants then each read one).
    grow(&mut scratch.packed, padded * prow + LINE);
    let at = scratch.packed.as_ptr().addr().wrapping_neg() % LINE;
    let packed = &mut scratch.packed[at..at + padded * prow];
    packed[tokens * prow..].fill(0);
    let acts_ptr = Out(scratch.buf.as_mut_ptr());
    let prep_ptr = Out(packed.as_mut_ptr());
    let (acts_ptr, prep_ptr) = (&acts_ptr, &prep_ptr);
    let prepare = |u: usize| {
        let (t0, t1) = (u * TILE, ((u + 1) * TILE).min(tokens));
        // SAFETY: `scratch.buf` holds `tokens` rows of `arow` bytes and
        // `scratch.packed` `padded` rows of `prow` (grown above); unit `u` alone
        // touches rows `t0..t1` of each, and nothing else borrows them meanwhile.
        let (rows, prepared) = unsafe {
            (
                std::slice::from_raw_parts_mut(acts_ptr.0.add(t0 * arow), (t1 - t0) * arow),
                std::slice::from_raw_parts_mut(prep_ptr.0.add(t0 * prow), (t1 - t0) * prow),
            )
        };
        for ((xt, at), pt) in x[t0 * cols..t1 * cols]
            .chunks_exact(cols)
            .zip(rows.chunks_exact_mut(arow))
            .zip(prepared.chunks_exact_mut(prow))
        {
            prepare_row(k, p, cols, xt, at, pt);
        }
    };
    let units = tokens.div_ceil(TILE);
    if units >= 2 * pool.threads() {
        pool.run(units, &prepare);
    } else {
        (0..units).for_each(prepare);
    }
    let prepared = &scratch.packed[at..at + padded * prow];
    // Tasks of whole panels; each unpacks into its own panel buffer.
    let total_rows: usize = wms.iter().map(|w| w.rows).sum();
    let chunk = panel_chunk_rows(total_rows, pool.threads());
    let tasks = RowTasks::new(&wms, chunk);
    let n_tasks = tasks.count();
    let pbytes = p.panel_bytes(cols);
    // A task holds a slab of panels at once (at most `PANEL_SLAB_BYTES`) and
    // runs blocks of `PANEL_TOKEN_BLOCK` tokens over the whole slab, so the
    // block's prepared activations stay in cache across its panels. A type
    // with a pair kernel takes an even number of panels, so that it pairs
    // them all.
    let slab = PANEL_SLAB_BYTES / pbytes;
    let slab = if p.pair.is_some() {
        (slab / 2 * 2).max(2)
    } else {
        slab
    };
    let slab = slab.clamp(1, chunk / PANEL_ROWS);
    let task_bytes = slab * source.buf_bytes();
    // A kernel that takes many tokens at once prepares each panel block once
    // per call, so it gets the largest token blocks; the others get blocks
    // whose prepared activations stay in cache across the slab's panels.
    let token_block = if p.many.is_some() {
        PANEL_TOKEN_BLOCK
    } else {
        (PANEL_ACT_BLOCK_BYTES / prow / PANEL_TOKENS * PANEL_TOKENS)
            .clamp(PANEL_TOKENS, PANEL_TOKEN_BLOCK)
    };
    grow(&mut scratch.panels, n_tasks * task_bytes);
    let panels_ptr = Out(scratch.panels.as_mut_ptr());
    let panels_ptr = &panels_ptr;
    let mut ys = ys;
    let outs: [Out<f32>; N] = std::array::from_fn(|m| Out(ys[m].as_mut_ptr()));
    let outs = &outs;
    let calls_per_slab = slab * padded.div_ceil(PANEL_TOKENS);
    pool.run(n_tasks, &|task| {
        let (m, r0, r1) = tasks.locate(task);
        let (w, rows) = (wms[m].data, wms[m].rows);
        // The weight rows one slab further on (in this task, else the first
        // slab of the task this thread most likely takes next), fetched
        // while this slab computes, so that unpacking them does not wait
        // for memory.
        let ahead = |s1: usize| -> &[u8] {
            let (m, a0, a1) = if s1 < r1 {
                (m, s1, r1)
            } else if task + pool.threads() < n_tasks {
                tasks.locate(task + pool.threads())
            } else {
                return &[];
            };
            let a1 = a1.min(a0 + slab * PANEL_ROWS);
            &wms[m].data[a0 * wrow..a1 * wrow]
        };
        let at = panels_ptr.0.wrapping_add(task * task_bytes);
        // SAFETY: `scratch.panels` holds `n_tasks` buffers of `task_bytes` (grown
        // above); task `task` alone uses buffer `task`, which starts at `at`.
        let buf = unsafe { std::slice::from_raw_parts_mut(at, task_bytes) };
        // Room for a pair of panels' outputs, or one panel's for a token block.
        let mut out = [0.0f32; PANEL_ROWS * PANEL_TOKEN_BLOCK];
        for s0 in (r0..r1).step_by(slab * PANEL_ROWS) {
            let s1 = (s0 + slab * PANEL_ROWS).min(r1);
            let slab_panels: &[u8] = source.panels(w, s0, s1, &mut *buf);
            let n_panels = (s1 - s0).div_ceil(PANEL_ROWS);
            let mut prefetch = Prefetch::new(ahead(s1), calls_per_slab);
            for b0 in (0..padded).step_by(token_block) {
                let b1 = (b0 + token_block).min(padded);
                let mut j = 0;
                while j < n_panels {
                    // Two panels at once where the type has a pair kernel.
                    let pair = p.pair.filter(|_| j + 1 < n_panels);
                    let count = if pair.is_some() { 2 } else { 1 };
                    let panels = &slab_panels[j * pbytes..(j + count) * pbytes];
                    let r = s0 + j * PANEL_ROWS;
                    let mut t = b0;
                    while t < b1 {
                        let n = if p.many.is_some() && pair.is_none() && t + MANY_TOKENS <= b1 {
                            (b1 - t) / MANY_TOKENS * MANY_TOKENS
                        } else if t + PANEL_TOKENS <= b1 {
                            PANEL_TOKENS
                        } else {
                            PANEL_TOKENS / 2
                        };
                        // The tile's output lines, fetched while it computes: a
                        // store that misses waits for its line, and outputs too
                        // large for the caches (every token's logits) would
                        // make every store wait.
                        for h in 0..count {
                            for c in 0..n.min(tokens - t) {
                                let at = (t + c) * rows + r + h * PANEL_ROWS;
                                prefetch_line(outs[m].0.wrapping_add(at).cast());
                            }
                        }
                        let acts = &prepared[t * prow..(t + n) * prow];
                        match pair {
                            Some(f) if n == PANEL_TOKENS => {
                                f(cols, panels, acts, &mut out[..2 * PANEL_ROWS * n])
                            }
                            _ => {
                                let f = match (n, p.many) {
                                    (PANEL_TOKENS, _) => p.wide,
                                    (n, Some(many)) if n % MANY_TOKENS == 0 => many,
                                    _ => p.narrow,
                                };
                                for (panel, out) in panels
                                    .chunks_exact(pbytes)
                                    .zip(out.chunks_exact_mut(PANEL_ROWS * n))
                                {
                                    f(cols, panel, acts, out);
                                }
                            }
                        }
                        for (h, out) in out.chunks_exact(PANEL_ROWS * n).take(count).enumerate() {
                            prefetch.step();
                            let r = r + h * PANEL_ROWS;
                            let re = (r + PANEL_ROWS).min(s1);
                            for c in 0..n.min(tokens - t) {
                                // A whole panel's row of outputs is one fixed-size copy
                                // (a vector store rather than a `memcpy` call).
                                let v = &out[PANEL_ROWS * c..PANEL_ROWS * (c + 1)];
                                let dst = outs[m].0.wrapping_add((t + c) * rows + r);
                                if re - r == PANEL_ROWS {
                                    let v: &[f32; PANEL_ROWS] = v.try_into().unwrap();
                                    // SAFETY: as below, for a whole panel of rows.
                                    unsafe { dst.cast::<[f32; PANEL_ROWS]>().write_unaligned(*v) };
                                    continue;
                                }
                                let v = &v[..re - r];
                                // SAFETY: token `t + c < tokens` and rows `r..re` inside
                                // `r0..r1`, so the run lies in `ys[m]` (`tokens * rows`
                                // values, checked by `check_shapes`); each task owns its
                                // rows of one matrix for every token, so no two tasks
                                // write the same element, and `ys` was a set of distinct
                                // `&mut` slices.
                                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()) }
                            }
                        }
                        t += n;
                    }
                    j += count;
                }
            }
        }
    });
}

/// Hints the cache line holding `p` into L1 (a no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint that never faults, whatever the address;
    // SSE is part of x86-64.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Walks a byte range a cache line at a time over a number of steps,
/// hinting each line into the core's caches (a no-op off x86-64).
struct Prefetch {
    at: *const u8,
    end: *const u8,
    lines_per_step: usize,
}

impl Prefetch {
    const LINE: usize = 64;

    fn new(bytes: &[u8], steps: usize) -> Self {
        let lines = bytes.len().div_ceil(Self::LINE);
        Self {
            at: bytes.as_ptr(),
            end: bytes.as_ptr().wrapping_add(bytes.len()),
            lines_per_step: lines.div_ceil(steps.max(1)),
        }
    }

    #[inline]
    fn step(&mut self) {
        for _ in 0..self.lines_per_step {
            if self.at >= self.end {
                return;
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint that never faults, and `at` lies
            // inside the slice given to `new`; SSE is part of x86-64.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T1>(self.at.cast());
            }
            self.at = self.at.wrapping_add(Self::LINE);
        }
    }
}
