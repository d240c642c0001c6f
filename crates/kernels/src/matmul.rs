//! `y[t][r] = W[r] · x[t]`: a quantized weight matrix (`rows` rows of `cols`
//! values, each row whole blocks) times a batch of `T` f32 activation rows.
//!
//! All activations are quantized once per call into the caller's
//! [`Scratch`]; output rows are split into chunks run on a [`ThreadPool`].
//! Where the ISA has tiles ([`TypeKernels::tiles`]), groups of 16 or 8 tokens
//! (and padded groups for a remainder, see `TilePlan`) go through the
//! 1×16/1×12/1×8/1×4 tiles, which unpack a weight block once for all their
//! columns; otherwise groups
//! of 4 through [`TypeKernels::vec_dot_x4`]. The rest (and `T = 1`, the
//! memory-bound decode case) stream rows through [`TypeKernels::vec_dot`].
//! Batches of [`PanelFns::min_tokens`] or more take the weight panels where the
//! ISA has them ([`TypeKernels::panel`]): each task unpacks its rows sixteen
//! at a time, once per call, and multiplies them against every token.
//! Once the scratch is large enough, a call allocates nothing.

use crate::pack::{self, TILE};
use crate::panel::{PANEL_ROWS, PANEL_TOKENS, PanelFns};
use crate::pool::ThreadPool;
use crate::{KernelError, TypeKernels};

/// Unpacked panels one panel task holds at once, at most (bytes).
const PANEL_SLAB_BYTES: usize = 256 << 10;
/// Prepared activations run over a slab of panels before the next ones, at
/// most (bytes; always at least [`PANEL_TOKENS`] tokens, at most
/// [`PANEL_TOKEN_BLOCK`]). Slab and block together stay inside a 512 KiB L2.
const PANEL_ACT_BLOCK_BYTES: usize = 128 << 10;
/// Tokens run over a slab of panels before the next ones, at most (a
/// multiple of [`PANEL_TOKENS`]).
const PANEL_TOKEN_BLOCK: usize = 128;

/// Reusable buffer for the quantized activations of one call.
#[derive(Debug, Default)]
pub struct Scratch {
    buf: Vec<u8>,
    /// Activations packed for the tiles, or prepared for the panels.
    packed: Vec<u8>,
    /// Each panel task's unpacked weight rows.
    panels: Vec<u8>,
}

impl Scratch {
    pub fn new() -> Self {
        Self::default()
    }
    /// A scratch already large enough for `tokens` activation rows of `cols` values.
    pub fn with_capacity(k: &TypeKernels, cols: usize, tokens: usize) -> Self {
        let mut s = Self::new();
        s.reserve(k, cols, tokens);
        s
    }
    /// Grows (never shrinks) the buffers to at least `bytes` of activations
    /// (and as much again for their packed copy).
    pub fn reserve_bytes(&mut self, bytes: usize) {
        if self.buf.len() < bytes {
            self.buf.resize(bytes, 0);
        }
        if self.packed.len() < bytes {
            self.packed.resize(bytes, 0);
        }
    }
    /// Grows (never shrinks) the buffer for `tokens` rows of `cols` values.
    pub fn reserve(&mut self, k: &TypeKernels, cols: usize, tokens: usize) {
        let need = k.activation_row_bytes(cols) * tokens;
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
    }
}

/// A buffer shared by the tasks of one parallel region, each writing only
/// its own disjoint part (the output's rows, a unit's activation rows).
struct Out<T>(*mut T);
// SAFETY: every task writes a part of the buffer no other task touches (see
// `matmul_many`'s uses), so sharing the pointer across threads cannot race.
unsafe impl<T> Sync for Out<T> {}

/// Rows per task of a multi-token call: enough tasks to balance the
/// threads, each a whole number of eight-row groups where there are eight
/// rows, and at most 256 rows, whose weights stay in cache while the task
/// runs them against each group of tokens.
fn chunk_rows(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads.max(1) * 4)
        .next_multiple_of(8)
        .clamp(8, 256)
        .min(rows.max(1))
}

/// Rows per panel task: whole panels, about four tasks per thread, the size
/// (down to half that) whose tasks the threads share most evenly, since a
/// task is long (576 rows in tasks of 80 left one thread 320 rows to the
/// other's 256; tasks of 48 split them 288/288).
fn panel_chunk_rows(rows: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let panels = rows.div_ceil(PANEL_ROWS).max(1);
    let target = panels.div_ceil(threads * 4);
    // The most panels any thread runs when tasks of `c` are claimed in turn.
    let busiest = |c: usize| panels.div_ceil(c).div_ceil(threads) * c;
    let best = (target.div_ceil(2)..=target)
        .rev()
        .min_by_key(|&c| busiest(c))
        .unwrap_or(1);
    best * PANEL_ROWS
}

