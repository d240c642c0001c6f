//! A global allocator that counts allocations, for the no-allocation tests of
//! crates that may not write `unsafe` themselves (`model`, `cli`):
//!
//! ```ignore
//! #[global_allocator]
//! static A: lamina_kernels::alloc_count::CountingAlloc = lamina_kernels::alloc_count::CountingAlloc;
//! lamina_kernels::alloc_count::count_threads();
//! let before = lamina_kernels::alloc_count::allocations();
//! // ... the code that must not allocate ...
//! assert_eq!(lamina_kernels::alloc_count::allocations(), before);
//! ```
//!
//! Only the threads that [`count_threads`] marks are counted: the test's own
//! and rayon's workers. The test harness's main thread still allocates (it
//! records each test it has started) after the test's thread is running,
//! and under load that once landed in a measured window.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// The system allocator, counting every `alloc`, `alloc_zeroed` and `realloc`
/// on the threads [`count_threads`] marked.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountingAlloc;

/// Counts the allocations of the calling thread and of every worker of
/// rayon's global pool from now on. Another pool's threads (a `SpinPool`'s)
/// are not counted: measure on `Rayon` or `Serial`.
pub fn count_threads() {
    COUNTED.with(|c| c.set(true));
    rayon::broadcast(|_| COUNTED.with(|c| c.set(true)));
}

/// Allocations made through [`CountingAlloc`] so far, on the counted threads.
///
/// # Panics
///
/// If the calling thread is not counted: call [`count_threads`] first, or
/// the test would count nothing.
pub fn allocations() -> usize {
    assert!(
        COUNTED.with(Cell::get),
        "call alloc_count::count_threads() before counting allocations"
    );
    ALLOCS.load(Ordering::SeqCst)
}

fn count() {
    // `try_with`: a thread being torn down may still free and allocate.
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}
