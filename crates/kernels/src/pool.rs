//! The small thread-pool interface matmul runs on, so rayon can later be
//! swapped for a persistent spinning pool without touching the kernels.

/// Runs `n_tasks` independent tasks, in parallel where it can, and returns when all are done.
pub trait ThreadPool: Sync {
    /// How many threads run tasks (used to size chunks).
    fn threads(&self) -> usize;
    /// Calls `f(i)` once for every `i` in `0..n_tasks`.
    fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync));
}

/// Runs every task on the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl ThreadPool for Serial {
    fn threads(&self) -> usize {
        1
    }
    fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n_tasks).for_each(f);
    }
}

/// rayon's global pool (work stealing over `join`; allocation-free once warm).
#[derive(Clone, Copy, Debug, Default)]
pub struct Rayon;

impl ThreadPool for Rayon {
    fn threads(&self) -> usize {
        rayon::current_num_threads()
    }
    fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        use rayon::prelude::*;
        if n_tasks <= 1 {
            (0..n_tasks).for_each(f);
        } else {
            (0..n_tasks).into_par_iter().for_each(f);
        }
    }
}
