//! The F32 strategy: a batch of float weights through the type's
//! [`F32Tile`], which reads each weight vector once for its `tokens` and
//! each activation vector once for its `rows`.
//!
//! F32 activations need no quantizing: the tiles read the caller's rows,
//! except a last partial group of tokens, copied with zero rows after it.
//! F16 and BF16 weights ([`F32Tiles::widen`]) take the same tiles over
//! widened rows: the activations are rounded to the type once per call and
//! widened, and each task widens its weight rows once, into its thread's
//! buffer, before every token block runs over them.
//! Tiles of a float type without `widen` other than F32 (BF16 on AVX-512
//! BF16) read the weight rows and the rounded activations as they are.
//! A task's rows run against one block of tokens at a time, small enough
//! that the block stays in L2 while every group of rows passes over it.

use std::cell::RefCell;

use super::tasks::{RowTasks, chunk_rows};
use super::{Out, Scratch, Weights};
use crate::GgmlType;
use crate::dispatch::{F32_TILE_MAX, F32Tile, F32Tiles, TileHint, WidenFn};
use crate::pool::ThreadPool;

/// Activation bytes a block of tokens spans, at most.
const TOKEN_BLOCK_BYTES: usize = 96 << 10;
/// Weight bytes of one task's rows, at most: they stay in L2 across the
/// token blocks.
const TASK_BYTES: usize = 256 << 10;