/// A weight matrix: `rows` rows of `cols` values of type `kernels.weight`.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    pub kernels: &'a TypeKernels,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
}

/// How a matrix's bytes are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// ggml's: row after row of blocks, as in the file.
    #[default]
    Rows,
    /// Sixteen rows at a time as stored panels
    /// ([`crate::panel::StoredPanelFns::store`]): only for weight types whose
    /// kernels have `stored`, and a whole number of panels.
    Panels,
}

/// Computes `y[t * rows + r] = W[r] · x[t * cols ..]` for `t < tokens`, `r < rows`:
/// `x` is `tokens × cols` f32, `y` is `tokens × rows`.
pub fn matmul(
    wm: &Weights<'_>,
    x: &[f32],
    tokens: usize,
    y: &mut [f32],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    matmul_many([wm], x, tokens, [y], scratch, pool)
}

/// [`matmul`] for several matrices over the same input (Q/K/V, gate/up):
/// where they share a weight type the input is quantized once and all of
/// their rows are split over one parallel region; otherwise they run one by one.
pub fn matmul_many<const N: usize>(
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) -> Result<(), KernelError> {
    for (wm, y) in wms.iter().zip(&ys) {
        check_shapes(wm, x, tokens, y)?;
    }
    // Outputs must not alias one another (they are distinct `&mut`, so they cannot).
    let k = wms[0].kernels;
    let cols = wms[0].cols;
    let layout = wms[0].layout;
    if tokens == 1
        && cols > 0
        && wms
            .iter()
            .all(|w| w.layout == Layout::Panels && w.cols == cols)
    {
        // Whatever their types: one region for all of them.
        stored_single(wms, x, ys, scratch, pool);
        return Ok(());
    }
    if wms
        .iter()
        .any(|w| w.kernels.weight != k.weight || w.cols != cols || w.layout != layout)
    {
        for (wm, y) in wms.into_iter().zip(ys) {
            matmul_many([wm], x, tokens, [y], scratch, pool)?;
        }
        return Ok(());
    }
    if cols == 0 {
        // Empty dot products.
        for y in ys {
            y.fill(0.0);
        }
        return Ok(());
    }
    if layout == Layout::Panels {
        // `check_shapes` made sure the kernels have both.
        let (Some(stored), Some(panel)) = (k.stored, k.panel) else {
            unreachable!("stored panels without their kernels")
        };
        if let Some(unpack) = stored
            .unpack
            .filter(|_| tokens >= crate::panel::STORED_UNPACK_TOKENS)
        {
            // Unpacked per call like the file's rows, from the stored bytes.
            let p = PanelFns { unpack, ..panel };
            panel_matmul(p, false, wms, x, tokens, ys, scratch, pool);
        } else {
            // Nothing to unpack: stored panels take every batch.
            panel_matmul(
                stored.panel_fns(panel),
                true,
                wms,
                x,
                tokens,
                ys,
                scratch,
                pool,
            );
        }
        return Ok(());
    }
    if let Some(panel) = k.panel.filter(|p| tokens >= p.min_tokens) {
        panel_matmul(panel, false, wms, x, tokens, ys, scratch, pool);
        return Ok(());
    }
    let arow = k.activation_row_bytes(cols);
    let wrow = k.weight_row_bytes(cols);
    scratch.reserve(k, cols, tokens);
    let tiles = k
        .tiles
        .filter(|_| tokens >= 2 && pack::needs_packing(k.activation));
    let plan = TilePlan::new(tiles, tokens);
    let packed_len = plan.packed_bytes(k.activation, cols);
    if scratch.packed.len() < packed_len {
        scratch.packed.resize(packed_len, 0);
    }
    // Quantize (and pack) the activations, one unit (a tile's group of
    // tokens, or 8 tokens without tiles) per task: each unit writes only its
    // own rows and its own packed group, so the units run in parallel.
    let acts_ptr = Out(scratch.buf.as_mut_ptr());
    let packed_ptr = Out(scratch.packed.as_mut_ptr());
    let (acts_ptr, packed_ptr) = (&acts_ptr, &packed_ptr);
    let plan = &plan;
    let prepare = |u: usize| {
        let g = plan.unit(u, k.activation, cols);
        // SAFETY: `scratch.buf` holds `tokens` rows of `arow` bytes (reserved above);
        // unit `u` alone touches its rows `g.tokens`, and nothing else holds a
        // reference into the buffer while the units run.
        let rows = unsafe {
            std::slice::from_raw_parts_mut(
                acts_ptr.0.add(g.tokens.start * arow),
                g.tokens.len() * arow,
            )
        };
        for (xt, at) in x[g.tokens.start * cols..g.tokens.end * cols]
            .chunks_exact(cols)
            .zip(rows.chunks_exact_mut(arow))
        {
            (k.quantize_activation)(xt, at);
        }
        if g.width > 0 {
            // SAFETY: `scratch.packed` holds `packed_len` bytes (resized above), and the
            // units' packed ranges are disjoint parts of it.
            let out = unsafe {
                std::slice::from_raw_parts_mut(packed_ptr.0.add(g.packed.start), g.packed.len())
            };
            let shift = tiles.map_or(0, |t| t.sum_shift);
            pack::pack(k.activation, cols, g.width, rows, out, shift);
        }
    };
    let units = plan.units();
    if units >= 2 * pool.threads() {
        pool.run(units, &prepare);
    } else {
        (0..units).for_each(prepare);
    }
    let acts = &scratch.buf[..arow * tokens];
    let packed = &scratch.packed[..packed_len];
    let mut ys = ys;
    let outs: [Out<f32>; N] = std::array::from_fn(|m| Out(ys[m].as_mut_ptr()));
    let outs = &outs;
    // Rows `r0..r1` of matrix `m` for every token.
    let run_rows = |m: usize, r0: usize, r1: usize| {
        let (w, rows) = (wms[m].data, wms[m].rows);
        let a = |t: usize| &acts[t * arow..(t + 1) * arow];
        let out = &outs[m];
        let store = |t: usize, r: usize, v: f32| {
            debug_assert!(t < tokens && r < rows);
            // SAFETY: `t < tokens` and `r0 <= r < r1 <= rows`, so the index is inside
            // `ys[m]` (`tokens * rows` values, checked by `check_shapes`); each call owns
            // rows `r0..r1` of matrix `m` for every token (no two tasks share a row of a
            // matrix), so no two write the same element, and `ys` was a set of distinct
            // `&mut` slices.
            unsafe { *out.0.add(t * rows + r) = v }
        };
        if let Some(tiles) = tiles {
            // Groups outermost: the task's weight rows stay in cache across groups.
            for u in 0..plan.tile_units() {
                let g = plan.unit(u, k.activation, cols);
                let group = &packed[g.packed.clone()];
                for r in r0..r1 {
                    let wr = &w[r * wrow..(r + 1) * wrow];
                    let mut v = [0.0f32; 2 * TILE];
                    // The plan makes 16- and 12-wide groups only where those tiles exist.
                    match (g.width, tiles.x16, tiles.x12) {
                        (16, Some(x16), _) => v = x16(cols, wr, group),
                        (12, _, Some(x12)) => v[..12].copy_from_slice(&x12(cols, wr, group)),
                        (8, ..) => v[..TILE].copy_from_slice(&(tiles.x8)(cols, wr, group)),
                        (4, ..) => v[..TILE / 2].copy_from_slice(&(tiles.x4)(cols, wr, group)),
                        (width, ..) => unreachable!("no tile for groups of {width}"),
                    }
                    for (c, &v) in v[..g.tokens.len()].iter().enumerate() {
                        store(g.tokens.start + c, r, v);
                    }
                }
            }
        }
        // Tokens past the tile groups: in fours through the x4 kernel where
        // there is one, then one at a time (decoding), eight rows at a time
        // where the type has an eight-row kernel.
        let grouped = plan.grouped_tokens;
        let singles = match k.vec_dot_x4 {
            Some(_) => grouped + (tokens - grouped) / 4 * 4,
            None => grouped,
        };
        if let Some(x4) = k.vec_dot_x4 {
            for r in r0..r1 {
                let wr = &w[r * wrow..(r + 1) * wrow];
                for t in (grouped..singles).step_by(4) {
                    let v = x4(cols, wr, [a(t), a(t + 1), a(t + 2), a(t + 3)]);
                    for (c, v) in v.into_iter().enumerate() {
                        store(t + c, r, v);
                    }
                }
            }
        }
        for t in singles..tokens {
            let mut r = r0;
            if let Some(rows8) = k.vec_dot_rows8 {
                while r + 8 <= r1 {
                    let v = rows8(cols, &w[r * wrow..(r + 8) * wrow], a(t));
                    for (i, v) in v.into_iter().enumerate() {
                        store(t, r + i, v);
                    }
                    r += 8;
                }
            }
            for r in r..r1 {
                store(t, r, (k.vec_dot)(cols, &w[r * wrow..(r + 1) * wrow], a(t)));
            }
        }
    };
    if tokens == 1 {
        let tasks = TaperedTasks::new(&wms, 8, pool.threads());
        pool.run(tasks.count(), &|task| tasks.for_each(task, run_rows));
    } else {
        let total_rows: usize = wms.iter().map(|w| w.rows).sum();
        let tasks = RowTasks::new(&wms, chunk_rows(total_rows, pool.threads()));
        pool.run(tasks.count(), &|task| {
            let (m, r0, r1) = tasks.locate(task);
            run_rows(m, r0, r1)
        });
    }
    Ok(())
}

