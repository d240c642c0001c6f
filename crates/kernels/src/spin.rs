//! A persistent worker pool for the many short parallel regions of a forward
//! pass (seven matmuls and an attention per layer, each tens of microseconds
//! for small batches). Workers spin briefly on a generation counter between
//! regions instead of being woken through the OS each time, and park after
//! [`SPIN_ITERS`] idle spins so an idle pool costs no CPU.
//!
//! The caller thread works too: `run` publishes the job, takes task indices
//! from the same atomic counter as the workers, and returns once every task
//! ran and every worker that joined the job has left it (a worker that was
//! descheduled and never joined is not waited for). Concurrent `run` calls on one
//! pool are serialized; `run` allocates nothing.
//!
//! Threads with nothing to do prefetch the memory of the latest
//! [`ThreadPool::prefetch_hint`] (decoding names the layer's KV-cache rows
//! before its Q/K/V matmul, so attention finds them in cache instead of
//! waiting on one DRAM miss after another).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::pool::{Span, ThreadPool};

/// Idle spins before a worker parks (a few hundred microseconds).
const SPIN_ITERS: u32 = 1 << 16;

type Job = *const (dyn Fn(usize) + Sync);

struct Shared {
    /// The current job; written only by the caller holding `run_lock`, before
    /// `generation` is bumped, and read by workers after they observe the bump.
    job: UnsafeCell<Option<Job>>,
    n_tasks: AtomicUsize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// Workers inside the current job (between joining and leaving it).
    active: AtomicUsize,
    /// Whether the current job still accepts workers.
    open: AtomicBool,
    generation: AtomicUsize,
    stop: AtomicBool,
    sleepers: Mutex<usize>,
    wake: Condvar,
    hint: Hint,
}

/// Spans a prefetch hint keeps (more are dropped).
const HINT_SPANS: usize = 4;
/// Bytes of each span prefetched at most: a hint is for the start of what
/// the next regions read, not for streams longer than a core's L2.
const HINT_SPAN_BYTES: usize = 128 << 10;
/// Cache lines prefetched between checks for new work.
const HINT_STEP_LINES: usize = 8;

/// The latest prefetch hint, under a sequence lock: `seq` is odd while the
/// spans change. A torn read could only prefetch the wrong lines.
struct Hint {
    seq: AtomicUsize,
    spans: [(AtomicUsize, AtomicUsize); HINT_SPANS],
}

impl Hint {
    fn set(&self, spans: &[Span]) {
        self.seq.fetch_add(1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for (i, (addr, len)) in self.spans.iter().enumerate() {
            let span = spans.get(i).copied().unwrap_or_default();
            addr.store(span.addr, Ordering::Relaxed);
            len.store(span.len, Ordering::Relaxed);
        }
        self.seq.fetch_add(1, Ordering::Release);
    }
}

/// One thread's progress through the latest hint.
struct Prefetcher {
    seq: usize,
    span: usize,
    at: usize,
}

impl Prefetcher {
    fn new() -> Self {
        Prefetcher {
            seq: 0,
            span: HINT_SPANS,
            at: 0,
        }
    }

