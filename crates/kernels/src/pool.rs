//! The small thread-pool interface matmul runs on, so rayon can later be
//! swapped for a persistent spinning pool without touching the kernels.

/// Runs `n_tasks` independent tasks, in parallel where it can, and returns when all are done.
pub trait ThreadPool: Sync {
    /// How many threads run tasks (used to size chunks).
    fn threads(&self) -> usize;
    /// Calls `f(i)` once for every `i` in `0..n_tasks`.
    fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync));
    /// Runs `f` where this pool's [`run`](ThreadPool::run) calls are cheapest,
    /// so a caller making many of them (a whole forward pass) enters the pool
    /// once. The default runs `f` here.
    fn install(&self, f: &mut (dyn FnMut() + Send)) {
        f()
    }
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
    /// Runs `f` on one of the pool's workers. Called from outside the pool,
    /// every `run` injects a job into rayon's global queue (a linked list
    /// that allocates a block every 63 jobs) and sleeps on a latch; from a
    /// worker, `run` pushes onto that worker's own deque, which allocates
    /// nothing once warm.
    fn install(&self, f: &mut (dyn FnMut() + Send)) {
        if rayon::current_thread_index().is_some() {
            f()
        } else {
            rayon::scope(|_| f())
        }
    }
}
