//! The F32 strategy: a batch of float weights through the type's
//! [`F32Tile`], which reads each weight vector once for its `tokens` and
//! each activation vector once for its `rows`.
//!
//! F32 activations need no quantizing: the tiles read the caller's rows,
//! except a last partial group of tokens, copied with zero rows after it.
//! A task's rows run against one block of tokens at a time, small enough
//! that the block stays in L2 while every group of rows passes over it.

use super::tasks::{RowTasks, chunk_rows};
use super::{Out, Scratch, Weights};
use crate::dispatch::{F32_TILE_MAX, F32Tile};
use crate::pool::ThreadPool;

/// Activation bytes a block of tokens spans, at most.
const TOKEN_BLOCK_BYTES: usize = 96 << 10;
/// Weight bytes of one task's rows, at most: they stay in L2 across the
/// token blocks.
const TASK_BYTES: usize = 256 << 10;

/// [`super::matmul_many`] for F32 weights in ggml's rows (shapes checked,
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
    let cols = wms[0].cols;
    let row_bytes = cols * 4;
    // The tokens past the last whole group, padded with zero rows.
    let whole = tokens / tt * tt;
    let padded = tokens.next_multiple_of(tt);
    if whole < tokens {
        let need = tt * row_bytes;
        if scratch.buf.len() < need {
            scratch.buf.resize(need, 0);
        }
        let last: &[u8] = bytemuck::cast_slice(&x[whole * cols..]);
        scratch.buf[..last.len()].copy_from_slice(last);
        scratch.buf[last.len()..need].fill(0);
    }
    let xb: &[u8] = bytemuck::cast_slice(x);
    let last = &scratch.buf[..(padded - whole) * row_bytes];
    // The `tt` activation rows starting at token `t` (a multiple of `tt`).
    let group = |t: usize| -> &[u8] {
        if t < whole {
            &xb[t * row_bytes..(t + tt) * row_bytes]
        } else {
            last
        }
    };
    let block = (TOKEN_BLOCK_BYTES / row_bytes / tt * tt).max(tt);
    let cache_rows = TASK_BYTES / row_bytes;
    let chunk = chunk_rows(wms.map(|w| w.rows), pool.threads(), cache_rows);
    let tasks = RowTasks::new(&wms, chunk);
    let mut ys = ys;
    let outs: [Out<f32>; N] = std::array::from_fn(|m| Out(ys[m].as_mut_ptr()));
    let outs = &outs;
    let ahead = crate::prefetch::whole_groups(crate::prefetch::f32_ahead(), tr * row_bytes);
    pool.run(tasks.count(), &|task| {
        let (m, r0, r1) = tasks.locate(task);
        let (w, rows) = (wms[m].data, wms[m].rows);
        let store = |t: usize, r: usize, v: f32| {
            debug_assert!(t < tokens && r < rows);
            // SAFETY: `t < tokens` and `r0 <= r < r1 <= rows`, so the index lies in
            // `ys[m]` (`tokens * rows` values, checked by `check_shapes`); each task
            // owns rows `r0..r1` of matrix `m` for every token, so no two tasks write
            // the same element, and `ys` were distinct `&mut` slices.
            unsafe { *outs[m].0.add(t * rows + r) = v }
        };
        let tiled = r0 + (r1 - r0) / tr * tr;
        let mut v = [0.0f32; F32_TILE_MAX];
        for b0 in (0..padded).step_by(block) {
            let b1 = (b0 + block).min(padded);
            for r in (r0..tiled).step_by(tr) {
                let wr = &w[r * row_bytes..(r + tr) * row_bytes];
                for t in (b0..b1).step_by(tt) {
                    // The first tile of the first block brings the rows in from
                    // memory: hinting the rows `ahead` bytes on as it goes keeps
                    // the stream going, which the hardware prefetchers, seeing
                    // `tr` short streams at once, do not.
                    let ahead = if t == 0 { ahead } else { 0 };
                    tile(cols, wr, group(t), &mut v[..tr * tt], ahead);
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
                let wr = &w[r * row_bytes..(r + 1) * row_bytes];
                for t in b0..b1.min(tokens) {
                    let a = &xb[t * row_bytes..(t + 1) * row_bytes];
                    store(t, r, (k.vec_dot)(cols, wr, a));
                }
            }
        }
    });
}
