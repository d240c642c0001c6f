//! Weights borrowed from the mapped file: a [`Linear`] records where its
//! bytes are, the forward pass borrows them per call, so loading copies
//! nothing but the small 1-D norm vectors — and, where the ISA multiplies
//! stored panels, the matrices [`store_panels`] rewrites into them.

use lamina_gguf::{GgmlType, Gguf};
use lamina_kernels::matmul::{Layout, Scratch, Weights, matmul, matmul_many};
use lamina_kernels::panel::PANEL_ROWS;
use lamina_kernels::pool::ThreadPool;
use lamina_kernels::{TypeKernels, kernels};

use crate::ModelError;

/// Where a model's weights lie: the file, and the matrices rewritten at
/// load as stored panels.
#[derive(Clone, Copy, Debug)]
pub struct Store<'a> {
    pub file: &'a [u8],
    pub panels: &'a [u8],
}

/// Which of a [`Store`]'s buffers holds a weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    File,
    Panels,
}

/// A 2-D weight `rows × cols` (ggml's `{cols, rows}`).
#[derive(Clone, Debug)]
pub struct Linear {
    pub name: String,
    pub ty: GgmlType,
    pub kernels: &'static TypeKernels,
    /// Byte range of the data in `source`.
    pub source: Source,
    pub start: usize,
    pub len: usize,
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
}

impl Linear {
    /// The tensor's bytes.
    pub fn bytes<'a>(&self, s: Store<'a>) -> &'a [u8] {
        let buf = match self.source {
            Source::File => s.file,
            Source::Panels => s.panels,
        };
        &buf[self.start..self.start + self.len]
    }

    /// `y[t] = W · x[t]` for `tokens` rows of `x`.
    pub fn forward(
        &self,
        file: Store<'_>,
        x: &[f32],
        tokens: usize,
        y: &mut [f32],
        scratch: &mut Scratch,
        pool: &dyn ThreadPool,
    ) -> Result<(), ModelError> {
        let w = Weights {
            kernels: self.kernels,
            data: self.bytes(file),
            rows: self.rows,
            cols: self.cols,
            layout: self.layout,
        };
        matmul(&w, x, tokens, y, scratch, pool).map_err(|e| ModelError::Kernel {
            tensor: self.name.clone(),
            error: e,
        })
    }

    fn weights<'a>(&self, file: Store<'a>) -> Weights<'a> {
        Weights {
            kernels: self.kernels,
            data: self.bytes(file),
            rows: self.rows,
            cols: self.cols,
            layout: self.layout,
        }
    }

    /// Row `r` dequantized into `out` (embedding lookup).
    pub fn row(&self, file: Store<'_>, r: usize, out: &mut [f32]) -> Result<(), ModelError> {
        let rb = self.len / self.rows;
        match (self.layout, self.kernels.stored) {
            (Layout::Rows, _) => {
                let bytes = &self.bytes(file)[r * rb..(r + 1) * rb];
                lamina_quant::dequantize_row(self.ty, bytes, out)
                    .map_err(|e| ModelError::Unsupported(format!("{}: {e}", self.name)))
            }
            (Layout::Panels, Some(stored)) => {
                let pb = PANEL_ROWS * rb;
                let panel = &self.bytes(file)[r / PANEL_ROWS * pb..][..pb];
                (stored.dequantize_row)(self.cols, panel, r % PANEL_ROWS, out);
                Ok(())
            }
            (Layout::Panels, None) => unreachable!("only stored where the kernels have panels"),
        }
    }
}

