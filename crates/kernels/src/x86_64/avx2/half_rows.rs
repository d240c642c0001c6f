//! F16 and BF16 rows: the row and eight-row kernels, the activations'
//! rounding, and the widening to f32 that lets a batch take the F32 tiles.
//!
//! Both types widen to f32 exactly, and the product of two widened values
//! is exact in f32, so each output here is the F32 row kernel's chain
//! (`row_body`) over the widened rows: a batch that widens its weights and
//! activations and runs the F32 tiles gets the same bits as these kernels.

use super::*;

/// [`FloatElem`] of F16 rows.
struct F16;

impl FloatElem for F16 {
    const SIZE: usize = 2;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: forwarded (16 readable bytes; F16C enabled).
        unsafe { load8_f16(p) }
    }
    #[inline(always)]
    unsafe fn one(p: *const u8) -> f32 {
        // SAFETY: forwarded (two readable bytes).
        unsafe { fp16(p) }
    }
}

/// [`FloatElem`] of BF16 rows: a bf16 is the high half of an f32.
struct Bf16;

impl FloatElem for Bf16 {
    const SIZE: usize = 2;
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        // SAFETY: the caller passes 16 readable bytes; AVX2 is enabled.
        unsafe {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
    }
    #[inline(always)]
    unsafe fn one(p: *const u8) -> f32 {
        // SAFETY: the caller passes two readable bytes.
        f32::from_bits(u32::from(unsafe { rd_u16(p) }) << 16)
    }
}

/// `rows` rows of `n` two-byte elements in `bytes`, as a pointer.
fn half_rows(n: usize, rows: usize, bytes: &[u8], what: &str) -> *const u8 {
    assert_eq!(
        bytes.len(),
        rows * n * 2,
        "{what}: {rows} rows of {n} halves"
    );
    bytes.as_ptr()
}

target_fns! { avx2:
    unsafe fn k_row_f16(n: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { row_body::<F16>(n, w, a) }
    }
    unsafe fn k_row_bf16(n: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { row_body::<Bf16>(n, w, a) }
    }
    unsafe fn k_rows8_f16(n: usize, w: *const u8, a: *const u8, ahead: usize) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if ahead > 0 {
                rows8_body::<F16, true>(n, w, a, ahead)
            } else {
                rows8_body::<F16, false>(n, w, a, 0)
            }
        }
    }
    unsafe fn k_rows8_bf16(n: usize, w: *const u8, a: *const u8, ahead: usize) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            if ahead > 0 {
                rows8_body::<Bf16, true>(n, w, a, ahead)
            } else {
                rows8_body::<Bf16, false>(n, w, a, 0)
            }
        }
    }
}

pub(crate) fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (w, a) = (
        half_rows(n, 1, w, "weights"),
        half_rows(n, 1, a, "activations"),
    );
    // SAFETY: one row of `n` halves each (checked above); reachable only after AVX2
    // detection.
    unsafe { k_row_f16(n, w, a) }
}

pub(crate) fn vec_dot_bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let (w, a) = (
        half_rows(n, 1, w, "weights"),
        half_rows(n, 1, a, "activations"),
    );
    // SAFETY: as in `vec_dot_f16`.
    unsafe { k_row_bf16(n, w, a) }
}

/// The hint distance of a decoding call over eight rows of `n` halves.
fn rows8_ahead(n: usize) -> usize {
    crate::prefetch::whole_groups(crate::prefetch::f32_ahead(), 8 * n * 2)
}

pub(crate) fn vec_dot_rows8_f16(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    let (w, a) = (
        half_rows(n, 8, w, "weights"),
        half_rows(n, 1, a, "activations"),
    );
    // SAFETY: eight weight rows and one activation row of `n` halves (checked
    // above); reachable only after AVX2 detection.
    unsafe { k_rows8_f16(n, w, a, rows8_ahead(n)) }
}

pub(crate) fn vec_dot_rows8_bf16(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    let (w, a) = (
        half_rows(n, 8, w, "weights"),
        half_rows(n, 1, a, "activations"),
    );
    // SAFETY: as in `vec_dot_rows8_f16`.
    unsafe { k_rows8_bf16(n, w, a, rows8_ahead(n)) }
}

