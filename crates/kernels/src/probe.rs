//! This machine's memory bandwidth, the limit single-token matmuls (and so
//! token generation) are judged against: a STREAM-like read of a buffer far
//! larger than any L3, on every thread of a pool.

use std::time::Instant;

use crate::pool::ThreadPool;

/// Bytes the probe reads per pass (1 GiB).
const PROBE_BYTES: usize = 1 << 30;
/// Tasks per thread: threads that finish early take more of the buffer, as
/// the matmuls' threads do.
const TASKS_PER_THREAD: usize = 8;

/// GB/s of a read-only sum over 1 GiB on `pool`'s threads: the best of
/// `passes` passes (at least one), so a shared host's noise lowers it less.
/// The buffer is anonymous memory advised into 2 MiB pages where the OS
/// offers them, as the engine's model mappings are (4 KiB pages cost
/// streaming reads a page walk every 4 KiB).
pub fn memory_bandwidth(pool: &dyn ThreadPool, passes: usize) -> std::io::Result<f64> {
    read_bandwidth(pool, PROBE_BYTES, passes)
}

/// [`memory_bandwidth`] over `bytes` (a multiple of 8).
fn read_bandwidth(pool: &dyn ThreadPool, bytes: usize, passes: usize) -> std::io::Result<f64> {
    let mut map = memmap2::MmapMut::map_anon(bytes)?;
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    // Written first: untouched pages all map the shared zero page and
    // would read from cache.
    map.fill(1);
    let buf: &[u64] = bytemuck::cast_slice(&map[..]);
    let tasks = pool.threads().max(1) * TASKS_PER_THREAD;
    let per = buf.len().div_ceil(tasks);
    let pass = || {
        let t = Instant::now();
        pool.run(tasks, &|i| {
            let part = &buf[(i * per).min(buf.len())..((i + 1) * per).min(buf.len())];
            std::hint::black_box(part.iter().fold(0u64, |a, &b| a.wrapping_add(b)));
        });
        bytes as f64 / t.elapsed().as_secs_f64() / 1e9
    };
    pass(); // faults the pages in, wakes the threads
    Ok((0..passes.max(1)).map(|_| pass()).fold(0.0, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::Serial;

    #[test]
    #[cfg_attr(miri, ignore = "a 16 MiB buffer")]
    fn bandwidth_is_a_positive_rate() {
        for pool in [&Serial as &dyn ThreadPool, &crate::pool::Rayon] {
            let gbs = read_bandwidth(pool, 16 << 20, 2).unwrap();
            assert!(gbs.is_finite() && gbs > 0.0, "{gbs}");
        }
    }
}
