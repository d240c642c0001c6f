//! Random weights, generated and quantized a chunk of rows at a time and
//! streamed into the file, so memory stays a few megabytes at any size.

use std::io::Write;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use lamina_gguf::{GgmlType, TensorWriter};
use rayon::prelude::*;

use super::layout::{Kind, TensorPlan};
use super::shapes::Shape;

/// Output bytes quantized per parallel chunk.
const CHUNK_BYTES: u64 = 8 << 20;

/// SplitMix64's step: a full-period generator whose outputs pass BigCrush.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a tensor name: each tensor's stream depends on its name, not on
/// its place in the file.
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// Fills `out` with row `row` of a tensor: uniform in `[-scale, scale)`, from
/// a stream that depends only on the seed, the tensor's name and the row.
fn fill_row(seed: u64, name_hash: u64, row: u64, scale: f32, out: &mut [f32]) {
    let mut state = seed ^ name_hash;
    let base = splitmix(&mut state);
    let mut state = base ^ row.wrapping_mul(0xD1B5_4A32_D192_ED03);
    let unit = 1.0 / (1u32 << 23) as f32;
    for v in out {
        let bits = (splitmix(&mut state) >> 40) as u32;
        *v = (bits as f32 * unit - 1.0) * scale;
    }
}

/// The half-width of a tensor's uniform values: unit-variance outputs for a
/// unit-RMS input (`sqrt(3 / fan_in)`) for matrices, small embeddings and
/// biases, so activations stay moderate through every layer of both engines.
fn scale_of(t: &TensorPlan) -> f32 {
    match t.kind {
        Kind::Linear => (3.0 / t.dims[0] as f32).sqrt(),
        Kind::Embed => 0.1,
        Kind::Bias => 0.05,
        Kind::Norm | Kind::RopeFreqs => 1.0,
    }
}

/// Llama 3's `rope_freqs`, as `LlamaModel.generate_extra_tensors` computes it.
fn llama3_rope_freqs(shape: &Shape, out: &mut [f32]) {
    let rope = shape
        .llama3_rope
        .expect("only planned for llama3 rope scaling");
    let dim = shape.head_dim() as f64;
    let base = f64::from(shape.rope_theta.unwrap_or(10_000.0));
    let low_wavelen = rope.original_context / rope.low_freq_factor;
    let high_wavelen = rope.original_context / rope.high_freq_factor;
    for (i, v) in out.iter_mut().enumerate() {
        let freq = 1.0 / base.powf(2.0 * i as f64 / dim);
        let wavelen = 2.0 * std::f64::consts::PI / freq;
        *v = if wavelen < high_wavelen {
            1.0
        } else if wavelen > low_wavelen {
            rope.factor as f32
        } else {
            let smooth = (rope.original_context / wavelen - rope.low_freq_factor)
                / (rope.high_freq_factor - rope.low_freq_factor);
            (1.0 / ((1.0 - smooth) / rope.factor + smooth)) as f32
        };
    }
}

/// A byte-count progress bar on stderr (hidden when `show` is false).
pub(super) fn bar(total: u64, show: bool, message: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template(
        "{msg:24!} [{bar:30}] {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12} {eta}",
    )
    .expect("valid template")
    .progress_chars("=> ");
    ProgressBar::new(total)
        .with_style(style)
        .with_message(message)
}

/// Generates, quantizes and writes one tensor's data.
pub(super) fn write_tensor<W: Write>(
    shape: &Shape,
    seed: u64,
    t: &TensorPlan,
    w: &mut TensorWriter<W>,
    bar: &ProgressBar,
) -> Result<()> {
    let row_len = t.dims[0];
    let n_rows: u64 = t.dims[1..].iter().product();
    let row_bytes =
        t.ty.row_bytes(row_len)
            .with_context(|| format!("{}: rows of {row_len} do not fit {}", t.name, t.ty))?;
    if matches!(t.kind, Kind::Norm | Kind::RopeFreqs) {
        let mut row = vec![1.0f32; row_len as usize];
        if t.kind == Kind::RopeFreqs {
            llama3_rope_freqs(shape, &mut row);
        }
        let mut bytes = vec![0u8; row_bytes as usize];
        lamina_quant::quantize_row(GgmlType::F32, &row, &mut bytes)?;
        w.write_chunk(&bytes)?;
        bar.inc(row_bytes);
        return Ok(());
    }
    let name_hash = fnv1a(&t.name);
    let scale = scale_of(t);
    let rows_per_chunk = (CHUNK_BYTES / row_bytes).clamp(1, n_rows);
    let mut chunk = vec![0u8; (rows_per_chunk * row_bytes) as usize];
    let mut row0 = 0;
    while row0 < n_rows {
        let rows = rows_per_chunk.min(n_rows - row0);
        let out = &mut chunk[..(rows * row_bytes) as usize];
        out.par_chunks_mut(row_bytes as usize)
            .enumerate()
            .try_for_each_init(
                || vec![0f32; row_len as usize],
                |values, (i, dst)| {
                    fill_row(seed, name_hash, row0 + i as u64, scale, values);
                    lamina_quant::quantize_row(t.ty, values, dst)
                },
            )
            .with_context(|| format!("quantizing {}", t.name))?;
        w.write_chunk(out)?;
        bar.inc(out.len() as u64);
        row0 += rows;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_reproducible_independent_and_in_range() {
        let mut a = vec![0f32; 4096];
        let mut b = vec![0f32; 4096];
        fill_row(7, fnv1a("blk.0.attn_q.weight"), 3, 0.5, &mut a);
        fill_row(7, fnv1a("blk.0.attn_q.weight"), 3, 0.5, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-0.5..0.5).contains(v)));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.02, "mean {mean}");
        // Uniform on [-s, s) has variance s²/3.
        let var = a.iter().map(|v| v * v).sum::<f32>() / a.len() as f32;
        assert!((var - 0.25 / 3.0).abs() < 0.01, "variance {var}");
        fill_row(7, fnv1a("blk.0.attn_q.weight"), 4, 0.5, &mut b);
        assert_ne!(a, b);
        fill_row(8, fnv1a("blk.0.attn_q.weight"), 3, 0.5, &mut b);
        assert_ne!(a, b);
        fill_row(7, fnv1a("blk.0.attn_k.weight"), 3, 0.5, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn llama3_rope_freqs_follow_the_converter() {
        let shape = super::super::shapes::find("llama-3.2-1b").unwrap();
        let mut f = vec![0f32; 32];
        llama3_rope_freqs(shape, &mut f);
        // High frequencies are kept, the lowest scaled by the factor, a
        // smooth ramp between (Llama 3.2 1B: factor 32).
        assert_eq!(f[0], 1.0);
        assert_eq!(f[31], 32.0);
        assert!(f.windows(2).all(|w| w[0] <= w[1]));
        assert!(f.iter().any(|&v| v > 1.0 && v < 32.0));
    }
}
