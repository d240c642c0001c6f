//! A persistent worker pool for the many short parallel regions of a forward
//! pass (seven matmuls and an attention per layer, each tens of microseconds
//! for small batches). Workers spin briefly on a generation counter between
//! regions instead of being woken through the OS each time, and park after
//! `SPIN_ITERS` idle spins so an idle pool costs no CPU.
//!
//! A region's tasks are split into one contiguous range per thread (the
//! caller is thread 0), each with its own cursor on a cache line of its own:
//! a thread claims its own tasks from the front of its range without
//! touching a line another core holds, then takes what is left of the
//! others' ranges from their backs (so their streams of rows run on). The
//! caller returns once every range is exhausted and every worker that joined
//! the region has left it (a worker that was descheduled and never joined is
//! not waited for). Decoding runs several regions a layer, so what a region
//! costs beyond its work is paid over a hundred times a token: here about
//! one cache-line transfer to start a worker and one to learn it is done,
//! not one per claimed or finished task. Concurrent `run` calls on one pool are
//! serialized; `run` allocates nothing.
//!
//! Threads with nothing to do prefetch the memory of the latest
//! [`ThreadPool::prefetch_hint`] (decoding names the layer's KV-cache rows
//! before its Q/K/V matmul, so attention finds them in cache instead of
//! waiting on one DRAM miss after another).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::pool::{Span, ThreadPool};

/// Idle spins before a worker parks (a few hundred microseconds).
const SPIN_ITERS: u32 = 1 << 16;

type Job = *const (dyn Fn(usize) + Sync);

/// What the caller publishes and the workers only read, on lines of its own
/// (one transfer per worker per region).
#[repr(align(128))]
struct Control {
    /// The current job; written only by the caller holding `run_lock`, before
    /// `generation` is bumped, and read by workers after they observe the bump.
    job: UnsafeCell<Option<Job>>,
    n_tasks: AtomicUsize,
    /// Whether the current job still accepts workers.
    open: AtomicBool,
    generation: AtomicUsize,
}

/// One thread's range of the current job, on lines of its own.
#[repr(align(128))]
struct Slot {
    /// See [`cursor`]: the generation that last touched it and the range's
    /// unclaimed tasks. Every run tags every cursor before it ends, so one
    /// tagged in an earlier run never passes for the current one.
    cursor: AtomicU64,
    /// The generation this worker is inside, or 0 (unused for the caller's).
    /// On the cursor's line: the store that enters pays the line's transfer
    /// back from the caller, and the claims after it find it here.
    inside: AtomicUsize,
}

struct Shared {
    control: Control,
    slots: Box<[Slot]>,
    stop: AtomicBool,
    /// Workers parked (or about to park) on `wake`; also counted under `park`.
    sleeping: AtomicUsize,
    park: Mutex<()>,
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
    fn new() -> Hint {
        Hint {
            seq: AtomicUsize::new(0),
            spans: std::array::from_fn(|_| (AtomicUsize::new(0), AtomicUsize::new(0))),
        }
    }

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
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            control: Control {
                job: UnsafeCell::new(None),
                n_tasks: AtomicUsize::new(0),
                open: AtomicBool::new(false),
                generation: AtomicUsize::new(0),
            },
            slots: (0..threads)
                .map(|_| Slot {
                    cursor: AtomicU64::new(0),
                    inside: AtomicUsize::new(0),
                })
                .collect(),
            stop: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            hint: Hint::new(),
        });
        let workers = (1..threads)
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("lamina-worker-{i}"))
                    .spawn(move || worker(&s, i))
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

/// Thread `j`'s range of `n` tasks.
fn range(j: usize, threads: usize, n: usize) -> (usize, usize) {
    (j * n / threads, (j + 1) * n / threads)
}