/// The row chunks of a call's matrices as tasks: one chunk size over all of
/// them; task ids run through matrix 0's chunks, then 1's, …
struct RowTasks<const N: usize> {
    chunk: usize,
    rows: [usize; N],
    tasks_of: [usize; N],
}

impl<const N: usize> RowTasks<N> {
    fn new(wms: &[&Weights<'_>; N], chunk: usize) -> Self {
        let rows = wms.map(|w| w.rows);
        Self {
            chunk,
            rows,
            tasks_of: rows.map(|r| r.div_ceil(chunk)),
        }
    }
    fn count(&self) -> usize {
        self.tasks_of.iter().sum()
    }
    /// Task `task`'s matrix and rows `r0..r1`.
    fn locate(&self, task: usize) -> (usize, usize, usize) {
        let (mut m, mut t) = (0, task);
        while t >= self.tasks_of[m] {
            t -= self.tasks_of[m];
            m += 1;
        }
        let r0 = t * self.chunk;
        (m, r0, (r0 + self.chunk).min(self.rows[m]))
    }
}

/// Tasks per thread of a single-token call ([`TaperedTasks`]), at least.
/// Each task's claim is a locked read-modify-write (it waits for the
/// thread's earlier stores and holds back its later loads), and a task's
/// kernel starts anew: with the vCPUs far apart, three tasks a share
/// instead of ten cut a thread's busy time in a layer's regions by 1-5 µs
/// while the finish skew grew 0.4-1 µs (decoding's matmul regions 9-14 %
/// shorter; in close spells 3-6 %).
const TAPERED_TASKS: usize = 3;
/// A single-token call's last tasks stay within about this many units:
/// shares of more than `TAPERED_TASKS² ·` this many units get more tasks.
const LAST_TASK_UNITS: usize = 4;

/// The tasks of a single-token call: the rows of all its matrices, as if
/// one after the other, in whole `unit`-row steps, an even share per thread,
/// each share cut into `K` tasks that shrink toward its end (the first
/// about 2/K of it, the last about 1/K² of it: `K` is [`TAPERED_TASKS`], or
/// more where that would leave last tasks of more than
/// [`LAST_TASK_UNITS`]). A thread still streams its share as one run, and a
/// thread that finishes first takes the other's small last tasks, so the
/// threads end within about one small task of each other: with even tasks
/// the last one in flight (an eighth of a share) had left one thread idle
/// 1.5-2.8 µs per large matmul, and with ten tasks for Gemma 3's LM head
/// (8192 panels a thread) the last ones, 82 panels each, left it idle about
/// 40 µs a token. Few tasks, since each claim costs (see [`TAPERED_TASKS`]).
struct TaperedTasks<const N: usize> {
    unit: usize,
    units: usize,
    threads: usize,
    /// `K`: tasks per thread.
    per_thread: usize,
    rows: [usize; N],
}

impl<const N: usize> TaperedTasks<N> {
    fn new(wms: &[&Weights<'_>; N], unit: usize, threads: usize) -> Self {
        let rows = wms.map(|w| w.rows);
        let total: usize = rows.iter().sum();
        let (units, threads) = (total.div_ceil(unit), threads.max(1));
        // The last task is about share / K² units.
        let share = units.div_ceil(threads);
        let per_thread = TAPERED_TASKS.max(share.div_ceil(LAST_TASK_UNITS).isqrt() + 1);
        Self {
            unit,
            units,
            threads,
            per_thread,
            rows,
        }
    }
    fn count(&self) -> usize {
        self.threads * self.per_thread
    }
    /// Calls `f(matrix, r0, r1)` for each matrix's rows in task `task` (none
    /// for an empty task; several where it spans the end of a matrix).
    fn for_each(&self, task: usize, mut f: impl FnMut(usize, usize, usize)) {
        let k_tasks = self.per_thread;
        let (j, k) = (task / k_tasks, task % k_tasks);
        let start = j * self.units / self.threads;
        let share = (j + 1) * self.units / self.threads - start;
        // Boundary `i` of the share: share · (1 − (1 − i/K)²), rounded down
        // (so the last task is not empty), so task sizes fall linearly from
        // about 2/K of the share to a unit or a few.
        let edge = |i: usize| {
            let left = k_tasks - i;
            share - (share * left * left).div_ceil(k_tasks * k_tasks)
        };
        let (mut g0, g1) = (
            (start + edge(k)) * self.unit,
            (start + edge(k + 1)) * self.unit,
        );
        let mut base = 0;
        for (m, &rows) in self.rows.iter().enumerate() {
            let end = base + rows;
            if g0 < g1 && g0 < end {
                let r1 = g1.min(end);
                f(m, g0 - base, r1 - base);
                g0 = r1;
            }
            base = end;
        }
    }
}

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

/// [`matmul_many`] for one token over stored panels (shapes checked, any
/// weight types): the activation prepared once per weight type, then
/// [`TaperedTasks`] of whole panels, each streaming its panels through its
/// type's one-token kernel into its rows of the output. Matrices of several
/// types (Gemma 3's Q5_0 queries and keys with Q8_0 values) so share one
/// parallel region.
fn stored_single<const N: usize>(
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

/// [`matmul_many`] through weight panels (shapes checked, one weight type):
/// the activations quantized and prepared 8 tokens per task (padded with
/// zero rows to a multiple of 4), then tasks of whole panels, each
/// unpacking its panels into its own part of the scratch.
#[allow(clippy::too_many_arguments)]
fn panel_matmul<const N: usize>(
    p: PanelFns,
    stored: bool,
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
    grow(&mut scratch.packed, padded * prow);
    scratch.packed[tokens * prow..padded * prow].fill(0);
    let acts_ptr = Out(scratch.buf.as_mut_ptr());
    let prep_ptr = Out(scratch.packed.as_mut_ptr());
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
    let prepared = &scratch.packed[..padded * prow];
    // Tasks of whole panels; each unpacks into its own panel buffer.
    let total_rows: usize = wms.iter().map(|w| w.rows).sum();
    let chunk = panel_chunk_rows(total_rows, pool.threads());
    let tasks = RowTasks::new(&wms, chunk);
    let n_tasks = tasks.count();
    let pbytes = p.panel_bytes(cols);
    // A task holds a slab of panels at once (at most `PANEL_SLAB_BYTES`) and
    // runs blocks of `PANEL_TOKEN_BLOCK` tokens over the whole slab, so the
    // block's prepared activations stay in cache across its panels.
    let slab = (PANEL_SLAB_BYTES / pbytes).clamp(1, chunk / PANEL_ROWS);
    // Stored panels are multiplied where they lie: no buffers.
    let task_bytes = if stored { 0 } else { slab * pbytes };
    let token_block = (PANEL_ACT_BLOCK_BYTES / prow / PANEL_TOKENS * PANEL_TOKENS)
        .clamp(PANEL_TOKENS, PANEL_TOKEN_BLOCK);
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
        let mut out = [0.0f32; PANEL_ROWS * PANEL_TOKENS];
        for s0 in (r0..r1).step_by(slab * PANEL_ROWS) {
            let s1 = (s0 + slab * PANEL_ROWS).min(r1);
            let starts = (s0..s1).step_by(PANEL_ROWS);
            let slab_panels: &[u8] = if stored {
                // Whole panels (`check_shapes`), each its sixteen rows' bytes.
                &w[s0 * wrow..s1 * wrow]
            } else {
                for (r, panel) in starts.clone().zip(buf.chunks_exact_mut(pbytes)) {
                    let re = (r + PANEL_ROWS).min(s1);
                    (p.unpack)(cols, &w[r * wrow..re * wrow], panel);
                }
                &*buf
            };
            let mut prefetch = Prefetch::new(ahead(s1), calls_per_slab);
            for b0 in (0..padded).step_by(token_block) {
                let b1 = (b0 + token_block).min(padded);
                for (r, panel) in starts.clone().zip(slab_panels.chunks_exact(pbytes)) {
                    let re = (r + PANEL_ROWS).min(s1);
                    let mut t = b0;
                    while t < b1 {
                        let (n, f) = if t + PANEL_TOKENS <= b1 {
                            (PANEL_TOKENS, p.wide)
                        } else {
                            (PANEL_TOKENS / 2, p.narrow)
                        };
                        // The tile's output lines, fetched while it computes: a
                        // store that misses waits for its line, and outputs too
                        // large for the caches (every token's logits) cost
                        // 512-token calls a fifth of their time in those waits.
                        for c in 0..n.min(tokens - t) {
                            prefetch_line(outs[m].0.wrapping_add((t + c) * rows + r).cast());
                        }
                        f(
                            cols,
                            panel,
                            &prepared[t * prow..(t + n) * prow],
                            &mut out[..PANEL_ROWS * n],
                        );
                        prefetch.step();
                        for c in 0..n.min(tokens - t) {
                            // A whole panel's row of outputs is one fixed-size copy (a
                            // vector store rather than a `memcpy` call).
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
                            // rows of one matrix for every token, so no two tasks write
                            // the same element, and `ys` was a set of distinct `&mut`
                            // slices.
                            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()) }
                        }
                        t += n;
                    }
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

/// How a call's tokens are grouped for the tiles: groups of 16 where the
/// ISA has a 1×16 tile, else of 8; then the rest as at most two more groups,
/// padded with zero rows whose extra columns are dropped (a tile gives each
/// column the row kernel's bits, so padding changes nothing): 13 to 15
/// tokens as one padded group of 16, 9 to 12 as one of 12 where the 1×12 tile
/// exists (else 8 and the rest), 5 to 8 as one of 8, 2 to 4 as one of 4.
/// Tokens past the groups (a lone last token, or all of them without tiles)
/// take the row kernels.
struct TilePlan {
    wide: usize,
    wide_groups: usize,
    /// The groups after the wide ones: (width, real tokens); width 0: none.
    tail: [(usize, usize); 2],
    /// Tokens inside groups; the rest take the row kernels.
    grouped_tokens: usize,
    tokens: usize,
}

/// One unit of a [`TilePlan`]: its tokens, its group width (0: not packed)
/// and where its packed group lies.
struct Unit {
    tokens: std::ops::Range<usize>,
    width: usize,
    packed: std::ops::Range<usize>,
}

impl TilePlan {
    fn new(tiles: Option<crate::table::TileFns>, tokens: usize) -> Self {
        let Some(tiles) = tiles else {
            return Self {
                wide: TILE,
                wide_groups: 0,
                tail: [(0, 0); 2],
                grouped_tokens: 0,
                tokens,
            };
        };
        let wide = if tiles.x16.is_some() { 2 * TILE } else { TILE };
        let wide_groups = tokens / wide;
        let mut rem = tokens - wide_groups * wide;
        let mut tail = [(0, 0); 2];
        for slot in &mut tail {
            let width = match rem {
                0 | 1 => break,
                2..=4 => TILE / 2,
                5..=8 => TILE,
                9..=12 if tiles.x12.is_some() => 12,
                // Only with a 1×16 tile (else `rem < 8`).
                13.. => 2 * TILE,
                _ => TILE,
            };
            let taken = rem.min(width);
            *slot = (width, taken);
            rem -= taken;
        }
        Self {
            wide,
            wide_groups,
            tail,
            grouped_tokens: tokens - rem,
            tokens,
        }
    }
    fn tail_groups(&self) -> usize {
        self.tail.iter().filter(|&&(width, _)| width > 0).count()
    }
    /// Units that are tile groups.
    fn tile_units(&self) -> usize {
        self.wide_groups + self.tail_groups()
    }
    /// Units to quantize: the tile groups, then the other tokens 8 at a time.
    fn units(&self) -> usize {
        self.tile_units() + (self.tokens - self.grouped_tokens).div_ceil(TILE)
    }
    fn packed_bytes(&self, act: crate::GgmlType, cols: usize) -> usize {
        match self.tile_units() {
            0 => 0,
            n => self.unit(n - 1, act, cols).packed.end,
        }
    }
    fn unit(&self, u: usize, act: crate::GgmlType, cols: usize) -> Unit {
        let bytes = |width: usize| pack::group_bytes(act, cols, width);
        if u < self.wide_groups {
            let (t0, p0) = (u * self.wide, u * bytes(self.wide));
            return Unit {
                tokens: t0..t0 + self.wide,
                width: self.wide,
                packed: p0..p0 + bytes(self.wide),
            };
        }
        let (mut t0, mut p0) = (
            self.wide_groups * self.wide,
            self.wide_groups * bytes(self.wide),
        );
        let u = u - self.wide_groups;
        for &(width, taken) in &self.tail[..u.min(2)] {
            t0 += taken;
            p0 += bytes(width);
        }
        if u < self.tail_groups() {
            let (width, taken) = self.tail[u];
            return Unit {
                tokens: t0..t0 + taken,
                width,
                packed: p0..p0 + bytes(width),
            };
        }
        // Tokens without a tile: 8 per unit, nothing packed.
        let t0 = self.grouped_tokens + (u - self.tail_groups()) * TILE;
        Unit {
            tokens: t0..(t0 + TILE).min(self.tokens),
            width: 0,
            packed: 0..0,
        }
    }
}

fn check_shapes(wm: &Weights<'_>, x: &[f32], tokens: usize, y: &[f32]) -> Result<(), KernelError> {
    let Weights {
        kernels: k,
        data: w,
        rows,
        cols,
        layout,
    } = *wm;
    if layout == Layout::Panels
        && (k.stored.is_none() || k.panel.is_none() || !rows.is_multiple_of(PANEL_ROWS))
    {
        return Err(KernelError::Shape(format!(
            "{} weights {rows}×{cols} stored as panels: {}",
            k.weight,
            if rows.is_multiple_of(PANEL_ROWS) {
                "this ISA has no kernels for them"
            } else {
                "not a whole number of panels"
            }
        )));
    }
    let wrow = k.weight_row_bytes(cols);
    if !cols.is_multiple_of(k.weight.block_size())
        || !cols.is_multiple_of(k.activation.block_size())
    {
        return Err(KernelError::Shape(format!(
            "{cols} columns is not a whole number of {} blocks",
            k.weight
        )));
    }
    if w.len() != rows * wrow || x.len() != tokens * cols || y.len() != tokens * rows {
        return Err(KernelError::Shape(format!(
            "{} weights {rows}×{cols} ({} bytes, want {}), x {} values (want {}), y {} values (want {})",
            k.weight,
            w.len(),
            rows * wrow,
            x.len(),
            tokens * cols,
            y.len(),
            tokens * rows
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{Rayon, Serial};
    use crate::testutil::{Rng, activations, tolerance, weight_row};
    use crate::{GgmlType, Isa, kernels_for};

    /// matmul equals the scalar row dot for every (t, r), on every available ISA,
    /// for batch sizes around the tile width.
    #[test]
    fn matmul_matches_row_dots() {
        let mut rng = Rng(7);
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for ty in [
                GgmlType::Q8_0,
                GgmlType::Q4_0,
                GgmlType::Q4_K,
                GgmlType::Q6_K,
                GgmlType::Q4_1,
                GgmlType::F16,
            ] {
                let k = kernels_for(ty, isa).unwrap();
                let r = kernels_for(ty, Isa::Scalar).unwrap();
                let (rows, cols) = (37, 512);
                let w: Vec<u8> = (0..rows)
                    .flat_map(|_| weight_row(&mut rng, ty, cols, 0))
                    .collect();
                for tokens in [1, 3, 4, 9, 11, 12, 14, 16, 21, 25, 29, 35, 40] {
                    let x = activations(&mut rng, tokens * cols, 0);
                    let mut y = vec![f32::NAN; tokens * rows];
                    let mut s = Scratch::new();
                    let pool: &dyn ThreadPool = if tokens % 2 == 0 { &Rayon } else { &Serial };
                    matmul(
                        &Weights {
                            kernels: k,
                            data: &w,
                            rows,
                            cols,
                            layout: Layout::Rows,
                        },
                        &x,
                        tokens,
                        &mut y,
                        &mut s,
                        pool,
                    )
                    .unwrap();
                    let mut a = vec![0u8; r.activation_row_bytes(cols)];
                    for t in 0..tokens {
                        (r.quantize_activation)(&x[t * cols..(t + 1) * cols], &mut a);
                        for row in 0..rows {
                            let wr = &w[row * k.weight_row_bytes(cols)
                                ..(row + 1) * k.weight_row_bytes(cols)];
                            let want = (r.vec_dot)(cols, wr, &a);
                            let got = y[t * rows + row];
                            let tol = tolerance(ty, cols, wr, &a);
                            assert!(
                                ((got - want) as f64).abs() <= tol,
                                "{isa} {ty} T={tokens} ({t},{row}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Single-token tasks cover every row of every matrix once, in whole
    /// units except at a matrix's end, a share of the units per thread
    /// (`TAPERED_TASKS` tasks each, so the pool's ranges are the shares),
    /// and shrink toward each share's end.
    #[test]
    fn tapered_tasks_cover_each_row_once_and_shrink() {
        let k = crate::kernels(GgmlType::Q8_0).unwrap();
        let weights = |rows: usize| Weights {
            kernels: k,
            data: &[],
            rows,
            cols: 32,
            layout: Layout::Rows,
        };
        // Task sizes in rows, by thread, after checking the tasks' rows.
        let sizes = |rows: [usize; 3], unit: usize, threads: usize| -> Vec<Vec<usize>> {
            let wms = rows.map(weights);
            let tasks = TaperedTasks::new(&[&wms[0], &wms[1], &wms[2]], unit, threads);
            assert_eq!(tasks.count(), threads * tasks.per_thread);
            assert!(tasks.per_thread >= TAPERED_TASKS);
            let mut seen = rows.map(|r| vec![0u32; r]);
            let sizes = (0..tasks.count())
                .map(|task| {
                    let mut size = 0;
                    tasks.for_each(task, |m, r0, r1| {
                        assert!(
                            r0 < r1 && r1 <= rows[m],
                            "{rows:?}: task {task}: {m} {r0}..{r1}"
                        );
                        seen[m][r0..r1].iter_mut().for_each(|c| *c += 1);
                        size += r1 - r0;
                    });
                    size
                })
                .collect();
            assert!(seen.iter().flatten().all(|&c| c == 1), "{rows:?}");
            let sizes: Vec<usize> = sizes;
            sizes
                .chunks(tasks.per_thread)
                .map(<[usize]>::to_vec)
                .collect()
        };
        for (rows, unit, threads) in [
            ([576, 192, 192], 8, 2),
            ([1536, 1536, 0], 16, 2),
            ([49_152, 0, 0], 16, 2),
            ([100, 5, 3], 8, 3),
            ([7, 0, 0], 8, 4),
            ([0, 16, 0], 16, 2),
            ([0, 0, 0], 8, 2),
            ([262_144, 0, 0], 16, 2),
        ] {
            for share in sizes(rows, unit, threads) {
                assert!(
                    share.windows(2).all(|w| w[0] + unit >= w[1]),
                    "{rows:?}: {share:?}"
                );
                // The last tasks are small, however large the share.
                let last = share.iter().rev().find(|&&s| s > 0).copied().unwrap_or(0);
                assert!(last <= LAST_TASK_UNITS * unit, "{rows:?}: {share:?}");
            }
        }
        // SmolLM2's gate and up: a thread's 96 panels in five tasks (more
        // than three, so that the last stays within four panels).
        let panels: Vec<usize> = sizes([1536, 1536, 0], PANEL_ROWS, 2)[0]
            .iter()
            .map(|r| r / PANEL_ROWS)
            .collect();
        assert_eq!(panels, [34, 27, 19, 12, 4]);
        // Its queries, keys and values: 30 panels a thread in three.
        let qkv: Vec<usize> = sizes([576, 192, 192], PANEL_ROWS, 2)[0]
            .iter()
            .map(|r| r / PANEL_ROWS)
            .collect();
        assert_eq!(qkv, [16, 10, 4]);
        // Gemma 3's LM head: 8192 panels a thread in 46 tasks, the first 352
        // panels, the last 4.
        let head = &sizes([262_144, 0, 0], PANEL_ROWS, 2)[0];
        assert_eq!(head.len(), 46);
        assert_eq!((head[0] / PANEL_ROWS, head[45] / PANEL_ROWS), (352, 4));
    }

    /// Panel tasks are whole panels, shared evenly where a size allows.
    #[test]
    fn panel_tasks_balance_the_threads() {
        assert_eq!(panel_chunk_rows(576, 2), 48);
        assert_eq!(panel_chunk_rows(1536, 2), 192);
        assert_eq!(panel_chunk_rows(262_144, 2), 32_768);
        for (rows, threads) in [(0, 2), (1, 1), (17, 2), (576, 16), (1000, 3)] {
            let c = panel_chunk_rows(rows, threads);
            assert!(
                c >= PANEL_ROWS && c.is_multiple_of(PANEL_ROWS),
                "{rows} {threads}: {c}"
            );
        }
    }

    /// A matrix of no rows or no columns (or no tokens) is a valid product on
    /// every path (rows, tiles and panels): empty, or zeros.
    #[test]
    fn empty_products_are_fine() {
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
                let k = kernels_for(ty, isa).unwrap();
                for tokens in [0, 1, 9, 40] {
                    // No rows of 256 values, then 3 rows of none.
                    for (rows, cols) in [(0, 256), (3, 0)] {
                        let wm = Weights {
                            kernels: k,
                            data: &[],
                            rows,
                            cols,
                            layout: Layout::Rows,
                        };
                        let x = vec![0.5f32; tokens * cols];
                        let mut y = vec![f32::NAN; tokens * rows];
                        matmul(&wm, &x, tokens, &mut y, &mut Scratch::new(), &Rayon).unwrap();
                        assert!(y.iter().all(|&v| v == 0.0), "{isa} {ty} T={tokens}");
                    }
                }
            }
        }
    }

    #[test]
    fn shape_errors_are_reported() {
        let k = kernels_for(GgmlType::Q8_0, Isa::Scalar).unwrap();
        let mut y = vec![0f32; 2];
        let e = matmul(
            &Weights {
                kernels: k,
                data: &[0u8; 34],
                rows: 2,
                cols: 32,
                layout: Layout::Rows,
            },
            &[0.0; 32],
            1,
            &mut y,
            &mut Scratch::new(),
            &Serial,
        )
        .unwrap_err();
        assert!(matches!(e, KernelError::Shape(_)), "{e}");
        let e = matmul(
            &Weights {
                kernels: k,
                data: &[0u8; 34],
                rows: 1,
                cols: 31,
                layout: Layout::Rows,
            },
            &[0.0; 31],
            1,
            &mut y[..1],
            &mut Scratch::new(),
            &Serial,
        )
        .unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
    }
}
