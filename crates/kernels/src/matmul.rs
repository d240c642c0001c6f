//! `y[t][r] = W[r] · x[t]`: a quantized weight matrix (`rows` rows of `cols`
//! values, each row whole blocks) times a batch of `T` f32 activation rows.
//!
//! All activations are quantized once per call into the caller's
//! [`Scratch`]; output rows are split into chunks run on a [`ThreadPool`].
//! Where the ISA has tiles ([`TypeKernels::tiles`]), groups of 8 tokens (and
//! a padded group for a remainder of 2 to 7) go through the 1×8/1×4 tiles,
//! which unpack a weight block once for all their columns; otherwise groups
//! of 4 through [`TypeKernels::vec_dot_x4`]. The rest (and `T = 1`, the
//! memory-bound decode case) stream rows through [`TypeKernels::vec_dot`].
//! Once the scratch is large enough, a call allocates nothing.

use crate::pack::{self, TILE};
use crate::pool::ThreadPool;
use crate::{KernelError, TypeKernels};

/// Reusable buffer for the quantized activations of one call.
#[derive(Debug, Default)]
pub struct Scratch {
    buf: Vec<u8>,
    /// Activations packed for the 1×8 tiles (Q8_0 weights).
    packed: Vec<u8>,
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

/// Rows per task: enough tasks to balance the threads, each a few rows at least.
fn chunk_rows(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads.max(1) * 4)
        .clamp(1, 256)
        .max(8.min(rows.max(1)))
}