/// Bits of a cursor's task indices (each of its front and back).
const INDEX_BITS: u32 = 20;
/// Most tasks one region takes (more are run as several regions).
const MAX_TASKS: usize = (1 << INDEX_BITS) - 1;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
/// A cursor's bits that are not its generation tag.
const TAG_MASK: u64 = !((1 << (2 * INDEX_BITS)) - 1);

/// A cursor word: the generation's low 24 bits, then the range's unclaimed
/// tasks `[front, back)`.
fn cursor(g: usize, front: usize, back: usize) -> u64 {
    (g as u64) << (2 * INDEX_BITS) | (front as u64) << INDEX_BITS | back as u64
}

/// Claims a task of `slot`'s range `[begin, end)` in generation `g`: its
/// first unclaimed one for the owner, its last for a thief (so the owner's
/// stream of rows runs on undisturbed); with whether it was the range's
/// last. Tags the cursor with `g` even when nothing is left.
fn claim(slot: &Slot, g: usize, begin: usize, end: usize, owner: bool) -> Option<(usize, bool)> {
    let tag = cursor(g, 0, 0);
    let mut v = slot.cursor.load(Ordering::Acquire);
    loop {
        let current = v & TAG_MASK == tag;
        let (front, back) = if current {
            (
                (v >> INDEX_BITS & INDEX_MASK) as usize,
                (v & INDEX_MASK) as usize,
            )
        } else {
            (begin, end)
        };
        let (task, after) = match (front < back, owner) {
            (false, _) if current => return None,
            (false, _) => (None, cursor(g, back, back)),
            (true, true) => (Some(front), cursor(g, front + 1, back)),
            (true, false) => (Some(back - 1), cursor(g, front, back - 1)),
        };
        match slot
            .cursor
            .compare_exchange_weak(v, after, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return task.map(|i| (i, back - front == 1)),
            Err(now) => v = now,
        }
    }
}

/// Runs tasks of generation `g`'s job (`n` tasks) as thread `j`: its own
/// range first, then what the other threads have not claimed of theirs.
fn drain(s: &Shared, job: &(dyn Fn(usize) + Sync), j: usize, g: usize, n: usize) {
    let threads = s.slots.len();
    for k in 0..threads {
        let r = (j + k) % threads;
        let (begin, end) = range(r, threads, n);
        while let Some((i, last)) = claim(&s.slots[r], g, begin, end, k == 0) {
            job(i);
            if last {
                // Looking again would only pull the cursor's line back.
                break;
            }
        }
    }
}

