//! Compute kernels: quantized dot products, matmul, float ops, threading; SIMD chosen at run time.
//!
//! * [`isa`]: detects the instruction set once (`LAMINA_ISA` may force one) and caches it.
//! * [`table`]: per weight type, a [`table::TypeKernels`] of function pointers
//!   (activation quantizer, row dot product, 1×4 tile) chosen once for the ISA.
//! * [`scalar`]: the naive reference of every kernel; every SIMD kernel is tested against it.
//! * `x86_64::{avx2, avx512}`, `aarch64::neon`: the `#[target_feature]` kernels,
//!   reachable only through [`table`] after detection.
//! * [`matmul`]: `y[t][r] = W[r]·x[t]` over a thread pool, with tiles
//!   ([`pack`]) or weight panels ([`panel`]) for batches.
//! * [`ops`]: float ops (RMSNorm, softmax, GELU, SiLU, RoPE, …).
//! * [`attention`]: online-softmax attention over contiguous key ranges.
//! * [`probe`]: this machine's memory bandwidth, for benchmarks' reports.
//!
//! # Contracts shared by every kernel
//! Rows are passed as raw bytes: a weight row of `n` values is
//! `n / block_size` whole blocks of its type, an activation row the same for
//! the activation type. Lengths are checked once per row (a wrong length
//! panics, it never reads out of bounds); alignment is never required, SIMD
//! kernels load unaligned. Activations produced by this crate's quantizers lie
//! in `[-127, 127]`, which the x86 `maddubs` sign trick relies on (weights may
//! hold -128).

pub mod alloc_count;
pub mod attention;
pub mod isa;
pub mod matmul;
pub mod ops;
pub mod pack;
pub mod panel;
pub mod pool;
pub mod prefetch;
pub mod probe;
pub mod scalar;
pub mod spin;
pub mod table;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

pub use isa::Isa;
pub use lamina_gguf::GgmlType;
pub use table::{TypeKernels, kernels, kernels_for};

/// A failure to choose or run a kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// `LAMINA_ISA` named something that is not an ISA.
    #[error("LAMINA_ISA={0:?} is not one of scalar, avx2, avx512, neon, dotprod")]
    UnknownIsa(String),
    /// `LAMINA_ISA` forced an ISA this CPU cannot execute.
    #[error("LAMINA_ISA={requested}: this CPU lacks {missing} (best available: {best})")]
    IsaUnavailable {
        requested: &'static str,
        missing: &'static str,
        best: &'static str,
    },
    /// `LAMINA_PREFETCH` was not a byte count in range.
    #[error(
        "LAMINA_PREFETCH={0:?} is not a prefetch distance: give bytes from 0 (no software prefetch) to 1048576"
    )]
    BadPrefetch(String),
    /// A weight type without dot-product kernels.
    #[error("no dot-product kernel for weight type {0}")]
    UnsupportedType(GgmlType),
    /// Buffers whose sizes disagree with the shapes given.
    #[error("shape mismatch: {0}")]
    Shape(String),
}
