//! GGML block formats: `#[repr(C)]` blocks, dequantization and reference quantization.
#![deny(unsafe_op_in_unsafe_fn)]

pub use lamina_gguf::GgmlType;
