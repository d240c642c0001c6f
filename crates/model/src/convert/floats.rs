//! Element conversions between the float formats a checkpoint may hold and
//! the types a GGUF tensor may be written as.

use half::{bf16, f16};

/// f32 → IEEE half, round-to-nearest-even (what numpy's `astype(float16)` does).
pub fn f32_to_f16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// f32 → bfloat16 exactly as gguf-py's `quants.BF16.quantize_blocks` (and
/// ggml's `ggml_compute_fp32_to_bf16`): NaNs are forced quiet, everything
/// else is rounded to nearest even, overflow wrapping into the u16 as numpy's
/// `astype(np.uint16)` does.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let mut n = x.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        n = (n & 0xffff_0000) | (64 << 16);
    }
    let rounded = (u64::from(n) + u64::from(0x7fff + ((n >> 16) & 1))) >> 16;
    rounded as u16
}

/// IEEE half bits → f32 (exact).
pub fn f16_bits_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// bfloat16 bits → f32 (exact).
pub fn bf16_bits_to_f32(bits: u16) -> f32 {
    bf16::from_bits(bits).to_f32()
}

/// Rounds an f32 to the nearest half and back, as a torch float16 operation does.
pub fn round_through_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even_and_quiets_nan() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // Exactly half-way between two bf16 values: ties go to the even one.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8001)), 0x3f81);
        // A signalling NaN becomes a quiet one.
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::INFINITY), 0x7f80);
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        // 1 + 2^-11 is half-way between 1 and 1 + 2^-10: ties to even (1.0).
        assert_eq!(f32_to_f16_bits(1.0 + f32::powi(2.0, -11)), 0x3c00);
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * f32::powi(2.0, -11)), 0x3c02);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f16_bits_to_f32(0x3c00), 1.0);
    }
}
