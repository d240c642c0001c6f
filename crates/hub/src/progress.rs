//! The progress bar of a conversion, shared by `lamina convert` and the
//! conversions a hub checkpoint gets on first use.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lamina_model::convert::Progress;

/// A bar on standard error (drawn only on a terminal) fed by
/// [`lamina_model::convert::convert`]'s reports.
pub struct ConvertBar {
    bar: ProgressBar,
}

impl ConvertBar {
    /// A bar that draws when `show` is true, else stays hidden.
    pub fn new(show: bool) -> ConvertBar {
        let target = if show {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(style(
            "{spinner} [{elapsed_precise}] {bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        ));
        ConvertBar { bar }
    }

    /// Shows one report.
    pub fn report(&self, p: Progress<'_>) {
        match p {
            Progress::Start { total_bytes, .. } => self.bar.set_length(total_bytes),
            Progress::Tensor { name, .. } => self.bar.set_message(name.to_string()),
            Progress::Bytes(n) => self.bar.inc(n),
            Progress::Quantize { index, total, name } => {
                if index == 0 {
                    self.bar.set_style(style(
                        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} tensors quantized {msg}",
                    ));
                    self.bar.set_length(total as u64);
                }
                self.bar.set_position(index as u64);
                self.bar.set_message(name.to_string());
            }
        }
    }

    /// Removes the bar from the terminal.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("valid progress template")
}
