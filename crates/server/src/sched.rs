//! Scheduling primitives for the inference threads: a closable FIFO job
//! queue and a fair turnstile that lets one forward pass run at a time.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use lamina_model::ThreadPool;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking worker is caught and its job answered with 500; the data
    // under these locks stays consistent, so poisoning is ignored.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A multi-consumer FIFO that workers block on; closing it wakes them all
/// and makes `pop` return `None` once it is empty.
pub struct JobQueue<T> {
    inner: Mutex<(VecDeque<T>, bool)>,
    cv: Condvar,
}

impl<T> Default for JobQueue<T> {
    fn default() -> Self {
        JobQueue {
            inner: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
        }
    }
}

impl<T> JobQueue<T> {
    /// Adds a job unless `limit` jobs already wait (then it is handed back).
    pub fn push(&self, job: T, limit: usize) -> Result<(), T> {
        let mut g = lock(&self.inner);
        if g.1 || g.0.len() >= limit {
            return Err(job);
        }
        g.0.push_back(job);
        drop(g);
        self.cv.notify_one();
        Ok(())
    }

    /// The oldest job, waiting for one; `None` when closed and empty.
    pub fn pop(&self) -> Option<T> {
        let mut g = lock(&self.inner);
        loop {
            if let Some(j) = g.0.pop_front() {
                return Some(j);
            }
            if g.1 {
                return None;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The oldest job, waiting until `deadline` at most.
    pub fn pop_until(&self, deadline: Instant) -> Option<T> {
        let mut g = lock(&self.inner);
        loop {
            if let Some(j) = g.0.pop_front() {
                return Some(j);
            }
            let now = Instant::now();
            if g.1 || now >= deadline {
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The oldest job if one waits now.
    pub fn try_pop(&self) -> Option<T> {
        lock(&self.inner).0.pop_front()
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses new jobs and wakes every waiting worker.
    pub fn close(&self) {
        lock(&self.inner).1 = true;
        self.cv.notify_all();
    }
}

/// A ticket lock: threads get their turn in the order they asked for it.
/// Every forward pass (an embedding batch, a generation step) runs while
/// holding a turn, so passes never compete for the compute pool, and a
/// worker that gives its turn back after each pass and asks again goes to
/// the back of the line: the models' workers take turns pass by pass.
/// The turnstile owns that pool.
pub struct Turnstile {
    /// (next ticket to hand out, ticket being served)
    inner: Mutex<(u64, u64)>,
    cv: Condvar,
    pool: Box<dyn ThreadPool + Send>,
}

/// A held turn; dropping it lets the next ticket in.
pub struct Turn<'a>(&'a Turnstile);

impl Turnstile {
    /// A turnstile in front of `pool`.
    pub fn new(pool: Box<dyn ThreadPool + Send>) -> Turnstile {
        Turnstile {
            inner: Mutex::new((0, 0)),
            cv: Condvar::new(),
            pool,
        }
    }

    /// The compute pool the passes run on (concurrent `run` calls on it
    /// would be serialized anyway; turns decide whose pass goes first).
    pub fn pool(&self) -> &dyn ThreadPool {
        &*self.pool
    }

    pub fn acquire(&self) -> Turn<'_> {
        let mut g = lock(&self.inner);
        let ticket = g.0;
        g.0 += 1;
        while g.1 != ticket {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        Turn(self)
    }

    /// Tickets handed out and not yet finished (the holder included).
    pub fn waiting(&self) -> u64 {
        let g = lock(&self.inner);
        g.0 - g.1
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.0.inner).1 += 1;
        self.0.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn queue_is_fifo_bounded_and_closable() {
        let q = JobQueue::default();
        assert!(q.push(1, 2).is_ok());
        assert!(q.push(2, 2).is_ok());
        assert_eq!(q.push(3, 2), Err(3));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop_until(Instant::now()), Some(2));
        assert_eq!(q.pop_until(Instant::now() + Duration::from_millis(5)), None);
        q.close();
        assert_eq!(q.pop(), None);
        assert_eq!(q.push(4, 10), Err(4));
    }

    #[test]
    fn turns_are_served_in_order() {
        let t = Arc::new(Turnstile::new(Box::new(lamina_model::Serial)));
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = t.acquire();
        let mut handles = Vec::new();
        for i in 0..4 {
            let (t2, order) = (t.clone(), order.clone());
            handles.push(std::thread::spawn(move || {
                let _turn = t2.acquire();
                order.lock().unwrap().push(i);
            }));
            // Let thread i take its ticket before thread i+1.
            while t.waiting() < i as u64 + 2 {
                std::thread::yield_now();
            }
        }
        drop(first);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    }
}
