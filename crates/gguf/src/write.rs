//! Streaming GGUF writer.
//!
//! A [`GgufBuilder`] collects metadata and tensor shapes; [`GgufBuilder::write_header`]
//! writes everything up to the data section, and the returned [`TensorWriter`]
//! takes each tensor's bytes in order (whole or in chunks), padding between
//! tensors as llama.cpp does, so a file is never held in memory.

use std::collections::HashMap;
use std::io::Write;

use crate::error::{Error, Result};
use crate::read::{DEFAULT_ALIGNMENT, MAGIC, MAX_ALIGNMENT, MAX_DIMS};
use crate::types::GgmlType;
use crate::value::OwnedValue;

/// Shape and placement of one tensor to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset relative to the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

/// Collects the contents of a GGUF file before it is written.
#[derive(Clone, Debug)]
pub struct GgufBuilder {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, OwnedValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorSpec>,
    tensor_index: HashMap<String, usize>,
    data_size: u64,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufBuilder {
    /// An empty version-3 file with the default alignment.
    pub fn new() -> Self {
        GgufBuilder {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            key_index: HashMap::new(),
            tensors: Vec::new(),
            tensor_index: HashMap::new(),
            data_size: 0,
        }
    }

    /// Sets the format version written (2 or 3).
    pub fn set_version(&mut self, version: u32) -> Result<()> {
        if !(2..=3).contains(&version) {
            return Err(Error::Writer(format!(
                "cannot write GGUF version {version}"
            )));
        }
        self.version = version;
        Ok(())
    }

    /// Sets a metadata key, replacing its value in place if it exists.
    /// `general.alignment` must be a u32 power of two no larger than
    /// [`MAX_ALIGNMENT`](crate::MAX_ALIGNMENT) and must be set before any
    /// tensor is added.
    pub fn set(&mut self, key: impl Into<String>, value: OwnedValue) -> Result<()> {
        let key = key.into();
        validate_value(&key, &value, 0)?;
        if key == "general.alignment" {
            match value {
                OwnedValue::U32(a) if a.is_power_of_two() && u64::from(a) <= MAX_ALIGNMENT => {
                    if !self.tensors.is_empty() {
                        return Err(Error::Writer(
                            "general.alignment must be set before tensors are added".into(),
                        ));
                    }
                    self.alignment = a.into();
                }
                _ => {
                    return Err(Error::Writer(format!(
                        "general.alignment must be a u32 power of two no larger than \
                         {MAX_ALIGNMENT}, got {value:?}"
                    )));
                }
            }
        }
        match self.key_index.get(&key) {
            Some(&i) => self.metadata[i].1 = value,
            None => {
                self.key_index.insert(key.clone(), self.metadata.len());
                self.metadata.push((key, value));
            }
        }
        Ok(())
    }

    /// Removes a metadata key if present.
    pub fn remove(&mut self, key: &str) {
        if let Some(i) = self.key_index.remove(key) {
            self.metadata.remove(i);
            for idx in self.key_index.values_mut() {
                if *idx > i {
                    *idx -= 1;
                }
            }
        }
    }

    /// The metadata set so far, in order.
    pub fn metadata(&self) -> &[(String, OwnedValue)] {
        &self.metadata
    }

    /// Adds a tensor (its data is written later, in the order added).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ggml_type: GgmlType,
        shape: &[u64],
    ) -> Result<&TensorSpec> {
        let name = name.into();
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(Error::BadDimCount {
                tensor: name,
                n_dims: shape.len() as u32,
            });
        }
        let bad = |why| Error::BadShape {
            tensor: name.clone(),
            shape: shape.to_vec(),
            why,
        };
        if !shape[0].is_multiple_of(ggml_type.block_size() as u64) {
            return Err(bad("row length is not a multiple of the block size"));
        }
        let n_bytes = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| ggml_type.row_bytes(n))
            .ok_or_else(|| bad("byte size overflows"))?;
        if self.tensor_index.contains_key(&name) {
            return Err(Error::DuplicateTensor(name));
        }
        let offset = self.data_size;
        self.data_size = offset + n_bytes.div_ceil(self.alignment) * self.alignment;
        self.tensor_index.insert(name.clone(), self.tensors.len());
        self.tensors.push(TensorSpec {
            name,
            shape: shape.to_vec(),
            ggml_type,
            offset,
            n_bytes,
        });
        Ok(self.tensors.last().expect("just pushed"))
    }

    /// The tensors added so far.
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// Writes the header, metadata, tensor infos and padding; returns the
    /// writer that takes the tensor data.
    pub fn write_header<W: Write>(self, mut w: W) -> Result<TensorWriter<W>> {
        let mut header = Vec::with_capacity(4096);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&self.version.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut header, key.as_bytes());
            header.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut header, value);
        }
        for t in &self.tensors {
            put_string(&mut header, t.name.as_bytes());
            header.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in &t.shape {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&(t.ggml_type as u32).to_le_bytes());
            header.extend_from_slice(&t.offset.to_le_bytes());
        }
        let padded = (header.len() as u64).div_ceil(self.alignment) * self.alignment;
        header.resize(padded as usize, 0);
        w.write_all(&header)?;
        Ok(TensorWriter {
            w,
            alignment: self.alignment,
            tensors: self.tensors,
            next: 0,
            written_in_current: 0,
        })
    }
}