    /// Prefetches the next few lines of the hint; false when there is
    /// nothing (left) to prefetch.
    fn step(&mut self, hint: &Hint) -> bool {
        let seq = hint.seq.load(Ordering::Acquire);
        if seq != self.seq {
            if seq & 1 == 1 {
                return false;
            }
            (self.seq, self.span, self.at) = (seq, 0, 0);
        }
        if self.span >= HINT_SPANS {
            return false;
        }
        let (addr, len) = &hint.spans[self.span];
        let (addr, len) = (addr.load(Ordering::Relaxed), len.load(Ordering::Relaxed));
        std::sync::atomic::fence(Ordering::Acquire);
        if hint.seq.load(Ordering::Relaxed) != seq {
            return true;
        }
        let len = len.min(HINT_SPAN_BYTES);
        if self.at >= len {
            self.span = if len == 0 { HINT_SPANS } else { self.span + 1 };
            self.at = 0;
            return self.span < HINT_SPANS;
        }
        let end = (self.at + 64 * HINT_STEP_LINES).min(len);
        while self.at < end {
            crate::matmul::prefetch_line((addr.wrapping_add(self.at)) as *const u8);
            self.at += 64;
        }
        true
    }
}

// SAFETY: `job` is only written while no worker can read it (between a
// generation's release and the next bump, under `run_lock`), and the
// pointed-to closure is `Sync`; everything else is atomics and a mutex.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A pool of `threads - 1` persistent workers plus the calling thread.
pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run`; holds the caller's progress through the hint.
    run_lock: Mutex<Prefetcher>,
}

impl std::fmt::Debug for SpinPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinPool")
            .field("threads", &(self.workers.len() + 1))
            .finish()
    }
}

impl SpinPool {
    /// A pool running tasks on `threads` threads in all (at least 1).
    pub fn new(threads: usize) -> SpinPool {
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(None),
            n_tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            open: AtomicBool::new(false),
            generation: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
            hint: Hint {
                seq: AtomicUsize::new(0),
                spans: std::array::from_fn(|_| (AtomicUsize::new(0), AtomicUsize::new(0))),
            },
        });
        let workers = (1..threads.max(1))
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("lamina-worker-{i}"))
                    .spawn(move || worker(&s, 0))
                    .expect("spawning a worker thread")
            })
            .collect();
        SpinPool {
            shared,
            workers,
            run_lock: Mutex::new(Prefetcher::new()),
        }
    }
}

/// Runs tasks of the current job until none are left.
fn drain(s: &Shared, job: &(dyn Fn(usize) + Sync)) {
    let n = s.n_tasks.load(Ordering::Acquire);
    loop {
        let i = s.next.fetch_add(1, Ordering::AcqRel);
        if i >= n {
            break;
        }
        job(i);
        s.done.fetch_add(1, Ordering::AcqRel);
    }
}

/// `seen` is the generation at spawn time (0): a worker that starts late still
/// takes the job published before it ran.
fn worker(s: &Shared, mut seen: usize) {
    let mut prefetcher = Prefetcher::new();
    loop {
        let mut spins = 0u32;
        let g = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen || s.stop.load(Ordering::Acquire) {
                break g;
            }
            if prefetcher.step(&s.hint) {
                continue;
            }
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                let mut sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
                *sleepers += 1;
                while s.generation.load(Ordering::Acquire) == seen
                    && !s.stop.load(Ordering::Acquire)
                {
                    sleepers = s.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
                }
                *sleepers -= 1;
                spins = 0;
            }
        };
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = g;
        // Join, then check the job is still open: with SeqCst on both sides, either the
        // caller sees this worker in `active` (and waits for it) or this worker sees the
        // job closed (and leaves without touching it) — the Dekker pattern.
        s.active.fetch_add(1, Ordering::SeqCst);
        if s.open.load(Ordering::SeqCst) && s.generation.load(Ordering::SeqCst) == g {
            // SAFETY: the job is open, so the caller has not returned: it waits for
            // `active` to drop to zero before clearing `job` and releasing the closure.
            if let Some(job) = unsafe { *s.job.get() } {
                // SAFETY: as above: the closure outlives this use.
                drain(s, unsafe { &*job });
            }
        }
        s.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ThreadPool for SpinPool {
    fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    fn run(&self, n_tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if n_tasks <= 1 || self.workers.is_empty() {
            (0..n_tasks).for_each(f);
            return;
        }
        let mut prefetcher = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // Erase the closure's lifetime: workers use it only while the job is open or
        // they are counted in `active`, and this function waits out both before returning.
        // SAFETY: only the lifetime changes (same fat-pointer layout); see above for why
        // the pointer is never used after `f`'s borrow ends.
        let job: Job = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), Job>(f as *const _)
        };
        // SAFETY: no worker reads `job` now: the previous job was closed with no worker
        // inside (waited for below), and none reads it before the bump that follows.
        unsafe { *s.job.get() = Some(job) };
        s.n_tasks.store(n_tasks, Ordering::Release);
        s.next.store(0, Ordering::Release);
        s.done.store(0, Ordering::Release);
        s.open.store(true, Ordering::SeqCst);
        s.generation.fetch_add(1, Ordering::SeqCst);
        if *s.sleepers.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
            s.wake.notify_all();
        }
        drain(s, f);
        let mut spins = 0u32;
        let mut wait = |cond: &dyn Fn() -> bool| {
            while !cond() {
                if prefetcher.step(&s.hint) {
                    continue;
                }
                // Yield now and then: on an oversubscribed machine the worker we wait
                // for may need this core.
                spins += 1;
                if spins.is_multiple_of(1 << 12) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        };
        // Every task ran; then no worker may join any more, and those inside leave.
        wait(&|| s.done.load(Ordering::Acquire) >= n_tasks);
        s.open.store(false, Ordering::SeqCst);
        wait(&|| s.active.load(Ordering::SeqCst) == 0);
        // SAFETY: the job is closed and no worker is inside it; none reads `job` before
        // the next generation is published.
        unsafe { *s.job.get() = None };
    }

    fn prefetch_hint(&self, spans: &[Span]) {
        self.shared.hint.set(spans);
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _sleepers = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_task_runs_exactly_once() {
        for threads in [1, 2, 3, 5] {
            let pool = SpinPool::new(threads);
            for n in [0usize, 1, 2, 7, 100, 1000] {
                let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                pool.run(n, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "{threads} threads, {n} tasks"
                );
            }
        }
    }

    #[test]
    fn prefetcher_walks_each_span_up_to_its_cap_then_stops() {
        let hint = Hint {
            seq: AtomicUsize::new(0),
            spans: std::array::from_fn(|_| (AtomicUsize::new(0), AtomicUsize::new(0))),
        };
        let steps = |p: &mut Prefetcher| std::iter::from_fn(|| p.step(&hint).then_some(())).count();
        let mut p = Prefetcher::new();
        assert_eq!(steps(&mut p), 0, "no hint yet");
        let a = vec![0u8; 3000];
        let b = vec![0u8; 2 * HINT_SPAN_BYTES];
        hint.set(&[Span::of(&a), Span::of(&b)]);
        let lines = |bytes: usize| bytes.div_ceil(64 * HINT_STEP_LINES);
        // One step per group of lines, one to move past each finished span.
        assert_eq!(steps(&mut p), lines(3000) + lines(HINT_SPAN_BYTES) + 2);
        assert_eq!(steps(&mut p), 0, "a hint is walked once");
        drop((a, b));
        // A new hint (here pointing at freed memory: prefetches never fault) restarts.
        let pool = SpinPool::new(2);
        pool.prefetch_hint(&[Span {
            addr: 64,
            len: 4096,
        }]);
        let sum = AtomicU64::new(0);
        pool.run(8, &|i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 28);
    }

    #[test]
    fn workers_wake_after_parking_and_concurrent_callers_serialize() {
        let pool = Arc::new(SpinPool::new(3));
        let sum = AtomicU64::new(0);
        pool.run(10, &|i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        });
        // Long enough for the workers to park.
        std::thread::sleep(std::time::Duration::from_millis(50));
        pool.run(10, &|i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 90);
        let total = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (p, t) = (Arc::clone(&pool), Arc::clone(&total));
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        p.run(16, &|_| {
                            t.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(total.load(Ordering::Relaxed), 4 * 50 * 16);
    }
}
