//! Running a benchmarked process: its wall time, its memory sampled from
//! `/proc/PID/status`, and lamina's idle memory once a model is loaded.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use super::SHORT_TEXT;
use super::report::Cell;

/// Memory figures from `/proc/PID/status`, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mem {
    pub rss_kb: u64,
    pub rss_file_kb: u64,
    pub rss_anon_kb: u64,
    pub hwm_kb: u64,
}

/// Parses `/proc/PID/status`; `None` when the memory lines are absent (a
/// zombie or kernel thread).
pub(crate) fn parse_status(text: &str) -> Option<Mem> {
    let mut m = Mem::default();
    let mut seen = 0;
    for line in text.lines() {
        let Some((key, val)) = line.split_once(':') else {
            continue;
        };
        let field = match key {
            "VmRSS" => &mut m.rss_kb,
            "RssFile" => &mut m.rss_file_kb,
            "RssAnon" => &mut m.rss_anon_kb,
            "VmHWM" => &mut m.hwm_kb,
            _ => continue,
        };
        let num = val.split_whitespace().next()?;
        *field = num.parse().ok()?;
        seen += 1;
    }
    (seen == 4).then_some(m)
}

pub(crate) fn read_status(pid: u32) -> Option<Mem> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The largest values seen while a process ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Peak {
    /// The kernel's high-water mark of total RSS (exact up to the last sample).
    pub hwm_kb: u64,
    /// The largest file-backed and anonymous RSS sampled (not necessarily
    /// at the same moment).
    pub file_kb: u64,
    pub anon_kb: u64,
    pub samples: usize,
}

impl Peak {
    /// The table cell: peak RSS, split into file-backed and anonymous.
    pub(super) fn cell(&self) -> Cell {
        Cell::mem(self.hwm_kb, self.file_kb, self.anon_kb)
    }

    fn add(&mut self, m: &Mem) {
        self.hwm_kb = self.hwm_kb.max(m.hwm_kb).max(m.rss_kb);
        self.file_kb = self.file_kb.max(m.rss_file_kb);
        self.anon_kb = self.anon_kb.max(m.rss_anon_kb);
        self.samples += 1;
    }
    pub(super) fn json(&self) -> Value {
        json!({"hwm_kb": self.hwm_kb, "file_kb": self.file_kb, "anon_kb": self.anon_kb, "samples": self.samples})
    }
    pub(super) fn max_by_hwm(self, other: Peak) -> Peak {
        if other.hwm_kb > self.hwm_kb {
            other
        } else {
            self
        }
    }
}

pub(crate) struct Measured {
    pub output: Output,
    pub wall_s: f64,
    pub peak: Peak,
}

/// Runs `cmd` to completion (stdout and stderr captured), sampling its
/// `/proc` status every 5 ms from a second thread.
pub(crate) fn measure(cmd: &mut Command) -> Result<Measured> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = Peak::default();
            while !stop.load(Ordering::Relaxed) {
                match read_status(pid) {
                    Some(m) => peak.add(&m),
                    None if peak.samples > 0 => break,
                    None => {}
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    let output = child.wait_with_output()?;
    let wall_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let peak = watcher.join().unwrap_or_default();
    Ok(Measured {
        output,
        wall_s,
        peak,
    })
}

/// Like [`measure`], failing with the command's stderr when it fails.
pub(super) fn measure_ok(cmd: &mut Command) -> Result<Measured> {
    let m = measure(cmd)?;
    if !m.output.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}",
            m.output.status,
            tail(&String::from_utf8_lossy(&m.output.stderr), 20)
        );
    }
    Ok(m)
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// The state letter of `/proc/PID/stat` (R, S, D, Z, ...).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// lamina's memory once the model is loaded and before any text: `lamina
/// embed` opens the model, then reads its texts from stdin, so the process
/// is idle once it sleeps with an unchanging RSS.
pub(super) fn lamina_idle(lamina: &Path, model: &Path, threads: usize) -> Result<Mem> {
    let mut child = Command::new(lamina)
        .args(["embed", "-t", &threads.to_string(), "-m"])
        .arg(model)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let t0 = Instant::now();
    let mut last: Option<Mem> = None;
    let mut stable = 0;
    let idle = loop {
        std::thread::sleep(Duration::from_millis(20));
        let Some(m) = read_status(pid) else {
            let out = child.wait_with_output()?;
            bail!(
                "lamina embed exited while loading ({}): {}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 5)
            );
        };
        let sleeping = proc_state(pid) == Some('S');
        if sleeping && last.is_some_and(|l| l.rss_kb == m.rss_kb) {
            stable += 1;
        } else {
            stable = 0;
        }
        last = Some(m);
        if stable >= 15 {
            break m;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            bail!("lamina embed did not settle within 60 s of starting");
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{SHORT_TEXT}");
    }
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "lamina embed failed after idling");
    Ok(idle)
}

/// Runs a command with captured output, failing with its stderr if it fails.
pub(super) fn capture_ok(cmd: &mut Command) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 20)
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_is_parsed() {
        let text = "Name:\tlamina\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 1234567 kB\n\
                    VmSize:\t 1200000 kB\nVmHWM:\t  412345 kB\nVmRSS:\t  400000 kB\n\
                    RssAnon:\t   66000 kB\nRssFile:\t  333000 kB\nRssShmem:\t    1000 kB\nThreads:\t3\n";
        assert_eq!(
            parse_status(text),
            Some(Mem {
                rss_kb: 400_000,
                rss_file_kb: 333_000,
                rss_anon_kb: 66_000,
                hwm_kb: 412_345
            })
        );
        // A zombie has no memory lines.
        assert_eq!(
            parse_status("Name:\tx\nState:\tZ (zombie)\nThreads:\t1\n"),
            None
        );
        assert_eq!(
            parse_status("VmHWM:\tbad kB\nVmRSS:\t1 kB\nRssAnon:\t1 kB\nRssFile:\t1 kB\n"),
            None
        );
    }

    #[test]
    fn peak_keeps_maxima() {
        let mut p = Peak::default();
        p.add(&Mem {
            rss_kb: 10,
            rss_file_kb: 8,
            rss_anon_kb: 2,
            hwm_kb: 10,
        });
        p.add(&Mem {
            rss_kb: 9,
            rss_file_kb: 5,
            rss_anon_kb: 4,
            hwm_kb: 12,
        });
        assert_eq!((p.hwm_kb, p.file_kb, p.anon_kb, p.samples), (12, 8, 4, 2));
    }
}
