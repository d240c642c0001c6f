//! How a call's rows become tasks: equal chunks for batches, tapered
//! shares for one token (see the module doc of [`super`]).

use super::Weights;
use crate::panel::PANEL_ROWS;

/// Rows per task of a multi-token call over matrices of `rows` rows: about
/// four tasks per thread, each a whole number of eight-row groups where
/// there are eight rows, and at most 256 rows (and `max`), whose weights
/// stay in cache while the task runs them against each group of tokens.
/// Among the sizes from that down to half of it, the one whose tasks fill
/// the threads' shares most evenly ([`busiest_share`]), the largest of
/// those that tie: a thread whose share holds one more task finishes last.
pub(super) fn chunk_rows<const N: usize>(rows: [usize; N], threads: usize, max: usize) -> usize {
    let total: usize = rows.iter().sum();
    let threads = threads.max(1);
    let size = total
        .div_ceil(threads * 4)
        .next_multiple_of(8)
        .clamp(8, 256)
        .min((max / 8 * 8).max(8))
        .min(total.max(1));
    if size < 16 {
        return size;
    }
    (size.div_ceil(2)..=size)
        .rev()
        .step_by(8)
        .min_by_key(|&c| busiest_share(rows, c, threads))
        .unwrap_or(size)
}

/// The most rows any thread's share of the tasks holds, with tasks of
/// `chunk` rows over the matrices' `rows` ([`RowTasks`]' order), where each
/// thread claims a contiguous share of the tasks, as the spinning pool does
/// (the threads that finish first then take what is left of the others').
fn busiest_share<const N: usize>(rows: [usize; N], chunk: usize, threads: usize) -> usize {
    let count: usize = rows.iter().map(|r| r.div_ceil(chunk)).sum();
    // Task `i`'s rows.
    let task = |mut i: usize| {
        for r in rows {
            let tasks = r.div_ceil(chunk);
            if i < tasks {
                return (r - i * chunk).min(chunk);
            }
            i -= tasks;
        }
        0
    };
    (0..threads)
        .map(|j| {
            (j * count / threads..(j + 1) * count / threads)
                .map(task)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

/// Rows per panel task: whole panels, about four tasks per thread, the size
/// (down to half that) whose tasks the threads share most evenly, since a
/// task is long and a thread left with one more of them finishes last.
pub(super) fn panel_chunk_rows(rows: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let panels = rows.div_ceil(PANEL_ROWS).max(1);
    let target = panels.div_ceil(threads * 4);
    // The most panels any thread runs when tasks of `c` are claimed in turn.
    let busiest = |c: usize| panels.div_ceil(c).div_ceil(threads) * c;
    let best = (target.div_ceil(2)..=target)
        .rev()
        .min_by_key(|&c| busiest(c))
        .unwrap_or(1);
    best * PANEL_ROWS
}

/// The row chunks of a call's matrices as tasks: one chunk size over all of
/// them; task ids run through matrix 0's chunks, then 1's, …
pub(super) struct RowTasks<const N: usize> {
    chunk: usize,
    rows: [usize; N],
    tasks_of: [usize; N],
}

impl<const N: usize> RowTasks<N> {
    pub(super) fn new(wms: &[&Weights<'_>; N], chunk: usize) -> Self {
        let rows = wms.map(|w| w.rows);
        Self {
            chunk,
            rows,
            tasks_of: rows.map(|r| r.div_ceil(chunk)),
        }
    }
    pub(super) fn count(&self) -> usize {
        self.tasks_of.iter().sum()
    }
    /// Task `task`'s matrix and rows `r0..r1`.
    pub(super) fn locate(&self, task: usize) -> (usize, usize, usize) {
        let (mut m, mut t) = (0, task);
        while t >= self.tasks_of[m] {
            t -= self.tasks_of[m];
            m += 1;
        }
        let r0 = t * self.chunk;
        (m, r0, (r0 + self.chunk).min(self.rows[m]))
    }
}

/// Tasks per thread of a single-token call ([`TaperedTasks`]), at least.
/// Each task's claim is a locked read-modify-write (it waits for the
/// thread's earlier stores and holds back its later loads), and a task's
/// kernel starts anew, so a share is cut into as few tasks as keep the
/// threads' finishes close.
const TAPERED_TASKS: usize = 3;
/// A single-token call's last tasks stay within about this many units:
/// shares of more than `TAPERED_TASKS² ·` this many units get more tasks.
const LAST_TASK_UNITS: usize = 4;

/// The tasks of a single-token call: the rows of all its matrices, as if
/// one after the other, in whole `unit`-row steps, an even share per thread,
/// each share cut into `K` tasks that shrink toward its end (the first
/// about 2/K of it, the last about 1/K² of it: `K` is [`TAPERED_TASKS`], or
/// more where that would leave last tasks of more than
/// [`LAST_TASK_UNITS`]). A thread still streams its share as one run, and a
/// thread that finishes first takes the other's small last tasks, so the
/// threads end within about one small task of each other, where even tasks
/// would leave one thread idle for most of the last task in flight. Few
/// tasks, since each claim costs (see [`TAPERED_TASKS`]).
pub(super) struct TaperedTasks<const N: usize> {
    unit: usize,
    units: usize,
    threads: usize,
    /// `K`: tasks per thread.
    per_thread: usize,
    rows: [usize; N],
}

impl<const N: usize> TaperedTasks<N> {
    pub(super) fn new(wms: &[&Weights<'_>; N], unit: usize, threads: usize) -> Self {
        let rows = wms.map(|w| w.rows);
        let total: usize = rows.iter().sum();
        let (units, threads) = (total.div_ceil(unit), threads.max(1));
        // The last task is about share / K² units.
        let share = units.div_ceil(threads);
        let per_thread = TAPERED_TASKS.max(share.div_ceil(LAST_TASK_UNITS).isqrt() + 1);
        Self {
            unit,
            units,
            threads,
            per_thread,
            rows,
        }
    }
    pub(super) fn count(&self) -> usize {
        self.threads * self.per_thread
    }
    /// Calls `f(matrix, r0, r1)` for each matrix's rows in task `task` (none
    /// for an empty task; several where it spans the end of a matrix).
    pub(super) fn for_each(&self, task: usize, mut f: impl FnMut(usize, usize, usize)) {
        let k_tasks = self.per_thread;
        let (j, k) = (task / k_tasks, task % k_tasks);
        let start = j * self.units / self.threads;
        let share = (j + 1) * self.units / self.threads - start;
        // Boundary `i` of the share: share · (1 − (1 − i/K)²), rounded down
        // (so the last task is not empty), so task sizes fall linearly from
        // about 2/K of the share to a unit or a few.
        let edge = |i: usize| {
            let left = k_tasks - i;
            share - (share * left * left).div_ceil(k_tasks * k_tasks)
        };
        let (mut g0, g1) = (
            (start + edge(k)) * self.unit,
            (start + edge(k + 1)) * self.unit,
        );
        let mut base = 0;
        for (m, &rows) in self.rows.iter().enumerate() {
            let end = base + rows;
            if g0 < g1 && g0 < end {
                let r1 = g1.min(end);
                f(m, g0 - base, r1 - base);
                g0 = r1;
            }
            base = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType;
    use crate::matmul::Layout;

    /// Single-token tasks cover every row of every matrix once, in whole
    /// units except at a matrix's end, a share of the units per thread
    /// (`TAPERED_TASKS` tasks each, so the pool's ranges are the shares),
    /// and shrink toward each share's end.
    #[test]
    fn tapered_tasks_cover_each_row_once_and_shrink() {
        let k = crate::kernels(GgmlType::Q8_0).unwrap();
        let weights = |rows: usize| Weights {
            kernels: k,
            data: &[],
            rows,
            cols: 32,
            layout: Layout::Rows,
        };
        // Task sizes in rows, by thread, after checking the tasks' rows.
        let sizes = |rows: [usize; 3], unit: usize, threads: usize| -> Vec<Vec<usize>> {
            let wms = rows.map(weights);
            let tasks = TaperedTasks::new(&[&wms[0], &wms[1], &wms[2]], unit, threads);
            assert_eq!(tasks.count(), threads * tasks.per_thread);
            assert!(tasks.per_thread >= TAPERED_TASKS);
            let mut seen = rows.map(|r| vec![0u32; r]);
            let sizes = (0..tasks.count())
                .map(|task| {
                    let mut size = 0;
                    tasks.for_each(task, |m, r0, r1| {
                        assert!(
                            r0 < r1 && r1 <= rows[m],
                            "{rows:?}: task {task}: {m} {r0}..{r1}"
                        );
                        seen[m][r0..r1].iter_mut().for_each(|c| *c += 1);
                        size += r1 - r0;
                    });
                    size
                })
                .collect();
            assert!(seen.iter().flatten().all(|&c| c == 1), "{rows:?}");
            let sizes: Vec<usize> = sizes;
            sizes
                .chunks(tasks.per_thread)
                .map(<[usize]>::to_vec)
                .collect()
        };
        for (rows, unit, threads) in [
            ([576, 192, 192], 8, 2),
            ([1536, 1536, 0], 16, 2),
            ([49_152, 0, 0], 16, 2),
            ([100, 5, 3], 8, 3),
            ([7, 0, 0], 8, 4),
            ([0, 16, 0], 16, 2),
            ([0, 0, 0], 8, 2),
            ([262_144, 0, 0], 16, 2),
        ] {
            for share in sizes(rows, unit, threads) {
                assert!(
                    share.windows(2).all(|w| w[0] + unit >= w[1]),
                    "{rows:?}: {share:?}"
                );
                // The last tasks are small, however large the share.
                let last = share.iter().rev().find(|&&s| s > 0).copied().unwrap_or(0);
                assert!(last <= LAST_TASK_UNITS * unit, "{rows:?}: {share:?}");
            }
        }
        // SmolLM2's gate and up: a thread's 96 panels in five tasks (more
        // than three, so that the last stays within four panels).
        let panels: Vec<usize> = sizes([1536, 1536, 0], PANEL_ROWS, 2)[0]
            .iter()
            .map(|r| r / PANEL_ROWS)
            .collect();
        assert_eq!(panels, [34, 27, 19, 12, 4]);
        // Its queries, keys and values: 30 panels a thread in three.
        let qkv: Vec<usize> = sizes([576, 192, 192], PANEL_ROWS, 2)[0]
            .iter()
            .map(|r| r / PANEL_ROWS)
            .collect();
        assert_eq!(qkv, [16, 10, 4]);
        // Gemma 3's LM head: 8192 panels a thread in 46 tasks, the first 352
        // panels, the last 4.
        let head = &sizes([262_144, 0, 0], PANEL_ROWS, 2)[0];
        assert_eq!(head.len(), 46);
        assert_eq!((head[0] / PANEL_ROWS, head[45] / PANEL_ROWS), (352, 4));
    }

    /// Panel tasks are whole panels, shared evenly where a size allows.
    #[test]
    fn panel_tasks_balance_the_threads() {
        assert_eq!(panel_chunk_rows(576, 2), 48);
        assert_eq!(panel_chunk_rows(1536, 2), 192);
        assert_eq!(panel_chunk_rows(262_144, 2), 32_768);
        for (rows, threads) in [(0, 2), (1, 1), (17, 2), (576, 16), (1000, 3)] {
            let c = panel_chunk_rows(rows, threads);
            assert!(
                c >= PANEL_ROWS && c.is_multiple_of(PANEL_ROWS),
                "{rows} {threads}: {c}"
            );
        }
    }

    /// Batch tasks are whole eight-row groups within the cap, and fill the
    /// threads' shares evenly where a size down to half the first choice
    /// does.
    #[test]
    fn batch_tasks_fill_the_shares_evenly() {
        // all-MiniLM-L6-v2 F32 on two threads: the up projection (1536 rows
        // of 1536 bytes, at most 170 a task) in twelve tasks of 128, not ten
        // of 168 with one thread's share 144 rows heavier; the down
        // projection (384 rows of 6144 bytes, at most 42) in twelve of 32;
        // the queries, keys and values in four tasks each of 96, not three
        // of 144, 144 and 96.
        assert_eq!(chunk_rows([1536], 2, 170), 128);
        assert_eq!(busiest_share([1536], 168, 2), 840);
        assert_eq!(busiest_share([1536], 128, 2), 768);
        assert_eq!(chunk_rows([384], 2, 42), 32);
        assert_eq!(chunk_rows([384, 384, 384], 2, 170), 96);
        assert_eq!(busiest_share([384, 384, 384], 144, 2), 624);
        // Already even: the first choice stays.
        assert_eq!(chunk_rows([384], 2, usize::MAX), 48);
        assert_eq!(chunk_rows([1536], 1, usize::MAX), 256);
        for (rows, threads, cap) in [
            ([0, 0], 2, usize::MAX),
            ([5, 0], 2, usize::MAX),
            ([20, 3], 4, 9),
            ([1000, 333], 3, 100),
            ([49_152, 2048], 16, 170),
        ] {
            let c = chunk_rows(rows, threads, cap);
            let total: usize = rows.iter().sum();
            assert!((1..=256).contains(&c) && c <= cap.max(8), "{rows:?}: {c}");
            assert!(c.is_multiple_of(8) || c >= total, "{rows:?}: {c}");
        }
    }
}
