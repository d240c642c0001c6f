//! `y[t][r] = W[r] · x[t]`: a quantized weight matrix (`rows` rows of `cols`
//! values, each row whole blocks) times a batch of `T` f32 activation rows.
//!
//! [`matmul_many`] checks the shapes, asks `plan` which `Strategy` fits
//! the call, and runs that strategy's function. The activations are
//! quantized once per call into the caller's [`Scratch`]; output rows are
//! split into tasks run on a [`ThreadPool`]. Once the scratch is large
//! enough, a call allocates nothing.
//!
//! # Strategies
//! * One token (decoding) streams every weight row once through
//!   [`TypeKernels::vec_dot`], eight rows at a time where the type has
//!   [`TypeKernels::vec_dot_rows8`]. Matrices stored as panels take their
//!   one-token kernel instead, whatever their types, in one parallel region.
//! * A small batch goes through the tiles ([`TypeKernels::tiles`]) where the
//!   ISA has them, else through [`TypeKernels::vec_dot_x4`] in groups of four
//!   tokens; the tokens left over take the row kernels.
//! * Float weights with [`TypeKernels::f32_tiles`] take them for every
//!   batch: a few rows against a few tokens, each output with the row
//!   kernel's bits; wide batches take the wide tile where the ISA has one.
//! * A batch of [`PanelFns::min_tokens`](crate::panel::PanelFns::min_tokens) or more takes the weight panels
//!   ([`TypeKernels::panel`]) where the ISA has them.
//! * Matrices stored as panels are multiplied where they lie, or unpacked
//!   per call like ggml's rows for batches of
//!   [`STORED_UNPACK_TOKENS`](crate::panel::STORED_UNPACK_TOKENS) or more
//!   where their type has an unpacker.
//!
//! # Tile widths
//! A tile multiplies one weight row by a packed group of tokens
//! (laid out by the internal `act_pack` module) and unpacks each weight block once for all of them.
//! Tokens are grouped sixteen at a time where the ISA has a 1×16 tile, else
//! eight at a time. The rest become at most two more groups, padded with
//! zero rows whose extra columns are dropped: 13 to 15 tokens as one group
//! of 16, 9 to 12 as one of 12 where the 1×12 tile exists (else 8 and the
//! rest), 5 to 8 as one of 8, and 2 to 4 as one of 4. A lone last token
//! takes the row kernel. A tile gives each column the row kernel's bits, so
//! the grouping never changes a result.
//!
//! # Task tapering
//! Batches split every matrix's rows into equal tasks (`chunk_rows`): about
//! four tasks per thread, whole groups of eight rows, and at most 256 rows,
//! whose weights stay in cache while the task runs them against every
//! group of tokens; among sizes down to half that, the one that fills the
//! threads' shares of the tasks most evenly. Panel batches use whole panels instead
//! (`panel_chunk_rows`), picking among sizes near four tasks per thread the
//! one whose tasks the threads share most evenly, since each task is long.
//!
//! One token gives each thread an even share of the rows, cut into a few
//! tasks that shrink toward the share's end (`TaperedTasks`). A thread
//! still streams its share as one run, and a thread that finishes first
//! takes another's small last tasks, so the threads finish close together.
//! Tasks are few because each claim is a locked read-modify-write and each
//! task restarts its kernel.

mod float;
mod panels;
mod plan;
mod rows;
mod tasks;
#[cfg(test)]
mod tests;

pub(crate) use panels::prefetch_line;
use plan::{Strategy, plan};

use crate::panel::PANEL_ROWS;
use crate::pool::ThreadPool;
use crate::{KernelError, TypeKernels};

/// Reusable buffers for the quantized activations of one call.
#[derive(Debug, Default)]
pub struct Scratch {
    buf: Vec<u8>,
    /// Activations packed for the tiles, or prepared for the panels.
    packed: Vec<u8>,
    /// Each panel task's unpacked weight rows.
    panels: Vec<u8>,
}

impl Scratch {
    /// An empty scratch: the first calls grow it.
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
// the strategies' uses), so sharing the pointer across threads cannot race.
unsafe impl<T> Sync for Out<T> {}

/// A weight matrix: `rows` rows of `cols` values of type `kernels.weight`.
#[derive(Clone, Copy, Debug)]
pub struct Weights<'a> {
    /// The kernels of the weight type on the ISA in use.
    pub kernels: &'a TypeKernels,
    /// The matrix's bytes, laid out as `layout` says.
    pub data: &'a [u8],
    /// Output values per token.
    pub rows: usize,
    /// Input values per token: a whole number of blocks of the weight type.
    pub cols: usize,
    /// How `data` is laid out.
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
    match plan(&wms, tokens) {
        Strategy::OneByOne => {
            for (wm, y) in wms.into_iter().zip(ys) {
                matmul_many([wm], x, tokens, [y], scratch, pool)?;
            }
        }
        Strategy::Empty => {
            for y in ys {
                y.fill(0.0);
            }
        }
        Strategy::SingleRow => rows::single_row(wms, x, ys, scratch, pool),
        Strategy::Rows => rows::rows(wms, x, tokens, ys, scratch, pool),
        Strategy::Tiles(tiles) => rows::tiles(tiles, wms, x, tokens, ys, scratch, pool),
        Strategy::F32Tiles(tile) => float::f32_tiles(tile, wms, x, tokens, ys, scratch, pool),
        Strategy::Panels(p) | Strategy::UnpackedStoredPanels(p) => {
            panels::unpacked_panels(p, wms, x, tokens, ys, scratch, pool)
        }
        Strategy::StoredPanels(p) => panels::stored_panels(p, wms, x, tokens, ys, scratch, pool),
        Strategy::StoredSingle => panels::stored_single(wms, x, ys, scratch, pool),
    }
    Ok(())
}

fn check_shapes(wm: &Weights<'_>, x: &[f32], tokens: usize, y: &[f32]) -> Result<(), KernelError> {
    let Weights {
        kernels: k,
        data: w,
        rows,
        cols,
        layout,
    } = *wm;
    if layout == Layout::Panels {
        if !rows.is_multiple_of(PANEL_ROWS) {
            return Err(KernelError::PartialPanel { ty: k.weight, rows });
        }
        if k.stored.is_none() || k.panel.is_none() {
            return Err(KernelError::NoPanelKernels { ty: k.weight });
        }
    }
    let wrow = k.weight_row_bytes(cols);
    if !cols.is_multiple_of(k.weight.block_size())
        || !cols.is_multiple_of(k.activation.block_size())
    {
        return Err(KernelError::PartialBlock { ty: k.weight, cols });
    }
    let lengths = [
        ("weight bytes (rows × row bytes)", w.len(), rows * wrow),
        ("input values (tokens × cols)", x.len(), tokens * cols),
        ("output values (tokens × rows)", y.len(), tokens * rows),
    ];
    for (what, got, expected) in lengths {
        if got != expected {
            return Err(KernelError::Shape {
                what,
                expected,
                got,
            });
        }
    }
    Ok(())
}
