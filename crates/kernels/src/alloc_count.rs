//! A global allocator that counts allocations, for the no-allocation tests of
//! crates that may not write `unsafe` themselves (`model`, `cli`):
//!
//! ```ignore
//! #[global_allocator]
//! static A: lamina_kernels::alloc_count::CountingAlloc = lamina_kernels::alloc_count::CountingAlloc;
//! let before = lamina_kernels::alloc_count::allocations();
//! // ... the code that must not allocate ...
//! assert_eq!(lamina_kernels::alloc_count::allocations(), before);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting every `alloc`, `alloc_zeroed` and `realloc`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

/// Allocations made through [`CountingAlloc`] so far, on every thread.
pub fn allocations() -> usize {
    ALLOCS.load(Ordering::SeqCst)
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}
