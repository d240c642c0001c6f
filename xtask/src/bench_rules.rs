//! The rules `cargo xtask bench` holds its figures to: both engines at
//! their defaults with the same warm-up, no headline table from a busy
//! machine, a bandwidth share only where the weights cannot sit in the
//! last-level cache, and labels that say what a figure measures.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Untimed runs before the timed ones, for both engines: llama-bench's
/// default (one warm-up run) and `lamina bench`'s `--warmup` set to match.
pub(crate) const WARMUP_RUNS: usize = 1;

/// A machine is busy when load from other work exceeds this share of its cores.
pub(crate) const BUSY_SHARE: f64 = 0.5;

/// How often the load average is sampled during a run.
const LOAD_SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// What the table header says of how both engines ran.
pub(crate) const DEFAULTS_NOTE: &str = "both engines at their defaults (weights mapped from \
the file: lamina without --no-mmap, llama-bench without -mmp 0), one warm-up run each";

/// The one-shot row: a whole process for one short text, which for
/// llama-embedding is mostly its start-up (its default warm-up decode included).
pub(crate) const ONE_SHOT_LABEL: &str =
    "one-shot CLI embedding, whole process (median): mostly start-up";
/// The same with llama-embedding's warm-up decode skipped.
pub(crate) const ONE_SHOT_NO_WARMUP_LABEL: &str =
    "one-shot CLI embedding, whole process (median), llama-embedding --no-warmup";

/// The 1-minute load average.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Samples the load average in the background while the benchmark runs.
pub(crate) struct LoadSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<f64>>,
}

impl LoadSampler {
    pub(crate) fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                samples.extend(load_average());
                // Short sleeps, so stopping does not wait out a whole interval.
                let mut slept = Duration::ZERO;
                while slept < LOAD_SAMPLE_EVERY && !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    slept += Duration::from_millis(100);
                }
            }
            samples
        });
        LoadSampler { stop, handle }
    }

    /// Stops sampling; returns the samples (at least one, taken now).
    pub(crate) fn finish(self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = self.handle.join().unwrap_or_default();
        samples.extend(load_average());
        samples
    }
}

/// Why the machine counts as busy, or `None`. Before the run the load must
/// be under [`BUSY_SHARE`] of the cores; during it, the load beyond the
/// benchmark's own `threads` (each engine runs that many) must be too.
pub(crate) fn busy(
    before: Option<f64>,
    during: &[f64],
    threads: usize,
    cores: usize,
) -> Option<String> {
    let limit = BUSY_SHARE * cores as f64;
    if let Some(l) = before.filter(|&l| l > limit) {
        return Some(format!(
            "load average {l:.1} before the run, over {limit:.1} ({BUSY_SHARE} × {cores} cores)"
        ));
    }
    let peak = during.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (peak - threads as f64 > limit).then(|| {
        format!(
            "load average up to {peak:.1} during the run: {:.1} beyond the benchmark's {threads} \
             threads, over {limit:.1} ({BUSY_SHARE} × {cores} cores)",
            peak - threads as f64
        )
    })
}

/// `min–max (mean of n samples)` of the loads sampled during the run.
pub(crate) fn describe_load(during: &[f64]) -> String {
    if during.is_empty() {
        return "?".into();
    }
    let min = during.iter().copied().fold(f64::INFINITY, f64::min);
    let max = during.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = during.iter().sum::<f64>() / during.len() as f64;
    format!(
        "{min:.1}–{max:.1} (mean {mean:.1}, {} samples)",
        during.len()
    )
}

/// A sysfs cache size (`32K`, `480M`, `1G`, or bytes) in bytes.
pub(crate) fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let mult = match unit.trim() {
        "" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// The largest cache of CPU 0 (its last level), from sysfs.
pub(crate) fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| parse_cache_size(&std::fs::read_to_string(e.path().join("size")).ok()?))
        .max()
}

/// Whether a decoding rate can be judged as a share of memory bandwidth:
/// only when the weights a token reads are at least twice the last-level
/// cache, else they are read (partly) from the cache. `Err` says why not.
pub(crate) fn bandwidth_judged(weight_bytes: f64, llc_bytes: Option<u64>) -> Result<(), String> {
    let mib = |b: f64| b / (1u64 << 20) as f64;
    match llc_bytes {
        None => Err("not judged: last-level cache size unknown".into()),
        Some(llc) if weight_bytes < 2.0 * llc as f64 => Err(format!(
            "not judged: weights {:.0} MiB < 2 × last-level cache {:.0} MiB",
            mib(weight_bytes),
            mib(llc as f64)
        )),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_machine_is_not_busy() {
        // Two engines' two threads on two cores: the load they make is theirs.
        assert_eq!(busy(Some(0.3), &[0.4, 1.9, 2.4], 2, 2), None);
        assert_eq!(busy(None, &[], 2, 2), None);
    }

    #[test]
    fn load_before_or_beyond_the_benchmark_is_busy() {
        let before = busy(Some(1.5), &[2.0], 2, 2).unwrap();
        assert!(before.contains("1.5 before the run"), "{before}");
        let during = busy(Some(0.2), &[2.0, 3.5, 2.2], 2, 2).unwrap();
        assert!(
            during.contains("up to 3.5") && during.contains("1.5 beyond"),
            "{during}"
        );
        // Exactly at the limit is not over it.
        assert_eq!(busy(Some(1.0), &[3.0], 2, 2), None);
        assert!(busy(None, &[9.7], 2, 16).is_none());
        assert!(busy(None, &[10.1], 2, 16).is_some());
    }

    #[test]
    fn load_is_described() {
        assert_eq!(describe_load(&[]), "?");
        assert_eq!(
            describe_load(&[1.0, 2.0, 3.0]),
            "1.0–3.0 (mean 2.0, 3 samples)"
        );
    }

    #[test]
    fn cache_sizes_are_parsed() {
        assert_eq!(parse_cache_size("32K"), Some(32 << 10));
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("480M"), Some(480 << 20));
        assert_eq!(parse_cache_size("1G"), Some(1 << 30));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("12X"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    #[test]
    fn bandwidth_is_judged_only_beyond_twice_the_cache() {
        let mib = |n: u64| n << 20;
        // SmolLM2 Q8_0's ~138 MiB of weights in a 480 MiB L3: from cache.
        let why = bandwidth_judged(mib(138) as f64, Some(mib(480))).unwrap_err();
        assert!(
            why.contains("138 MiB < 2 × last-level cache 480 MiB"),
            "{why}"
        );
        assert!(bandwidth_judged(mib(959) as f64, Some(mib(480))).is_err());
        assert!(bandwidth_judged(mib(960) as f64, Some(mib(480))).is_ok());
        assert!(bandwidth_judged(mib(138) as f64, Some(mib(32))).is_ok());
        assert!(bandwidth_judged(1e9, None).is_err());
    }

    #[test]
    fn labels_say_what_is_measured() {
        assert!(ONE_SHOT_LABEL.contains("start-up"));
        assert!(ONE_SHOT_NO_WARMUP_LABEL.contains("--no-warmup"));
        assert!(DEFAULTS_NOTE.contains("without --no-mmap") && DEFAULTS_NOTE.contains("-mmp 0"));
        assert_eq!(WARMUP_RUNS, 1, "llama-bench's default warm-up");
    }
}
