//! The small thread-pool interface matmul runs on (rayon's, or the spinning
//! [`crate::spin_pool`] pool), and [`rows2`] for per-token ops over a batch.

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
    /// Names memory the next parallel regions will read, so that threads
    /// which would otherwise idle (a worker before the next region, the
    /// caller waiting out a region's last task) fetch it into their caches
    /// meanwhile. A hint only: ignoring it is correct, and a stale one costs
    /// cache space, never a wrong result. The default ignores it.
    fn prefetch_hint(&self, spans: &[Span]) {
        let _ = spans;
    }
}

/// Memory named in a [`ThreadPool::prefetch_hint`]: an address and a length
/// in bytes. Only ever prefetched (a prefetch never faults, whatever the
/// address), so it may outlive what it points into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub addr: usize,
    pub len: usize,
}

impl Span {
    /// The bytes of `s`.
    pub fn of<T>(s: &[T]) -> Span {
        Span {
            addr: s.as_ptr() as usize,
            len: std::mem::size_of_val(s),
        }
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
    /// nothing once warm. Before `f`, every worker runs an empty job: each
    /// has then started and registered with crossbeam's epoch (one
    /// allocation per thread, at its first steal), which a worker whose OS
    /// thread started late would otherwise do inside `f`, on the per-token path.
    fn install(&self, f: &mut (dyn FnMut() + Send)) {
        if rayon::current_thread_index().is_some() {
            f()
        } else {
            rayon::broadcast(|_| ());
            rayon::scope(|_| f())
        }
    }
}

/// A pointer shared by the tasks of [`rows2`], each using disjoint rows.
struct Rows(*mut f32);
// SAFETY: `rows2` hands every task a disjoint range of rows, so no element is
// reached by two threads.
unsafe impl Sync for Rows {}

/// Below this many rows, [`rows2`] runs on the calling thread (waking the
/// pool costs more than per-token ops on a few rows).
pub const PARALLEL_ROWS: usize = 16;

/// What [`rows2`] calls for row `i`: `f(i, a_i, b_i)`.
pub type RowFn<'a> = dyn Fn(usize, &mut [f32], &mut [f32]) + Sync + 'a;

/// Calls `f(i, a_i, b_i)` for every row `i < n`, where `a` and `b` hold `n`
/// rows each (`a.len() / n` and `b.len() / n` values; either may be empty):
/// per-token ops (norms, RoPE, residuals, gated activations) over a batch,
/// in chunks of rows on `pool` from [`PARALLEL_ROWS`] rows on. A row's
/// result does not depend on the chunking.
pub fn rows2(pool: &dyn ThreadPool, n: usize, a: &mut [f32], b: &mut [f32], f: &RowFn<'_>) {
    if n == 0 {
        return;
    }
    assert!(
        a.len().is_multiple_of(n) && b.len().is_multiple_of(n),
        "{n} rows"
    );
    let (ra, rb) = (a.len() / n, b.len() / n);
    if n < PARALLEL_ROWS || pool.threads() < 2 {
        for i in 0..n {
            f(
                i,
                &mut a[i * ra..(i + 1) * ra],
                &mut b[i * rb..(i + 1) * rb],
            );
        }
        return;
    }
    let tasks = (pool.threads() * 2).min(n);
    let per = n.div_ceil(tasks);
    let (pa, pb) = (Rows(a.as_mut_ptr()), Rows(b.as_mut_ptr()));
    let (pa, pb) = (&pa, &pb);
    pool.run(n.div_ceil(per), &|task| {
        for i in task * per..((task + 1) * per).min(n) {
            // SAFETY: row `i < n` lies inside `a` and `b` (`n` rows of `ra` / `rb`
            // values, checked above), and each row belongs to exactly one task,
            // while `a` and `b` stay mutably borrowed by this call.
            let (ai, bi) = unsafe {
                (
                    std::slice::from_raw_parts_mut(pa.0.add(i * ra), ra),
                    std::slice::from_raw_parts_mut(pb.0.add(i * rb), rb),
                )
            };
            f(i, ai, bi);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows2_visits_every_row_once_with_its_own_slices() {
        for n in [0, 1, 5, PARALLEL_ROWS, 37] {
            for pool in [&Serial as &dyn ThreadPool, &Rayon] {
                let mut a: Vec<f32> = (0..n * 3).map(|v| v as f32).collect();
                let mut b = vec![0.0f32; n * 2];
                rows2(pool, n, &mut a, &mut b, &|i, a, b| {
                    assert_eq!((a.len(), b.len()), (3, 2));
                    assert_eq!(a[0], (i * 3) as f32);
                    a.iter_mut().for_each(|v| *v += 1.0);
                    b.fill(i as f32);
                });
                assert!(a.iter().enumerate().all(|(v, &x)| x == v as f32 + 1.0));
                assert!(b.chunks(2).enumerate().all(|(i, r)| r == [i as f32; 2]));
                let mut c: Vec<f32> = vec![1.0; n * 4];
                rows2(pool, n, &mut c, &mut [], &|_, c, e| {
                    assert!(e.is_empty());
                    c[0] = 2.0;
                });
                assert!(c.chunks(4).all(|r| r == [2.0, 1.0, 1.0, 1.0]));
            }
        }
    }
}
