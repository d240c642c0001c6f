//! Weights borrowed from the mapped file: a [`Linear`] records where its
//! bytes are, the forward pass borrows them per call, so loading copies
//! nothing but the small 1-D norm vectors.

use lamina_gguf::{GgmlType, Gguf};
use lamina_kernels::matmul::{Scratch, Weights, matmul, matmul_many};
use lamina_kernels::pool::ThreadPool;
use lamina_kernels::{TypeKernels, kernels};

use crate::ModelError;

/// A 2-D weight `rows × cols` (ggml's `{cols, rows}`) in the file.
#[derive(Clone, Debug)]
pub struct Linear {
    pub name: String,
    pub ty: GgmlType,
    pub kernels: &'static TypeKernels,
    /// Byte range of the data in the file.
    pub start: usize,
    pub len: usize,
    pub rows: usize,
    pub cols: usize,
}

impl Linear {
    /// The tensor's bytes within `file`.
    pub fn bytes<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.start..self.start + self.len]
    }

    /// `y[t] = W · x[t]` for `tokens` rows of `x`.
    pub fn forward(
        &self,
        file: &[u8],
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
        };
        matmul(&w, x, tokens, y, scratch, pool).map_err(|e| ModelError::Kernel {
            tensor: self.name.clone(),
            source: e,
        })
    }

    fn weights<'a>(&self, file: &'a [u8]) -> Weights<'a> {
        Weights {
            kernels: self.kernels,
            data: self.bytes(file),
            rows: self.rows,
            cols: self.cols,
        }
    }

    /// Row `r` dequantized into `out` (embedding lookup).
    pub fn row(&self, file: &[u8], r: usize, out: &mut [f32]) -> Result<(), ModelError> {
        let rb = self.len / self.rows;
        let bytes = &self.bytes(file)[r * rb..(r + 1) * rb];
        lamina_quant::dequantize_row(self.ty, bytes, out)
            .map_err(|e| ModelError::Unsupported(format!("{}: {e}", self.name)))
    }
}

/// Several projections of the same input in one pass (input quantized once,
/// one parallel region) — Q/K/V and gate/up.
pub fn forward_many<const N: usize>(
    lins: [&Linear; N],
    file: &[u8],
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
        source: e,
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
        if info.shape.as_slice() != [cols as u64, rows as u64] {
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
            source: e,
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
            start,
            len: data.len(),
            rows,
            cols,
        })
    }

    /// A 1-D vector of `n` values, dequantized to f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let info = self.info(name)?;
        if info.shape.as_slice() != [n as u64] {
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