/// A weight matrix: `rows` rows of `cols` values of type `kernels.weight`.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    pub kernels: &'a TypeKernels,
    pub data: &'a [u8],
    pub rows: usize,
    pub cols: usize,
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
    if wms
        .iter()
        .any(|w| w.kernels.weight != k.weight || w.cols != cols)
    {
        for (wm, y) in wms.into_iter().zip(ys) {
            matmul_many([wm], x, tokens, [y], scratch, pool)?;
        }
        return Ok(());
    }
    let arow = k.activation_row_bytes(cols);
    let wrow = k.weight_row_bytes(cols);
    scratch.reserve(k, cols, tokens);
    // Whole groups of 8 tokens go through the 1×8 tile; a remainder of 2 to 7
    // tokens goes through one more tile (4 or 8 wide) padded with zero rows,
    // whose extra columns are dropped (a tile gives each column the row
    // kernel's bits, so padding changes nothing). A single token (decoding)
    // takes the row kernel. The groups are packed once here.
    // Every tiled type's activations are packed (Q8_0, Q8_K).
    let tiles = k
        .tiles
        .filter(|_| tokens >= 2 && pack::needs_packing(k.activation));
    let groups = if tiles.is_some() { tokens / TILE } else { 0 };
    let rem = tokens - groups * TILE;
    let tail_width = match rem {
        _ if tiles.is_none() => 0,
        0 | 1 => 0,
        2..=4 => TILE / 2,
        _ => TILE,
    };
    let tail_tokens = if tail_width > 0 { rem } else { 0 };
    let g8 = pack::group_bytes(k.activation, cols, TILE);
    let g_tail = if tail_width > 0 {
        pack::group_bytes(k.activation, cols, tail_width)
    } else {
        0
    };
    let grouped_tokens = groups * TILE + tail_tokens;
    let packed_len = if tiles.is_some() { groups * g8 } else { 0 } + g_tail;
    if scratch.packed.len() < packed_len {
        scratch.packed.resize(packed_len, 0);
    }
    let tail_start = groups * TILE;
    // Quantize (and pack) the activations, one unit of 8 tokens per task:
    // each unit writes only its own rows, its own packed group and (the
    // last) the tail, so the units run in parallel.
    let acts_ptr = Out(scratch.buf.as_mut_ptr());
    let packed_ptr = Out(scratch.packed.as_mut_ptr());
    let (acts_ptr, packed_ptr) = (&acts_ptr, &packed_ptr);
    let prepare = |g: usize| {
        let t1 = ((g + 1) * TILE).min(tokens);
        // SAFETY: `scratch.buf` holds `tokens` rows of `arow` bytes (reserved above);
        // unit `g` alone touches rows `g·TILE..t1`, and nothing else holds a
        // reference into the buffer while the units run.
        let rows = unsafe {
            std::slice::from_raw_parts_mut(acts_ptr.0.add(g * TILE * arow), (t1 - g * TILE) * arow)
        };
        for (xt, at) in x[g * TILE * cols..t1 * cols]
            .chunks_exact(cols)
            .zip(rows.chunks_exact_mut(arow))
        {
            (k.quantize_activation)(xt, at);
        }
        let packed_at = |offset: usize, len: usize| {
            // SAFETY: `scratch.packed` holds `packed_len` bytes (resized above); the
            // ranges asked for (group `g`, or the tail after all groups) are
            // disjoint between units.
            unsafe { std::slice::from_raw_parts_mut(packed_ptr.0.add(offset), len) }
        };
        if tiles.is_none() {
            return;
        }
        if g < groups {
            pack::pack(k.activation, cols, TILE, rows, packed_at(g * g8, g8));
        } else if tail_width > 0 {
            let out = packed_at(packed_len - g_tail, g_tail);
            pack::pack(
                k.activation,
                cols,
                tail_width,
                &rows[..tail_tokens * arow],
                out,
            );
        }
    };
    let units = tokens.div_ceil(TILE);
    if units >= 2 * pool.threads() {
        pool.run(units, &prepare);
    } else {
        (0..units).for_each(prepare);
    }
    let acts = &scratch.buf[..arow * tokens];
    let (full, tail) = scratch.packed[..packed_len].split_at(packed_len - g_tail);
    // One chunk size over all rows; task ids run through matrix 0's chunks, then 1's, …
    let total_rows: usize = wms.iter().map(|w| w.rows).sum();
    let chunk = chunk_rows(total_rows, pool.threads());
    let tasks_of: [usize; N] = std::array::from_fn(|m| wms[m].rows.div_ceil(chunk));
    let n_tasks: usize = tasks_of.iter().sum();
    let mut ys = ys;
    let outs: [Out<f32>; N] = std::array::from_fn(|m| Out(ys[m].as_mut_ptr()));
    let outs = &outs;
    pool.run(n_tasks, &|task| {
        let (mut m, mut t0) = (0, task);
        while t0 >= tasks_of[m] {
            t0 -= tasks_of[m];
            m += 1;
        }
        let (w, rows) = (wms[m].data, wms[m].rows);
        let r0 = t0 * chunk;
        let r1 = (r0 + chunk).min(rows);
        let a = |t: usize| &acts[t * arow..(t + 1) * arow];
        let out = &outs[m];
        let store = |t: usize, r: usize, v: f32| {
            debug_assert!(t < tokens && r < rows);
            // SAFETY: `t < tokens` and `r0 <= r < r1 <= rows`, so the index is inside
            // `ys[m]` (`tokens * rows` values, checked by `check_shapes`); each task owns
            // rows `r0..r1` of one matrix for every token, so no two tasks write the same
            // element, and `ys` was a set of distinct `&mut` slices.
            unsafe { *out.0.add(t * rows + r) = v }
        };
        if let Some(tiles) = tiles {
            // Groups outermost: the task's weight rows stay in cache across groups.
            for (g, packed) in full.chunks_exact(g8).enumerate() {
                for r in r0..r1 {
                    let v = (tiles.x8)(cols, &w[r * wrow..(r + 1) * wrow], packed);
                    for (c, v) in v.into_iter().enumerate() {
                        store(g * TILE + c, r, v);
                    }
                }
            }
            if tail_width > 0 {
                for r in r0..r1 {
                    let wr = &w[r * wrow..(r + 1) * wrow];
                    let mut v = [0.0f32; TILE];
                    if tail_width == TILE {
                        v = (tiles.x8)(cols, wr, tail);
                    } else {
                        v[..TILE / 2].copy_from_slice(&(tiles.x4)(cols, wr, tail));
                    }
                    for (c, &v) in v[..tail_tokens].iter().enumerate() {
                        store(tail_start + c, r, v);
                    }
                }
            }
        }
        for r in r0..r1 {
            let wr = &w[r * wrow..(r + 1) * wrow];
            let mut t = grouped_tokens;
            if let Some(x4) = k.vec_dot_x4 {
                while t + 4 <= tokens {
                    let v = x4(cols, wr, [a(t), a(t + 1), a(t + 2), a(t + 3)]);
                    for (c, v) in v.into_iter().enumerate() {
                        store(t + c, r, v);
                    }
                    t += 4;
                }
            }
            for t in t..tokens {
                store(t, r, (k.vec_dot)(cols, wr, a(t)));
            }
        }
    });
    Ok(())
}

fn check_shapes(wm: &Weights<'_>, x: &[f32], tokens: usize, y: &[f32]) -> Result<(), KernelError> {
    let Weights {
        kernels: k,
        data: w,
        rows,
        cols,
    } = *wm;
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
                for tokens in [1, 3, 4, 9, 12, 21] {
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