fn validate_value(key: &str, value: &OwnedValue, depth: usize) -> Result<()> {
    if let OwnedValue::Array(elem_type, items) = value {
        if depth >= crate::read::MAX_ARRAY_DEPTH {
            return Err(Error::NestingTooDeep {
                key: key.to_string(),
                max: crate::read::MAX_ARRAY_DEPTH,
            });
        }
        for item in items {
            if item.value_type() != *elem_type {
                return Err(Error::Writer(format!(
                    "key {key}: array of {elem_type} holds a {}",
                    item.value_type()
                )));
            }
            validate_value(key, item, depth + 1)?;
        }
    }
    Ok(())
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

fn put_value(out: &mut Vec<u8>, value: &OwnedValue) {
    match value {
        OwnedValue::U8(v) => out.push(*v),
        OwnedValue::I8(v) => out.push(*v as u8),
        OwnedValue::Bool(v) => out.push(u8::from(*v)),
        OwnedValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        OwnedValue::String(s) => put_string(out, s),
        OwnedValue::Array(elem_type, items) => {
            out.extend_from_slice(&(*elem_type as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                // Nested arrays carry their own element type and length.
                put_value(out, item);
            }
        }
    }
}

/// Takes tensor data, in the order the tensors were added.
#[derive(Debug)]
pub struct TensorWriter<W: Write> {
    w: W,
    alignment: u64,
    tensors: Vec<TensorSpec>,
    next: usize,
    written_in_current: u64,
}

impl<W: Write> TensorWriter<W> {
    /// The tensor whose data is expected next, or `None` when all are written.
    pub fn next_tensor(&self) -> Option<&TensorSpec> {
        self.tensors.get(self.next)
    }

    /// Writes a whole tensor's data.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<()> {
        let spec = self
            .next_tensor()
            .ok_or_else(|| Error::Writer("all tensors are already written".into()))?;
        if self.written_in_current != 0 || data.len() as u64 != spec.n_bytes {
            return Err(Error::Writer(format!(
                "tensor {}: expected {} bytes, got {}",
                spec.name,
                spec.n_bytes,
                data.len()
            )));
        }
        self.write_chunk(data)
    }

    /// Writes part of the current tensor's data; when the tensor is complete
    /// the padding is written and the next tensor begins.
    pub fn write_chunk(&mut self, data: &[u8]) -> Result<()> {
        let spec = self
            .tensors
            .get(self.next)
            .ok_or_else(|| Error::Writer("all tensors are already written".into()))?;
        let left = spec.n_bytes - self.written_in_current;
        if data.len() as u64 > left {
            return Err(Error::Writer(format!(
                "tensor {}: {} bytes given but only {left} remain",
                spec.name,
                data.len()
            )));
        }
        self.w.write_all(data)?;
        self.written_in_current += data.len() as u64;
        if self.written_in_current == spec.n_bytes {
            let padded = spec.n_bytes.div_ceil(self.alignment) * self.alignment;
            let pad = (padded - spec.n_bytes) as usize;
            self.w.write_all(&[0u8; 256][..pad.min(256)])?;
            if pad > 256 {
                self.w.write_all(&vec![0u8; pad - 256])?;
            }
            self.next += 1;
            self.written_in_current = 0;
        }
        Ok(())
    }

    /// Checks every tensor was written, flushes, and returns the sink.
    pub fn finish(mut self) -> Result<W> {
        if let Some(spec) = self.tensors.get(self.next) {
            return Err(Error::Writer(format!(
                "tensor {} was never written ({} of {} tensors done)",
                spec.name,
                self.next,
                self.tensors.len()
            )));
        }
        self.w.flush()?;
        Ok(self.w)
    }
}
