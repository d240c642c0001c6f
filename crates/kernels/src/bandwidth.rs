//! This machine's memory bandwidth, the limit single-token matmuls (and so
//! token generation) are judged against: a STREAM-like read of a buffer far
//! larger than any L3, on every thread of a pool. And the round trip of a
//! cache line between two threads, which every parallel region pays: on a
//! shared VM it depends on where the vCPUs land, and with it the fixed
//! per-token cost of decoding.

use std::time::Instant;

use crate::pool::ThreadPool;

/// Bytes the probe reads per pass (1 GiB).
const PROBE_BYTES: usize = 1 << 30;
/// Tasks per thread: threads that finish early take more of the buffer, as
/// the matmuls' threads do.
const TASKS_PER_THREAD: usize = 8;

/// GB/s of a read-only sum over 1 GiB on `pool`'s threads: the best of
/// `passes` passes (at least one) of each of two reads, so a shared host's
/// noise lowers it less. One read leaves the fetching to the hardware's
/// prefetchers, the other also prefetches `PREFETCH_AHEAD` bytes ahead in
/// software, as the matmul kernels do: where memory is far, the hardware alone may
/// keep too few lines in flight to reach what a matmul reads. The buffer is anonymous
/// memory advised into 2 MiB pages where the OS offers them (4 KiB pages
/// cost streaming reads a page walk every 4 KiB).
pub fn memory_bandwidth(pool: &dyn ThreadPool, passes: usize) -> std::io::Result<f64> {
    Ok(BandwidthProbe::new()?.measure(pool, passes))
}

/// How far ahead the prefetching read prefetches (the matmuls' distance).
const PREFETCH_AHEAD: usize = 8192;

/// The probe's buffer, written once, for measuring again and again: on a
/// shared host the bandwidth drifts within seconds, so a benchmark judges
/// each timed run against probes taken right before and after it.
pub struct BandwidthProbe {
    map: memmap2::MmapMut,
}

impl BandwidthProbe {
    /// Maps and writes the 1 GiB buffer of [`memory_bandwidth`].
    pub fn new() -> std::io::Result<BandwidthProbe> {
        Self::with_bytes(PROBE_BYTES)
    }

    /// A buffer of `bytes` (rounded down to whole words).
    fn with_bytes(bytes: usize) -> std::io::Result<BandwidthProbe> {
        let mut map = memmap2::MmapMut::map_anon(bytes / 8 * 8)?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        // Written first: untouched pages all map the shared zero page and
        // would read from cache.
        map.fill(1);
        Ok(BandwidthProbe { map })
    }

    /// GB/s, the best of `passes` passes (at least one) of each read, after
    /// a plain pass that wakes the threads (see [`memory_bandwidth`]).
    pub fn measure(&self, pool: &dyn ThreadPool, passes: usize) -> f64 {
        let buf: &[u64] = bytemuck::cast_slice(&self.map[..]);
        let bytes = buf.len() * 8;
        let tasks = pool.threads().max(1) * TASKS_PER_THREAD;
        let per = buf.len().div_ceil(tasks);
        let pass = |prefetch: bool| {
            let t = Instant::now();
            pool.run(tasks, &|i| {
                let part = &buf[(i * per).min(buf.len())..((i + 1) * per).min(buf.len())];
                std::hint::black_box(if prefetch {
                    prefetching_sum(part)
                } else {
                    part.iter().fold(0u64, |a, &b| a.wrapping_add(b))
                });
            });
            bytes as f64 / t.elapsed().as_secs_f64() / 1e9
        };
        pass(false);
        (0..passes.max(1))
            .flat_map(|_| [pass(false), pass(true)])
            .fold(0.0, f64::max)
    }
}

/// The wrapping sum of `words`, prefetching [`PREFETCH_AHEAD`] bytes ahead
/// of each 256 bytes it reads (eight lanes, so it vectorizes).
fn prefetching_sum(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let chunks = words.chunks_exact(32);
    let tail = chunks.remainder();
    for chunk in chunks {
        let at = chunk.as_ptr() as usize + PREFETCH_AHEAD;
        for line in 0..4 {
            crate::matmul::prefetch_line(at.wrapping_add(line * 64) as *const u8);
        }
        for (i, &w) in chunk.iter().enumerate() {
            lanes[i % 8] = lanes[i % 8].wrapping_add(w);
        }
    }
    tail.iter()
        .chain(&lanes)
        .fold(0u64, |a, &b| a.wrapping_add(b))
}

/// Nanoseconds for a value to go from this thread to a second one and back
/// (the mean of `trips` round trips, after as many to warm up).
pub fn core_round_trip_ns(trips: usize) -> f64 {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ball = AtomicUsize::new(0);
    let trips = trips.max(1);
    // Spins, yielding now and then: on a single CPU the other thread needs it.
    let wait_for = |ball: &AtomicUsize, value: usize| {
        let mut spins = 0u32;
        while ball.load(Ordering::Acquire) != value {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1 << 10) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    };
    // Odd values go out, even ones come back.
    let bounce = |from: usize, to: usize| {
        for i in from..to {
            ball.store(2 * i + 1, Ordering::Release);
            wait_for(&ball, 2 * i + 2);
        }
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..2 * trips {
                wait_for(&ball, 2 * i + 1);
                ball.store(2 * i + 2, Ordering::Release);
            }
        });
        bounce(0, trips);
        let t = Instant::now();
        bounce(trips, 2 * trips);
        t.elapsed().as_secs_f64() * 1e9 / trips as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Serial;

    #[test]
    #[cfg_attr(miri, ignore = "a 16 MiB buffer")]
    fn bandwidth_is_a_positive_rate() {
        for pool in [&Serial as &dyn ThreadPool, &crate::pool::Rayon] {
            let probe = BandwidthProbe::with_bytes(16 << 20).unwrap();
            for passes in [0, 2] {
                let gbs = probe.measure(pool, passes);
                assert!(gbs.is_finite() && gbs > 0.0, "{gbs}");
            }
        }
    }

    #[test]
    fn the_prefetching_read_sums_every_word() {
        for n in [0, 5, 32, 100, 4099] {
            let words: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let plain = words.iter().fold(0u64, |a, &b| a.wrapping_add(b));
            assert_eq!(prefetching_sum(&words), plain, "{n} words");
        }
    }

    #[test]
    fn round_trip_is_a_positive_time() {
        let ns = core_round_trip_ns(if cfg!(miri) { 10 } else { 1000 });
        assert!(ns.is_finite() && ns > 0.0, "{ns}");
    }
}
