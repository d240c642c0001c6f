//! Compute kernels: quantized dot products, matmul, float ops, threading; SIMD chosen at run time.
//!
//! * [`isa`]: detects the instruction set once (`LAMINA_ISA` may force one) and caches it.
//! * [`dispatch`]: per weight type, a [`dispatch::TypeKernels`] of function pointers
//!   (activation quantizer, row dot product, tiles, panels) chosen once for the ISA.
//! * `scalar` (internal): the naive reference of every kernel; every SIMD
//!   kernel is tested against it.
//! * `x86_64::{avx2, avx512}`, `aarch64::neon` (internal): the
//!   `#[target_feature]` kernels, reachable only through [`dispatch`] after detection.
//! * `macros` (internal): `target_fns!`, each ISA's feature set spelled once,
//!   and `kernel_fns!`, which writes a kernel's checked wrapper and entry point.
//! * [`matmul`]: `y[t][r] = W[r]·x[t]` over a thread pool, with tiles over
//!   packed activations (`act_pack`, internal) or weight panels ([`panel`]) for batches.
//! * [`ops`]: float ops (RMSNorm, softmax, GELU, SiLU, RoPE, …).
//! * [`attention`]: online-softmax attention over contiguous key ranges.
//! * [`pool`]: the thread-pool trait the kernels run on; [`spin_pool`]: a
//!   persistent pool whose workers spin between short parallel regions.
//! * [`bandwidth`]: a memory-bandwidth measurement of this machine, for
//!   benchmarks' reports; no kernel depends on it.
//! * `alloc_count` (with the `test-support` feature): a counting global
//!   allocator for other crates' no-allocation tests.
//!
//! # Contracts shared by every kernel
//! Rows are passed as raw bytes: a weight row of `n` values is
//! `n / block_size` whole blocks of its type, an activation row the same for
//! the activation type. Lengths are checked once per row (a wrong length
//! panics, it never reads out of bounds); alignment is never required, SIMD
//! kernels load unaligned. Activations produced by this crate's quantizers lie
//! in `[-127, 127]`, which the x86 `maddubs` sign trick relies on (weights may
//! hold -128).

// Before every module that writes kernels: textual scope.
#[macro_use]
mod macros;

pub(crate) mod act_pack;
#[cfg(feature = "test-support")]
pub mod alloc_count;
pub mod attention;
mod attention_q8_0;
pub mod isa;
pub mod matmul;
pub mod ops;
// The panel layouts are only multiplied by x86 kernels; other targets keep
// the public types and the reference code their tests use.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub mod panel;
pub mod pool;
// Only x86 kernels prefetch ahead of their stream.
pub mod bandwidth;
pub mod dispatch;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod prefetch;
#[cfg(any(test, target_arch = "x86_64"))]
pub(crate) mod q3_k;
#[cfg(any(test, target_arch = "x86_64"))]
pub(crate) mod q5_k;
pub(crate) mod scalar;
pub mod spin_pool;

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

pub use dispatch::{TypeKernels, kernels, kernels_for};
pub use isa::Isa;
pub use lamina_gguf::GgmlType;

/// A failure to choose or run a kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// `LAMINA_ISA` named something that is not an ISA (the value given).
    #[error("LAMINA_ISA={0:?} is not one of scalar, avx2, avx512, amx, neon, dotprod")]
    UnknownIsa(String),
    /// `LAMINA_ISA` forced an ISA this CPU cannot execute.
    #[error("LAMINA_ISA={requested}: this CPU lacks {missing} (best available: {best})")]
    IsaUnavailable {
        /// The ISA asked for.
        requested: &'static str,
        /// The CPU features it needs that this CPU lacks.
        missing: &'static str,
        /// The best ISA this CPU has.
        best: &'static str,
    },
    /// `LAMINA_PREFETCH` was not a byte count in range (the value given).
    #[error(
        "LAMINA_PREFETCH={0:?} is not a prefetch distance: give bytes from 0 (no software prefetch) to 1048576"
    )]
    BadPrefetch(String),
    /// A weight type without dot-product kernels.
    #[error("no dot-product kernel for weight type {0}")]
    UnsupportedType(GgmlType),
    /// A buffer whose length disagrees with the shape given.
    #[error("shape mismatch: {what}: {got}, want {expected}")]
    Shape {
        /// Which buffer, and in what unit.
        what: &'static str,
        /// Its length for the shape given.
        expected: usize,
        /// Its length.
        got: usize,
    },
    /// Rows that are not a whole number of blocks of their types.
    #[error("{cols} columns is not a whole number of {ty} blocks")]
    PartialBlock {
        /// The weight type.
        ty: GgmlType,
        /// Values per row.
        cols: usize,
    },
    /// A matrix stored as panels whose rows are not whole panels.
    #[error("{ty} weights of {rows} rows stored as panels: not a whole number of 16-row panels")]
    PartialPanel {
        /// The weight type.
        ty: GgmlType,
        /// The matrix's rows.
        rows: usize,
    },
    /// A matrix stored as panels on an ISA with no kernels for them.
    #[error("{ty} weights stored as panels: this ISA has no kernels for them")]
    NoPanelKernels {
        /// The weight type.
        ty: GgmlType,
    },
    /// Attention heads that do not fit the kernels: no values, more than
    /// [`attention::MAX_HEAD_DIM`], or query heads that are not a whole
    /// number of groups per key-value head.
    #[error("attention with {n_head} heads, {n_head_kv} kv heads of {head_dim} values")]
    AttentionHeads {
        /// Query heads.
        n_head: usize,
        /// Key-value heads.
        n_head_kv: usize,
        /// Values per head.
        head_dim: usize,
    },
    /// A q8_0 cache whose heads are not whole Q8_0 blocks.
    #[error(
        "a q8_0 KV cache needs heads of a multiple of 32 values, not {head_dim}; use an f16 cache"
    )]
    Q8_0HeadDim {
        /// Values per head.
        head_dim: usize,
    },
    /// Attention buffers whose lengths disagree: queries not whole rows, an
    /// output not the queries' length, keys and values not alike, or a
    /// head-major buffer not whole heads of its rows.
    #[error("attention: q {q} values, out {out}, k {k}, v {v} (rows of {q_row} / {kv_row})")]
    AttentionBuffers {
        /// Query values.
        q: usize,
        /// Output values.
        out: usize,
        /// Key values.
        k: usize,
        /// Value values.
        v: usize,
        /// Values per query row.
        q_row: usize,
        /// Values per key or value row.
        kv_row: usize,
    },
    /// A query that attends key rows past those given.
    #[error("query {query} attends keys {start}..{end} but only {rows} rows are given")]
    KeysOutOfRange {
        /// The query's row.
        query: usize,
        /// The first key row it attends.
        start: usize,
        /// One past the last.
        end: usize,
        /// Key rows given.
        rows: usize,
    },
}