/// `src`'s elements widened into `dst`, eight at a time.
#[inline(always)]
unsafe fn widen_body<E: FloatElem>(n: usize, src: *const u8, dst: *mut f32) {
    // SAFETY: `n` elements at `src`, room for `n` f32 at `dst`.
    unsafe {
        for i in (0..n / 8 * 8).step_by(8) {
            _mm256_storeu_ps(dst.add(i), E::load8(src.add(i * E::SIZE)));
        }
        for i in n / 8 * 8..n {
            *dst.add(i) = E::one(src.add(i * E::SIZE));
        }
    }
}

target_fns! { avx2:
    unsafe fn k_widen_f16(n: usize, src: *const u8, dst: *mut f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { widen_body::<F16>(n, src, dst) }
    }
    unsafe fn k_widen_bf16(n: usize, src: *const u8, dst: *mut f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { widen_body::<Bf16>(n, src, dst) }
    }
}

/// F16 elements as f32, exactly.
pub(crate) fn widen_f16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "f16 elements and their f32");
    // SAFETY: `dst.len()` halves at `src` and as many f32 at `dst` (checked
    // above); reachable only after AVX2 detection.
    unsafe { k_widen_f16(dst.len(), src.as_ptr(), dst.as_mut_ptr()) }
}

/// BF16 elements as f32, exactly.
pub(crate) fn widen_bf16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "bf16 elements and their f32");
    // SAFETY: as in `widen_f16`.
    unsafe { k_widen_bf16(dst.len(), src.as_ptr(), dst.as_mut_ptr()) }
}

target_fns! { avx2:
    unsafe fn k_quantize_f16(src: &[f32], dst: &mut [u8]) {
        let n = src.len() / 8 * 8;
        for i in (0..n).step_by(8) {
            // SAFETY: eight floats at `i` of `src` and sixteen bytes at `2 i` of
            // `dst` (the wrapper checked the lengths); F16C is enabled.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.as_ptr().add(i)));
                _mm_storeu_si128(dst.as_mut_ptr().add(2 * i).cast(), h);
            }
        }
        crate::scalar::quantize_f16(&src[n..], &mut dst[2 * n..]);
    }
    unsafe fn k_quantize_bf16(src: &[f32], dst: &mut [u8]) {
        let n = src.len() / 16 * 16;
        for i in (0..n).step_by(16) {
            // SAFETY: sixteen floats at `i` of `src` and 32 bytes at `2 i` of `dst`
            // (the wrapper checked the lengths); AVX2 is enabled.
            unsafe {
                let p = src.as_ptr().add(i);
                let half = |x: __m256| {
                    // ggml's rounding: to nearest even, a NaN made quiet.
                    let u = _mm256_castps_si256(x);
                    let odd = _mm256_and_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(1));
                    let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd);
                    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(u, bias));
                    let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(64));
                    let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
                    _mm256_blendv_epi8(rounded, quiet, nan)
                };
                let (lo, hi) = (half(_mm256_loadu_ps(p)), half(_mm256_loadu_ps(p.add(8))));
                // `packus` interleaves the two by 128-bit lanes; the permute
                // puts the sixteen halves back in order.
                let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
                _mm256_storeu_si256(dst.as_mut_ptr().add(2 * i).cast(), packed);
            }
        }
        crate::scalar::quantize_bf16(&src[n..], &mut dst[2 * n..]);
    }
}

/// f32 → f16, to nearest even (`GGML_FP32_TO_FP16`), as the scalar quantizer.
pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "activation buffer size");
    if cfg!(miri) {
        // Miri lacks F16C.
        return crate::scalar::quantize_f16(src, dst);
    }
    // SAFETY: lengths checked above; reachable only after AVX2 detection.
    unsafe { k_quantize_f16(src, dst) }
}

/// f32 → bf16 as ggml rounds it, as the scalar quantizer.
pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "activation buffer size");
    // SAFETY: lengths checked above; reachable only after AVX2 detection.
    unsafe { k_quantize_bf16(src, dst) }
}
