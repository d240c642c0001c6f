//! The one error type of the crate. Every malformed input maps to a variant
//! that says what was wrong and where, so callers (and tests) can tell them apart.

use std::path::PathBuf;

/// A GGUF read, lookup or write failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("write failed: {0}")]
    Write(#[from] std::io::Error),
    #[error("not a GGUF file: magic bytes are {0:02x?}, expected \"GGUF\"")]
    BadMagic([u8; 4]),
    #[error("big-endian GGUF files are not supported (version field reads {0:#010x})")]
    BigEndian(u32),
    #[error("GGUF version {0} is not supported (only versions 2 and 3 are read)")]
    UnsupportedVersion(u32),
    #[error("file truncated while reading {what} at byte {offset}: need {need} bytes, {have} left")]
    Truncated {
        what: String,
        offset: u64,
        need: u64,
        have: u64,
    },
    #[error("{what} count {count} is impossible: the file has only {remaining} bytes left")]
    CountTooLarge {
        what: &'static str,
        count: u64,
        remaining: u64,
    },
    #[error("{what} is not valid UTF-8 (at byte {offset})")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("key {key}: unknown metadata value type {type_id}")]
    InvalidValueType { key: String, type_id: u32 },
    #[error("key {key}: arrays nested deeper than {max} levels")]
    NestingTooDeep { key: String, max: usize },
    #[error("duplicate metadata key {0}")]
    DuplicateKey(String),
    #[error(
        "general.alignment must be a power of two no larger than {max}, found {0}",
        max = crate::read::MAX_ALIGNMENT
    )]
    BadAlignment(u64),
    #[error("general.alignment must be of type u32, found {0}")]
    BadAlignmentType(&'static str),
    #[error("tensor {tensor}: unknown ggml type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error("tensor {tensor}: {n_dims} dimensions (at most 4 allowed, at least 1)")]
    BadDimCount { tensor: String, n_dims: u32 },
    #[error("tensor {tensor}: shape {shape:?} is invalid ({why})")]
    BadShape {
        tensor: String,
        shape: Vec<u64>,
        why: &'static str,
    },
    #[error("tensor {tensor}: offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error(
        "tensor {tensor}: data [{start}, {end}) lies outside the data section of {data_len} bytes"
    )]
    TensorOutOfBounds {
        tensor: String,
        start: u64,
        end: u64,
        data_len: u64,
    },
    #[error("tensors {first} and {second} overlap in the data section")]
    OverlappingTensors { first: String, second: String },
    #[error("duplicate tensor name {0}")]
    DuplicateTensor(String),
    #[error(
        "key {key}: copying its {elements} array elements would pass the limit of {max} \
         elements copied from one file"
    )]
    TooLargeToCopy {
        key: String,
        elements: u64,
        max: usize,
    },
    #[error("missing key {0}")]
    MissingKey(String),
    #[error("key {key}: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("missing tensor {0}")]
    MissingTensor(String),
    #[error("writer: {0}")]
    Writer(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
