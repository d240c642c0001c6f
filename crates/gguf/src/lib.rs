//! GGUF, the model file format of llama.cpp: a zero-copy reader and a streaming writer.
//!
//! [`Gguf::open`] maps a file read-only and parses its header; tensor data is
//! handed out as slices of the map, never copied. The parser checks every
//! count, length and offset against the bytes that remain, so a hostile file
//! yields an [`Error`], never a panic or an oversized allocation.
//!
//! [`GgufBuilder`] writes files in the layout llama.cpp writes them, so a file
//! read and written back is byte-for-byte the original.
#![deny(unsafe_code)]

mod error;
mod mmap;
mod read;
mod staged;
mod types;
mod value;
mod write;

pub use error::{Error, Result};
/// The memory map types handed out by [`map_read_only`] and [`anonymous`].
pub use memmap2::{Mmap, MmapMut};
pub use mmap::{anonymous, map_read_only, read_into_memory};
pub use read::{DEFAULT_ALIGNMENT, Gguf, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, TensorInfo};
pub use staged::{StagedFile, remove_all_staged};
pub use types::GgmlType;
pub use value::{ArrayIter, ArrayView, MAX_COPIED_ELEMENTS, OwnedValue, Value, ValueType};
pub use write::{GgufBuilder, TensorSpec, TensorWriter};

impl<D: AsRef<[u8]>> Gguf<D> {
    /// A builder holding this file's metadata and tensor layout, so it can be
    /// written back (possibly modified) with [`GgufBuilder::write_header`].
    /// Arrays are copied within [`MAX_COPIED_ELEMENTS`].
    pub fn to_builder(&self) -> Result<GgufBuilder> {
        let mut b = GgufBuilder::new();
        b.set_version(self.version())?;
        let mut budget = MAX_COPIED_ELEMENTS;
        for (key, value) in self.metadata() {
            b.set(key, value.try_to_owned_value(key, &mut budget)?)?;
        }
        for t in self.tensors() {
            b.add_tensor(t.name.clone(), t.ggml_type, &t.shape)?;
        }
        Ok(b)
    }
}