thread_local! {
    /// A worker's widened weight rows, one task's at a time: a thread's
    /// buffer, so that the memory is bounded by the threads, not the tasks.
    static WIDE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// [`super::matmul_many`] for float weights in ggml's rows (shapes checked,
/// one weight type, two tokens or more).
pub(super) fn f32_tiles<const N: usize>(
    tile: F32Tile,
    wms: [&Weights<'_>; N],
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let F32Tile {
        tile,
        rows: tr,
        tokens: tt,
    } = tile;
    assert!(
        tr * tt <= F32_TILE_MAX && tr > 0 && tt > 0,
        "an F32 tile of {tr} x {tt}"
    );
    let k = wms[0].kernels;
    let widen = k.f32_tiles.and_then(|t: F32Tiles| t.widen);
    let cols = wms[0].cols;
    let (wrow, arow) = (k.weight_row_bytes(cols), k.activation_row_bytes(cols));
    // What the tiles read: F32 rows as they are, rows widened to f32, or
    // (BF16 pairs) the weight rows and the rounded activations as they are.
    let input = match widen {
        Some(widen) => TileInput::Widened(widen),
        None if k.activation == GgmlType::F32 => TileInput::F32,
        None => TileInput::Rounded,
    };
    // Bytes of a weight and of an activation row as the tiles read them.
    let (tile_wrow, tile_arow) = match input {
        TileInput::Widened(_) => (cols * 4, cols * 4),
        TileInput::F32 | TileInput::Rounded => (wrow, arow),
    };
    let whole = tokens / tt * tt;
    let padded = tokens.next_multiple_of(tt);
    match input {
        TileInput::Widened(widen) => {
            let rows = (tokens, padded);
            widen_activations(widen, k.quantize_activation, x, arow, rows, scratch, pool)
        }
        TileInput::Rounded => round_activations(
            k.quantize_activation,
            x,
            arow,
            (tokens, padded),
            scratch,
            pool,
        ),
        TileInput::F32 if whole < tokens => {
            // The tokens past the last whole group, padded with zero rows.
            let need = tt * arow;
            if scratch.buf.len() < need {
                scratch.buf.resize(need, 0);
            }
            let last: &[u8] = bytemuck::cast_slice(&x[whole * cols..]);
            scratch.buf[..last.len()].copy_from_slice(last);
            scratch.buf[last.len()..need].fill(0);
        }
        TileInput::F32 => {}
    }
    let xb: &[u8] = bytemuck::cast_slice(x);
    let scratch_buf = &scratch.buf[..];
    let scratch_packed: &[u8] = match input {
        TileInput::Widened(_) => &scratch.packed[aligned_f32(&scratch.packed)..],
        _ => &[],
    };
    // The `tt` activation rows starting at token `t` (a multiple of `tt`)
    // as the tiles read them.
    let group = |t: usize| -> &[u8] {
        let rows = t * tile_arow..(t + tt) * tile_arow;
        match input {
            TileInput::Widened(_) => &scratch_packed[rows],
            TileInput::Rounded => &scratch_buf[rows],
            TileInput::F32 if t < whole => &xb[rows],
            TileInput::F32 => &scratch_buf[..tt * arow],
        }
    };
    // Token `t`'s activation row as the type's row kernel reads it.
    let act = |t: usize| -> &[u8] {
        match input {
            TileInput::F32 => &xb[t * arow..(t + 1) * arow],
            _ => &scratch_buf[t * arow..(t + 1) * arow],
        }
    };
    let block = (TOKEN_BLOCK_BYTES / tile_arow / tt * tt).max(tt);
    let cache_rows = TASK_BYTES / tile_wrow;
    let chunk = chunk_rows(wms.map(|w| w.rows), pool.threads(), cache_rows);
    let tasks = RowTasks::new(&wms, chunk);
    let mut ys = ys;
    let outs: [Out<f32>; N] = std::array::from_fn(|m| Out(ys[m].as_mut_ptr()));
    let outs = &outs;
    let ahead = match input {
        // Widened rows lie in cache; the widening streams the file's.
        TileInput::Widened(_) => 0,
        _ => crate::prefetch::whole_groups(crate::prefetch::f32_ahead(), tr * tile_wrow),
    };
    pool.run(tasks.count(), &|task| {
        let (m, r0, r1) = tasks.locate(task);
        let (w, rows) = (wms[m].data, wms[m].rows);
        let run = |tiled_rows: &[u8]| {
            let store = |t: usize, r: usize, v: f32| {
                debug_assert!(t < tokens && r < rows);
                // SAFETY: `t < tokens` and `r0 <= r < r1 <= rows`, so the index lies in
                // `ys[m]` (`tokens * rows` values, checked by `check_shapes`); each task
                // owns rows `r0..r1` of matrix `m` for every token, so no two tasks write
                // the same element, and `ys` were distinct `&mut` slices.
                unsafe { *outs[m].0.add(t * rows + r) = v }
            };
            let tiled = r0 + (r1 - r0) / tr * tr;
            // The first block's tiles bring each group of rows in from memory,
            // hinting the rows `ahead` bytes on so the stream keeps going (the
            // hardware prefetchers, seeing `tr` short streams at once, do not
            // keep it). The group's tiles share its rows' hints, so they go out
            // as steadily as the rows are used: a burst is partly dropped.
            let first_tiles = block.min(padded) / tt;
            let mut v = [0.0f32; F32_TILE_MAX];
            for b0 in (0..padded).step_by(block) {
                let b1 = (b0 + block).min(padded);
                for r in (r0..tiled).step_by(tr) {
                    let wr = &tiled_rows[(r - r0) * tile_wrow..(r - r0 + tr) * tile_wrow];
                    for t in (b0..b1).step_by(tt) {
                        let hint = match b0 {
                            0 => TileHint {
                                ahead,
                                rows: shared_rows(t / tt, first_tiles, tr),
                            },
                            _ => TileHint::NONE,
                        };
                        tile(cols, wr, group(t), &mut v[..tr * tt], hint);
                        for c in 0..tt.min(tokens - t) {
                            // SAFETY: as in `store`, for rows `r..r + tr` (inside `r0..r1`)
                            // of token `t + c < tokens`, which lie side by side; `v` is a
                            // local buffer.
                            unsafe {
                                let dst = outs[m].0.add((t + c) * rows + r);
                                let src = v.as_ptr().add(c * tr);
                                // Every tile has four rows so far: a constant length
                                // inlines the copy, where a call to `memcpy` per token
                                // cost as much as the copy.
                                if tr == 4 {
                                    std::ptr::copy_nonoverlapping(src, dst, 4)
                                } else {
                                    std::ptr::copy_nonoverlapping(src, dst, tr)
                                }
                            }
                        }
                    }
                }
                // Rows past the last whole tile: the row kernel, with the same bits.
                for r in tiled..r1 {
                    let wr = &w[r * wrow..(r + 1) * wrow];
                    for t in b0..b1.min(tokens) {
                        store(t, r, (k.vec_dot)(cols, wr, act(t)));
                    }
                }
            }
        };
        match input {
            TileInput::F32 | TileInput::Rounded => run(&w[r0 * wrow..r1 * wrow]),
            TileInput::Widened(widen) => WIDE.with_borrow_mut(|wide| {
                let n = (r1 - r0) * cols;
                if wide.len() < n {
                    wide.resize(n, 0.0);
                }
                widen(&w[r0 * wrow..r1 * wrow], &mut wide[..n]);
                run(bytemuck::cast_slice(&wide[..n]))
            }),
        }
    });
}

/// The rows that tile `k` of the `tiles` over a group of `rows` hints: row
/// `r` where `r mod tiles == k`, so every row is hinted once, by one tile.
fn shared_rows(k: usize, tiles: usize, rows: usize) -> u32 {
    (0..rows.min(32))
        .filter(|r| r % tiles == k)
        .fold(0, |mask, r| mask | 1 << r)
}

/// How a batch's rows reach the tiles.
#[derive(Clone, Copy)]
enum TileInput {
    /// F32 weights and activations, as they are.
    F32,
    /// F16 or BF16 rows and rounded activations, widened to f32.
    Widened(WidenFn),
    /// Rows and rounded activations as they are (BF16 pairs).
    Rounded,
}

/// Rounds `tokens` activation rows to the weight type (`quantize`, rows of
/// `arow` bytes into `scratch.buf`, where the row kernel and the tiles
/// read them), with zero rows up to `padded`, a share of the tokens per
/// thread.
fn round_activations(
    quantize: crate::dispatch::QuantizeFn,
    x: &[f32],
    arow: usize,
    (tokens, padded): (usize, usize),
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let cols = x.len() / tokens;
    if scratch.buf.len() < padded * arow {
        scratch.buf.resize(padded * arow, 0);
    }
    scratch.buf[tokens * arow..padded * arow].fill(0);
    let out = Out(scratch.buf.as_mut_ptr());
    let out = &out;
    token_shares(tokens, pool, &|t0, t1| {
        let (at, len) = (t0 * arow, (t1 - t0) * arow);
        // SAFETY: `scratch.buf` holds `padded` rows of `arow` bytes (grown
        // above); this share alone writes its tokens `t0..t1`.
        let rows = unsafe { std::slice::from_raw_parts_mut(out.0.add(at), len) };
        quantize(&x[t0 * cols..t1 * cols], rows);
    });
}

/// Runs `f(t0, t1)` over `tokens` in one share of consecutive tokens per
/// thread, the shares in parallel.
fn token_shares(tokens: usize, pool: &dyn ThreadPool, f: &(dyn Fn(usize, usize) + Sync)) {
    let per = tokens.div_ceil(pool.threads().max(1));
    pool.run(tokens.div_ceil(per), &|u| {
        f(u * per, ((u + 1) * per).min(tokens))
    });
}

/// Where f32 may start in a byte buffer (which has three spare bytes).
fn aligned_f32(buf: &[u8]) -> usize {
    buf.as_ptr().align_offset(align_of::<f32>())
}

/// Rounds `tokens` activation rows to the weight type (`quantize`, rows of
/// `arow` bytes into `scratch.buf`, where the row kernel reads them) and
/// widens them back to f32 (into `scratch.packed` from [`aligned_f32`],
/// with zero rows up to `padded`), a share of the tokens per thread.
fn widen_activations(
    widen: WidenFn,
    quantize: crate::dispatch::QuantizeFn,
    x: &[f32],
    arow: usize,
    (tokens, padded): (usize, usize),
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) {
    let cols = x.len() / tokens;
    let frow = cols * 4;
    if scratch.buf.len() < tokens * arow {
        scratch.buf.resize(tokens * arow, 0);
    }
    if scratch.packed.len() < padded * frow + 3 {
        scratch.packed.resize(padded * frow + 3, 0);
    }
    let at = aligned_f32(&scratch.packed);
    scratch.packed[at + tokens * frow..at + padded * frow].fill(0);
    let (half, wide) = (
        Out(scratch.buf.as_mut_ptr()),
        Out(scratch.packed[at..].as_mut_ptr()),
    );
    let (half, wide) = (&half, &wide);
    token_shares(tokens, pool, &|t0, t1| {
        let n = (t1 - t0) * cols;
        // SAFETY: `scratch.buf` holds `tokens` rows of `arow` bytes and
        // `scratch.packed` `padded` rows of `frow` from `at`, where f32 are
        // aligned (grown above); this share alone writes its tokens `t0..t1` of each.
        let (h, f) = unsafe {
            (
                std::slice::from_raw_parts_mut(half.0.add(t0 * arow), (t1 - t0) * arow),
                std::slice::from_raw_parts_mut(wide.0.add(t0 * frow).cast::<f32>(), n),
            )
        };
        quantize(&x[t0 * cols..t1 * cols], h);
        widen(h, f);
    });
}

#[cfg(test)]
mod tests {
    use super::shared_rows;

    #[test]
    fn a_groups_tiles_hint_each_row_once() {
        for rows in [1, 2, 4, 8] {
            for tiles in 1..=12 {
                let masks: Vec<u32> = (0..tiles).map(|k| shared_rows(k, tiles, rows)).collect();
                let all = masks.iter().fold(0, |a, m| a | m);
                assert_eq!(all, (1u32 << rows) - 1, "{rows} rows, {tiles} tiles");
                let hinted: u32 = masks.iter().map(|m| m.count_ones()).sum();
                assert_eq!(hinted, rows as u32, "{rows} rows, {tiles} tiles");
            }
        }
    }
}
