//! The embedding fidelity thresholds, each owned by one function here and
//! shared, through `#[path]`, by `cargo xtask validate`,
//! `crates/model/tests/embed_fidelity.rs` (EmbeddingGemma) and
//! `crates/model/tests/minilm.rs` (all-MiniLM-L6-v2), so they cannot disagree.
//!
//! On F32 lamina must match llama.cpp and PyTorch on every text. Quantized
//! files are chaotic under activation quantization (one int8 rounding that
//! flips on a last-bit difference cascades through the later layers), so
//! llama.cpp does not agree with itself there either: its thresholds come
//! from the gold's own record of how far llama.cpp moves between its paths
//! and builds (the `llamacpp-*-fa-off` and `llamacpp-*-avx512` runs).
#![allow(dead_code)] // each includer uses its own subset

/// Every text's cosine to llama.cpp's gold on the F32 file.
pub const F32_VS_LLAMA: f64 = 0.99999;
/// Every text's cosine to PyTorch's F32 vectors on the F32 file.
pub const F32_VS_PYTORCH: f64 = 0.99999;
/// How far lamina's minimum cosine to llama.cpp may fall below llama.cpp's
/// own lowest minimum between its runs.
pub const MIN_SLACK: f64 = 0.001;
/// The same for the mean cosine.
pub const MEAN_SLACK: f64 = 0.0002;
/// How far lamina's mean cosine to PyTorch may fall below llama.cpp's.
pub const PYTORCH_MEAN_SLACK: f64 = 0.0005;
/// Every text's cosine between llama.cpp run now and its gold run, on F32
/// (on a quantized file the run moves as far as llama.cpp's own spread).
pub const LIVE_VS_GOLD: f64 = 0.99999;
/// all-MiniLM-L6-v2 Q8_0: every text's cosine to llama.cpp's vectors of the
/// same file. Six layers leave little room for activation rounding to
/// cascade, so a fixed floor holds where EmbeddingGemma needs its spread.
pub const MINILM_Q8_0_VS_LLAMA: f64 = 0.999;

/// llama.cpp's other runs of each quantized file in the gold: the source
/// name's suffix (`llamacpp-Q8_0-fa-off`) and what it is.
pub const SPREAD_RUNS: [(&str, &str); 2] = [
    ("fa-off", "llama.cpp FA off"),
    ("avx512", "llama.cpp AVX-512 build"),
];

/// What per-text cosines must reach: their minimum and their mean.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Floor {
    pub min: f64,
    pub mean: f64,
}

/// The minimum and mean of `xs` (`+inf` and NaN when empty, so an empty
/// list passes no floor).
pub fn min_mean(xs: &[f64]) -> (f64, f64) {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    (min, xs.iter().sum::<f64>() / xs.len() as f64)
}

impl Floor {
    /// Why `cos` (one cosine per text, named by `ids`) falls short; empty
    /// when it reaches the floor. No cosines at all fall short.
    pub fn shortfalls(&self, what: &str, cos: &[f64], ids: &[&str]) -> Vec<String> {
        if cos.is_empty() {
            return vec![format!("{what}: no cosines to judge")];
        }
        let (min, mean) = min_mean(cos);
        let mut out = Vec::new();
        if min.is_nan() || min < self.min {
            let worst = cos.iter().position(|&c| c == min).unwrap_or(0);
            out.push(format!(
                "{what}: min {min:.7} ({}) < {:.7}",
                ids.get(worst).copied().unwrap_or("?"),
                self.min
            ));
        }
        if mean.is_nan() || mean < self.mean {
            out.push(format!("{what}: mean {mean:.7} < {:.7}", self.mean));
        }
        out
    }

    /// `min ≥ X, mean ≥ Y`, leaving out a bound that binds nothing.
    pub fn describe(&self) -> String {
        match (self.min > -1.0, self.mean > self.min) {
            (true, true) => format!("min ≥ {:.7}, mean ≥ {:.7}", self.min, self.mean),
            (true, false) => format!("every text ≥ {}", self.min),
            (false, _) => format!("mean ≥ {:.7}", self.mean),
        }
    }
}

/// lamina's cosines to llama.cpp's gold run of the same file. `spreads`:
/// per text, the cosine of each of llama.cpp's other runs of the file
/// ([`SPREAD_RUNS`]) to its gold run; unused on F32, required otherwise.
pub fn vs_llama(quant: &str, spreads: &[Vec<f64>]) -> Result<Floor, String> {
    if quant == "F32" {
        return Ok(Floor {
            min: F32_VS_LLAMA,
            mean: F32_VS_LLAMA,
        });
    }
    if spreads.is_empty() || spreads.iter().any(Vec::is_empty) {
        return Err(format!(
            "{quant}: the gold records no llama.cpp spread runs ({SPREAD_RUNS:?}) to set its threshold from"
        ));
    }
    let (min, mean) = spreads
        .iter()
        .map(|s| min_mean(s.as_slice()))
        .fold((f64::INFINITY, f64::INFINITY), |(a, b), (m, n)| {
            (a.min(m), b.min(n))
        });
    Ok(Floor {
        min: min - MIN_SLACK,
        mean: mean - MEAN_SLACK,
    })
}

/// lamina's cosines to PyTorch's F32 vectors. `llama_vs_torch`: llama.cpp's
/// gold run's cosines to them, per text (the bar for a quantized file).
pub fn vs_pytorch(quant: &str, llama_vs_torch: &[f64]) -> Floor {
    if quant == "F32" {
        return Floor {
            min: F32_VS_PYTORCH,
            mean: F32_VS_PYTORCH,
        };
    }
    Floor {
        min: -1.0,
        mean: min_mean(llama_vs_torch).1 - PYTORCH_MEAN_SLACK,
    }
}

/// llama.cpp run now against its own gold run of the same file: on F32
/// every text within [`LIVE_VS_GOLD`]; on a quantized file within the spread
/// the gold records between llama.cpp's own runs ([`vs_llama`]), since a
/// rebuild of the same commit on another machine moves that far.
pub fn live_vs_gold(quant: &str, spreads: &[Vec<f64>]) -> Result<Floor, String> {
    if quant == "F32" {
        return Ok(Floor {
            min: LIVE_VS_GOLD,
            mean: LIVE_VS_GOLD,
        });
    }
    vs_llama(quant, spreads)
}
