//! The row strategies: one token through the row kernels, a batch through
//! the tiles, the 1×4 kernel or the row kernels (see the module doc of
//! [`super`]).

use super::tasks::{RowTasks, TaperedTasks, chunk_rows};
use super::{Out, Scratch, Weights};
use crate::act_pack::{self, TILE};
use crate::dispatch::TileFns;
use crate::pool::ThreadPool;
use crate::{GgmlType, TypeKernels};

/// One token through the row kernels: tasks tapered per thread.
pub(super) fn single_row<const N: usize>(
    wms: [&Weights<'_>; N],
    x: &[f32],
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let acts = quantize(None, &wms, x, 1, scratch, pool);
    let run = RowRun::new(None, &wms, &acts, 1, scratch, ys);
    let tasks = TaperedTasks::new(&wms, 8, pool.threads());
    pool.run(tasks.count(), &|task| {
        tasks.for_each(task, |m, r0, r1| run.rows(m, r0, r1))
    });
}

/// Tokens without tiles: fours through the 1×4 kernel where the type has
/// one, the rest one at a time.
pub(super) fn rows<const N: usize>(
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let acts = quantize(None, &wms, x, tokens, scratch, pool);
    let run = RowRun::new(None, &wms, &acts, tokens, scratch, ys);
    run_chunks(&run, pool);
}

/// Token groups through the tiles, tokens past them as in [`rows`].
pub(super) fn tiles<const N: usize>(
    tiles: TileFns,
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let acts = quantize(Some(tiles), &wms, x, tokens, scratch, pool);
    let run = RowRun::new(Some(tiles), &wms, &acts, tokens, scratch, ys);
    run_chunks(&run, pool);
}

/// A batch's rows in equal chunks over all its matrices.
fn run_chunks<const N: usize>(run: &RowRun<'_, N>, pool: &dyn ThreadPool) {
    let rows = run.wms.map(|w| w.rows);
    let tasks = RowTasks::new(run.wms, chunk_rows(rows, pool.threads(), usize::MAX));
    pool.run(tasks.count(), &|task| {
        let (m, r0, r1) = tasks.locate(task);
        run.rows(m, r0, r1)
    });
}

/// The activations of a call, quantized (and packed for the tiles).
struct Acts {
    plan: TilePlan,
    /// Bytes of one quantized activation row.
    arow: usize,
    packed_len: usize,
}

/// Quantizes (and packs) the activations into `scratch`, one unit (a tile's
/// group of tokens, or 8 tokens without tiles) per task: each unit writes
/// only its own rows and its own packed group, so the units run in parallel.
fn quantize<const N: usize>(
    tiles: Option<TileFns>,
    wms: &[&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) -> Acts {
    let k = wms[0].kernels;
    let cols = wms[0].cols;
    let arow = k.activation_row_bytes(cols);
    scratch.reserve(k, cols, tokens);
    let plan = TilePlan::new(tiles, tokens);
    let packed_len = plan.packed_bytes(k.activation, cols);
    if scratch.packed.len() < packed_len {
        scratch.packed.resize(packed_len, 0);
    }
    let acts_ptr = Out(scratch.buf.as_mut_ptr());
    let packed_ptr = Out(scratch.packed.as_mut_ptr());
    let (acts_ptr, packed_ptr) = (&acts_ptr, &packed_ptr);
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
            act_pack::pack(k.activation, cols, g.width, rows, out, shift);
        }
    };
    let units = plan.units();
    if units >= 2 * pool.threads() {
        pool.run(units, &prepare);
    } else {
        (0..units).for_each(prepare);
    }
    Acts {
        plan,
        arow,
        packed_len,
    }
}

/// Everything a task of a row strategy reads: the matrices, their quantized
/// (and packed) activations and the outputs.
struct RowRun<'a, const N: usize> {
    k: &'a TypeKernels,
    tiles: Option<TileFns>,
    wms: &'a [&'a Weights<'a>; N],
    plan: &'a TilePlan,
    acts: &'a [u8],
    packed: &'a [u8],
    outs: [Out<f32>; N],
    tokens: usize,
    cols: usize,
    arow: usize,
    wrow: usize,
}

impl<'a, const N: usize> RowRun<'a, N> {
    fn new(
        tiles: Option<TileFns>,
        wms: &'a [&'a Weights<'a>; N],
        acts: &'a Acts,
        tokens: usize,
        scratch: &'a Scratch,
        ys: [&mut [f32]; N],
    ) -> Self {
        let k = wms[0].kernels;
        let cols = wms[0].cols;
        let mut ys = ys;
        Self {
            k,
            tiles,
            wms,
            plan: &acts.plan,
            acts: &scratch.buf[..acts.arow * tokens],
            packed: &scratch.packed[..acts.packed_len],
            outs: std::array::from_fn(|m| Out(ys[m].as_mut_ptr())),
            tokens,
            cols,
            arow: acts.arow,
            wrow: k.weight_row_bytes(cols),
        }
    }

    /// Rows `r0..r1` of matrix `m` for every token.
    fn rows(&self, m: usize, r0: usize, r1: usize) {
        let Self {
            k,
            tiles,
            wms,
            plan,
            acts,
            packed,
            tokens,
            cols,
            arow,
            wrow,
            ..
        } = *self;
        let (w, rows) = (wms[m].data, wms[m].rows);
        let a = |t: usize| &acts[t * arow..(t + 1) * arow];
        let out = &self.outs[m];
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
pub(super) struct TilePlan {
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
pub(super) struct Unit {
    tokens: std::ops::Range<usize>,
    width: usize,
    packed: std::ops::Range<usize>,
}

impl TilePlan {
    fn new(tiles: Option<TileFns>, tokens: usize) -> Self {
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
    fn packed_bytes(&self, act: GgmlType, cols: usize) -> usize {
        match self.tile_units() {
            0 => 0,
            n => self.unit(n - 1, act, cols).packed.end,
        }
    }
    fn unit(&self, u: usize, act: GgmlType, cols: usize) -> Unit {
        let bytes = |width: usize| act_pack::group_bytes(act, cols, width);
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