/// Several projections of the same input in one pass (input quantized once,
/// one parallel region) — Q/K/V and gate/up.
pub fn forward_many<const N: usize>(
    lins: [&Linear; N],
    file: Store<'_>,
    x: &[f32],
    tokens: usize,
    ys: [&mut [f32]; N],
    scratch: &mut Scratch,
    pool: &dyn ThreadPool,
) -> Result<(), ModelError> {
    let ws: [Weights<'_>; N] = std::array::from_fn(|i| lins[i].weights(file));
    let refs: [&Weights<'_>; N] = std::array::from_fn(|i| &ws[i]);
    matmul_many(refs, x, tokens, ys, scratch, pool).map_err(|e| ModelError::Kernel {
        tensor: lins
            .iter()
            .map(|l| l.name.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        error: e,
    })
}

/// Looks tensors up by name and checks their shapes.
pub struct Loader<'g, D> {
    pub g: &'g Gguf<D>,
}

impl<D: AsRef<[u8]>> Loader<'_, D> {
    fn info(&self, name: &str) -> Result<&lamina_gguf::TensorInfo, ModelError> {
        self.g
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    pub fn has(&self, name: &str) -> bool {
        self.g.tensor(name).is_some()
    }

    /// A 2-D weight of `rows × cols`, with kernels for its type.
    pub fn linear(&self, name: &str, cols: usize, rows: usize) -> Result<Linear, ModelError> {
        let info = self.info(name)?;
        if !same_shape(&info.shape, &[cols as u64, rows as u64]) {
            return Err(ModelError::Shape {
                tensor: name.to_string(),
                got: info.shape.clone(),
                want: vec![cols as u64, rows as u64],
            });
        }
        lamina_quant::check_supported(info.ggml_type, name)
            .map_err(|e| ModelError::Unsupported(e.to_string()))?;
        let k = kernels(info.ggml_type).map_err(|e| ModelError::Kernel {
            tensor: name.to_string(),
            error: e,
        })?;
        if !cols.is_multiple_of(k.activation.block_size()) {
            return Err(ModelError::Unsupported(format!(
                "{name}: rows of {cols} values do not fit {} blocks",
                k.activation
            )));
        }
        let data = self.g.tensor_data(info);
        let start = data.as_ptr() as usize - self.g.as_bytes().as_ptr() as usize;
        Ok(Linear {
            name: name.to_string(),
            ty: info.ggml_type,
            kernels: k,
            source: Source::File,
            start,
            len: data.len(),
            rows,
            cols,
            layout: Layout::Rows,
        })
    }

    /// Rows `part` of a 2-D weight of `rows × cols` stored as one tensor
    /// (Phi-3's fused Q/K/V and gate/up): a weight of its own that reads
    /// those rows in place.
    pub fn linear_rows(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
        part: std::ops::Range<usize>,
    ) -> Result<Linear, ModelError> {
        let whole = self.linear(name, cols, rows)?;
        if part.start >= part.end || part.end > rows {
            return Err(ModelError::Unsupported(format!(
                "{name}: rows {part:?} of {rows}"
            )));
        }
        let row_bytes = whole.len / rows;
        Ok(Linear {
            name: format!("{name}[{}..{}]", part.start, part.end),
            start: whole.start + part.start * row_bytes,
            len: part.len() * row_bytes,
            rows: part.len(),
            ..whole
        })
    }

    /// A 1-D vector of `n` values, dequantized to f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let info = self.info(name)?;
        if !same_shape(&info.shape, &[n as u64]) {
            return Err(ModelError::Shape {
                tensor: name.to_string(),
                got: info.shape.clone(),
                want: vec![n as u64],
            });
        }
        lamina_quant::dequantize_tensor(info, self.g.tensor_data(info))
            .map_err(|e| ModelError::Unsupported(format!("{name}: {e}")))
    }
}

/// Whether a file's shape is `want`, as ggml compares them: trailing
/// dimensions of 1 do not count (`llama-quantize` writes a `[n, 1]` matrix
/// back as `[n]`).
fn same_shape(got: &[u64], want: &[u64]) -> bool {
    let trim = |s: &[u64]| s.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
    let (g, w) = (trim(got), trim(want));
    got[..g] == want[..w]
}

/// Bytes of a mapped matrix's rows stored as panels before their file
/// pages are released.
const RELEASE_STEP: usize = 16 << 20;

/// Stores the matrices in `linears` that this ISA multiplies as stored
/// panels (its kernels have `stored`, the rows are whole panels) as panels,
/// and marks them so; a matrix named twice (a tied LM head) is stored once.
/// A file read into memory is rewritten in place; a mapped one is copied
/// into one anonymous buffer on 2 MiB pages (returned), in the order
/// `linears` names them, and its pages of the stored matrices leave the
/// process's resident memory, so either way the weights take the memory
/// they took as rows.
///
/// Given in the order a forward pass reads them, a single-token region's
/// matrices (Q, K, V) lie back to back, so a thread's share of the region
/// is one stream; in file order (alphabetical in these GGUFs: K, O, Q, V) the
/// share that crossed from Q into K and V started three, and each new
/// stream pays the hardware prefetchers' ramp (about a microsecond when the
/// vCPUs sit far apart).
///
/// Stored panels need no unpacking for batches and take about four times
/// fewer instructions per byte when decoding; they cost one pass over the
/// matrices at load.
pub fn store_panels(
    linears: &mut [&mut Linear],
    file: Gguf,
) -> Result<(Gguf, Option<lamina_gguf::Mmap>), ModelError> {
    use rayon::prelude::*;
    let eligible = |l: &Linear| {
        l.source == Source::File
            && l.layout == Layout::Rows
            && l.kernels.stored.is_some()
            && l.rows > 0
            && l.cols > 0
            && l.rows.is_multiple_of(PANEL_ROWS)
    };
    // Each distinct matrix (by where it starts in the file) once, in the
    // order given: (start, length, columns, panel bytes, store function).
    let mut seen = std::collections::HashSet::new();
    let matrices: Vec<_> = linears
        .iter()
        .filter(|l| eligible(l) && seen.insert(l.start))
        .map(|l| {
            let store = l.kernels.stored.expect("eligible").store;
            let panel = PANEL_ROWS * (l.len / l.rows);
            (l.start, l.len, l.cols, panel, store)
        })
        .collect();
    if matrices.is_empty() {
        return Ok((file, None));
    }
    let failed = |e: std::io::Error| ModelError::Unsupported(format!("storing panels: {e}"));
    let (file, in_place) = file
        .rewrite(|bytes| {
            for &(start, len, cols, pb, store) in &matrices {
                bytes[start..start + len].par_chunks_mut(pb).for_each_init(
                    || vec![0u8; pb],
                    |rows, panel| {
                        rows.copy_from_slice(panel);
                        store(cols, rows, panel);
                    },
                );
            }
        })
        .map_err(failed)?;
    // Where each matrix lies now: in place, or at an offset of the buffer.
    let mut moved = std::collections::BTreeMap::new();
    let panels = match in_place {
        Some(()) => None,
        None => {
            let total = matrices.iter().map(|m| m.1).sum();
            let mut buf = lamina_gguf::anonymous(total).map_err(failed)?;
            let mut at = 0;
            for &(start, len, cols, pb, store) in &matrices {
                // A step at a time, its rows released once stored, so that a
                // large matrix (an LM head) is not resident twice at once.
                let step = (RELEASE_STEP / pb).max(1) * pb;
                for from in (0..len).step_by(step) {
                    let n = step.min(len - from);
                    let rows = &file.as_bytes()[start + from..start + from + n];
                    buf[at + from..at + from + n]
                        .par_chunks_mut(pb)
                        .zip(rows.par_chunks(pb))
                        .for_each(|(panel, rows)| store(cols, rows, panel));
                    file.release(start + from, n).map_err(failed)?;
                }
                moved.insert(start, at);
                at += len;
            }
            Some(buf.make_read_only().map_err(failed)?)
        }
    };
    for l in linears.iter_mut().filter(|l| eligible(l)) {
        if let Some(&at) = moved.get(&l.start) {
            l.source = Source::Panels;
            l.start = at;
        }
        l.layout = Layout::Panels;
    }
    Ok((file, panels))
}