/// Worker `j`'s loop (`j >= 1`; the caller is thread 0). It starts at
/// generation 0, so one that starts late still takes the job published
/// before it ran.
fn worker(s: &Shared, j: usize) {
    let c = &s.control;
    let slot = &s.slots[j];
    let mut seen = 0;
    let mut prefetcher = Prefetcher::new();
    loop {
        let mut spins = 0u32;
        let g = loop {
            let g = c.generation.load(Ordering::Acquire);
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
                let mut guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
                // Counted before the last check (SeqCst on both sides): either this
                // worker sees the new generation or the caller sees it sleeping.
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                while c.generation.load(Ordering::SeqCst) == seen && !s.stop.load(Ordering::SeqCst)
                {
                    guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
                spins = 0;
            }
        };
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = g;
        // Enter, then check the job is still open: with SeqCst on both sides, either the
        // caller sees this worker inside (and waits for it) or this worker sees the job
        // closed (and leaves without touching it) — the Dekker pattern.
        slot.inside.store(g, Ordering::SeqCst);
        if c.open.load(Ordering::SeqCst) && c.generation.load(Ordering::SeqCst) == g {
            // SAFETY: the job is open, so the caller has not returned: it waits for
            // `inside` to leave `g` before clearing `job` and releasing the closure.
            if let Some(job) = unsafe { *c.job.get() } {
                let n = c.n_tasks.load(Ordering::Acquire);
                // SAFETY: as above: the closure outlives this use.
                drain(s, unsafe { &*job }, j, g, n);
            }
        }
        // Release: the caller reading 0 sees every task this worker ran.
        slot.inside.store(0, Ordering::Release);
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
        if n_tasks > MAX_TASKS {
            // Cursors hold task indices in `INDEX_BITS`.
            for base in (0..n_tasks).step_by(MAX_TASKS) {
                self.run(MAX_TASKS.min(n_tasks - base), &|i| f(base + i));
            }
            return;
        }
        let mut prefetcher = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let c = &s.control;
        // Erase the closure's lifetime: workers use it only while the job is open or
        // they are inside it, and this function waits out both before returning.
        // SAFETY: only the lifetime changes (same fat-pointer layout); see above for why
        // the pointer is never used after `f`'s borrow ends.
        let job: Job = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), Job>(f as *const _)
        };
        // SAFETY: no worker reads `job` now: the previous job was closed with no worker
        // inside (waited for below), and none reads it before the bump that follows.
        unsafe { *c.job.get() = Some(job) };
        c.n_tasks.store(n_tasks, Ordering::Release);
        c.open.store(true, Ordering::SeqCst);
        // Generation 0 is "none yet" (a fresh worker's `seen`) and `inside`'s
        // "outside": skip it when the counter wraps.
        let mut g = c.generation.load(Ordering::Relaxed).wrapping_add(1);
        if g == 0 {
            g = 1;
        }
        c.generation.store(g, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        drain(s, f, 0, g, n_tasks);
        // Every task is claimed; then no worker may enter any more, and those inside
        // finish their last task and leave.
        c.open.store(false, Ordering::SeqCst);
        let mut spins = 0u32;
        for slot in &s.slots[1..] {
            while slot.inside.load(Ordering::SeqCst) == g {
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
        }
        // SAFETY: the job is closed and no worker is inside it; none reads `job` before
        // the next generation is published.
        unsafe { *c.job.get() = None };
    }

    fn prefetch_hint(&self, spans: &[Span]) {
        self.shared.hint.set(spans);
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.park.lock().unwrap_or_else(|e| e.into_inner());
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
    fn threads_take_what_others_leave_and_every_cursor_gets_tagged() {
        // One thread's range is slow: the others must finish it from its back,
        // and every task still runs once, run after run (stale cursors from the
        // run before never pass for the current one).
        let pool = SpinPool::new(3);
        for round in 0..200usize {
            let n = 2 + round % 13;
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            pool.run(n, &|i| {
                if i < n / 3 {
                    std::hint::black_box((0..2000).sum::<u64>());
                }
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "round {round}"
            );
        }
        // Owners claim from the front, thieves from the back, and a claim says
        // whether it emptied the range.
        let slot = Slot {
            cursor: AtomicU64::new(cursor(6, 3, 3)),
            inside: AtomicUsize::new(0),
        };
        assert_eq!(claim(&slot, 7, 10, 14, true), Some((10, false)));
        assert_eq!(claim(&slot, 7, 10, 14, false), Some((13, false)));
        assert_eq!(claim(&slot, 7, 10, 14, false), Some((12, false)));
        assert_eq!(claim(&slot, 7, 10, 14, true), Some((11, true)));
        assert_eq!(claim(&slot, 7, 10, 14, true), None);
        // An empty range is tagged too.
        assert_eq!(claim(&slot, 8, 5, 5, false), None);
        assert_eq!(slot.cursor.load(Ordering::Relaxed), cursor(8, 5, 5));
    }

    #[test]
    #[cfg_attr(miri, ignore = "a million tasks")]
    fn regions_past_the_cursor_width_run_in_parts() {
        let pool = SpinPool::new(2);
        let n = MAX_TASKS + 5;
        let hits: Vec<std::sync::atomic::AtomicU8> = (0..n)
            .map(|_| std::sync::atomic::AtomicU8::new(0))
            .collect();
        pool.run(n, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn prefetcher_walks_each_span_up_to_its_cap_then_stops() {
        let hint = Hint::new();
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
