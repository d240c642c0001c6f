//! AVX2 row and 1×4 dot products of the legacy (Q8_0 / Q8_1 activation) types,
//! and their eight-row kernels (float rows are in `float` and `half_rows`).

use super::*;

/// The signed 32 quants of one legacy weight block.
#[inline(always)]
pub(super) unsafe fn q8_0_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q8_0 block has its 32 quants at offset 2.
    unsafe { load256(x.add(2)) }
}
#[inline(always)]
pub(super) unsafe fn q4_0_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q4_0 block has its 16 nibble bytes at offset 2.
    unsafe { _mm256_sub_epi8(nibbles(x.add(2)), _mm256_set1_epi8(8)) }
}
#[inline(always)]
pub(super) unsafe fn q5_0_quants(x: *const u8) -> __m256i {
    // SAFETY: a Q5_0 block has qh at offset 2 and 16 nibble bytes at 6.
    unsafe {
        // 0xF0 (i.e. -16 on top of the nibble) where the fifth bit is clear.
        let hi = _mm256_andnot_si256(bytes_from_bits(x.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        _mm256_or_si256(nibbles(x.add(6)), hi)
    }
}

/// Σ_blocks d_w·d_a·Σ(w·a) for weight blocks of `wsize` bytes decoded by
/// `quants`, against `N` Q8_0 activation rows.
///
/// Each block's integer sum is exact and is accumulated as
/// `acc[i % 2] = fma(d_w·d_a, Σ, acc[i % 2])` in block order, then
/// `acc[0] + acc[1]` (two chains, so a lone row is not bound by the FMA's
/// latency): bit for bit what the tiles ([`legacy_tile`]) compute, so a
/// token's result does not depend on where it sits in a batch (quantized
/// activations turn any rounding difference into visibly different
/// embeddings).
#[inline(always)]
unsafe fn legacy_q8_0<const N: usize>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    a: [*const u8; N],
    quants: unsafe fn(*const u8) -> __m256i,
) -> [f32; N] {
    // SAFETY: the wrappers checked `nb` whole blocks in every row; AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [[0.0f32; 2]; N];
        let mut i = 0;
        // Eight blocks at a time share one horizontal reduction per row.
        while i + 8 <= nb {
            let mut p = [[_mm256_setzero_si256(); 8]; N];
            let mut dx = [0.0f32; 8];
            for b in 0..8 {
                let x = w.add((i + b) * wsize);
                prefetch_block(x, wsize);
                let qx = quants(x);
                let ax = abs_u8(qx);
                dx[b] = fp16(x);
                for c in 0..N {
                    let y = a[c].add((i + b) * 34);
                    p[c][b] = maddubs_i32(ax, signed_like(load256(y.add(2)), qx));
                }
            }
            for c in 0..N {
                let mut sums = [0.0f32; 8];
                _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_cvtepi32_ps(hsum8_i32(&p[c])));
                for b in 0..8 {
                    // `i` is even: block `i + b` goes to chain `b % 2`.
                    let d = dx[b] * fp16(a[c].add((i + b) * 34));
                    acc[c][b % 2] = d.mul_add(sums[b], acc[c][b % 2]);
                }
            }
            i += 8;
        }
        for i in i..nb {
            let x = w.add(i * wsize);
            prefetch_block(x, wsize);
            let qx = quants(x);
            let ax = abs_u8(qx);
            let dx = fp16(x);
            for c in 0..N {
                let y = a[c].add(i * 34);
                let sum = hsum_i32(maddubs_i32(ax, signed_like(load256(y.add(2)), qx))) as f32;
                acc[c][i % 2] = (dx * fp16(y)).mul_add(sum, acc[c][i % 2]);
            }
        }
        acc.map(|[even, odd]| even + odd)
    }
}

/// [`legacy_q8_0`] for eight consecutive weight rows `stride` bytes apart
/// against one activation row, the rows side by side in the lanes: per block
/// the rows' exact integer sums (one horizontal reduction for all eight),
/// then `acc[i % 2] = fma(d_w·d_a, Σ, acc[i % 2])` per lane and `acc[0] +
/// acc[1]`: each row's bits from the row kernel, with the activation block
/// loaded and its scale converted once for the eight rows.
#[inline(always)]
unsafe fn legacy_rows8(
    nb: usize,
    w: *const u8,
    stride: usize,
    wsize: usize,
    a: *const u8,
    quants: unsafe fn(*const u8) -> __m256i,
) -> [f32; 8] {
    // SAFETY: the wrappers checked eight rows of `nb` whole blocks `stride` bytes
    // apart and an activation row of `nb` blocks; AVX2/FMA/F16C are enabled.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let y = a.add(i * 34);
            let ay = load256(y.add(2));
            let mut p = [_mm256_setzero_si256(); 8];
            let mut dx = [0.0f32; 8];
            prefetch_rows8(w, stride, i, wsize);
            for (r, (p, dx)) in p.iter_mut().zip(&mut dx).enumerate() {
                let x = w.add(r * stride + i * wsize);
                let qx = quants(x);
                *p = maddubs_i32(abs_u8(qx), signed_like(ay, qx));
                *dx = fp16(x);
            }
            let d = _mm256_mul_ps(_mm256_loadu_ps(dx.as_ptr()), _mm256_set1_ps(fp16(y)));
            let s = _mm256_cvtepi32_ps(hsum8_i32(&p));
            acc[i % 2] = _mm256_fmadd_ps(d, s, acc[i % 2]);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(acc[0], acc[1]));
        out
    }
}

kernel_fns! { dot avx2;
    Q8_0, Q8_0 => vec_dot_q8_0, vec_dot_x4_q8_0
        = |nb, w, a| legacy_q8_0::<N>(nb, w, 34, a, q8_0_quants);
    Q4_0, Q8_0 => vec_dot_q4_0, vec_dot_x4_q4_0
        = |nb, w, a| legacy_q8_0::<N>(nb, w, 18, a, q4_0_quants);
    Q5_0, Q8_0 => vec_dot_q5_0, vec_dot_x4_q5_0
        = |nb, w, a| legacy_q8_0::<N>(nb, w, 22, a, q5_0_quants);
}

kernel_fns! { rows8 avx2;
    Q8_0, Q8_0 => vec_dot_rows8_q8_0
        = |nb, w, stride, a| legacy_rows8(nb, w, stride, 34, a, q8_0_quants);
    Q4_0, Q8_0 => vec_dot_rows8_q4_0
        = |nb, w, stride, a| legacy_rows8(nb, w, stride, 18, a, q4_0_quants);
    Q5_0, Q8_0 => vec_dot_rows8_q5_0
        = |nb, w, stride, a| legacy_rows8(nb, w, stride, 22, a, q5_0_quants);
}

/// Eight `i32 × 8` vectors → one vector of their eight horizontal sums, in order.
#[inline(always)]
unsafe fn hsum8_i32(p: &[__m256i; 8]) -> __m256i {
    // SAFETY: AVX2 is enabled in every kernel calling this.
    unsafe {
        let s01 = _mm256_hadd_epi32(p[0], p[1]);
        let s23 = _mm256_hadd_epi32(p[2], p[3]);
        let s45 = _mm256_hadd_epi32(p[4], p[5]);
        let s67 = _mm256_hadd_epi32(p[6], p[7]);
        // [Σ0..Σ3 of the low lanes | Σ0..Σ3 of the high lanes], same for 4..7.
        let s0123 = _mm256_hadd_epi32(s01, s23);
        let s4567 = _mm256_hadd_epi32(s45, s67);
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(s0123, s4567),
            _mm256_permute2x128_si256::<0x31>(s0123, s4567),
        )
    }
}

/// A row of a Q8_1-activation type (Q4_1, Q5_1: `d`, `m`, then quants read
/// unsigned by `quants`) against `N` Q8_1 rows. Per block `d_w·d_a·Σ q·a`
/// and `m_w·s_a` (`s_a = d_a·Σa`), each in two chains, even and odd
/// blocks, added at the end; eight blocks at a time share one horizontal
/// reduction per activation row, and each weight block is unpacked once
/// for all `N`: two chains hide the FMA latency a single chain is bound by.
#[inline(always)]
unsafe fn q8_1_rows<const N: usize>(
    nb: usize,
    w: *const u8,
    wsize: usize,
    a: [*const u8; N],
    quants: unsafe fn(*const u8) -> __m256i,
) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (`wsize` bytes; Q8_1: 36 bytes),
    // `quants` reads inside a weight block; AVX2/FMA/F16C are enabled in
    // the callers.
    unsafe {
        let mut acc = [[0.0f32; 2]; N];
        let mut mins = [[0.0f32; 2]; N];
        let mut i = 0;
        while i + 8 <= nb {
            let mut p = [[_mm256_setzero_si256(); 8]; N];
            let (mut dx, mut mx) = ([0.0f32; 8], [0.0f32; 8]);
            for b in 0..8 {
                let x = w.add((i + b) * wsize);
                prefetch_block(x, wsize);
                let qx = quants(x);
                (dx[b], mx[b]) = (fp16(x), fp16(x.add(2)));
                for c in 0..N {
                    p[c][b] = maddubs_i32(qx, load256(a[c].add((i + b) * 36 + 4)));
                }
            }
            for c in 0..N {
                let mut sums = [0.0f32; 8];
                _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_cvtepi32_ps(hsum8_i32(&p[c])));
                for b in 0..8 {
                    // `i` is even: block `i + b` goes to chain `b % 2`.
                    let y = a[c].add((i + b) * 36);
                    acc[c][b % 2] = (dx[b] * fp16(y)).mul_add(sums[b], acc[c][b % 2]);
                    mins[c][b % 2] = mx[b].mul_add(fp16(y.add(2)), mins[c][b % 2]);
                }
            }
            i += 8;
        }
        for i in i..nb {
            let x = w.add(i * wsize);
            prefetch_block(x, wsize);
            let qx = quants(x);
            let (dx, mx) = (fp16(x), fp16(x.add(2)));
            for c in 0..N {
                let y = a[c].add(i * 36);
                let sum = hsum_i32(maddubs_i32(qx, load256(y.add(4)))) as f32;
                acc[c][i % 2] = (dx * fp16(y)).mul_add(sum, acc[c][i % 2]);
                mins[c][i % 2] = mx.mul_add(fp16(y.add(2)), mins[c][i % 2]);
            }
        }
        std::array::from_fn(|c| (acc[c][0] + acc[c][1]) + (mins[c][0] + mins[c][1]))
    }
}

kernel_fns! { dot avx2;
    Q4_1, Q8_1 => vec_dot_q4_1, vec_dot_x4_q4_1
        = |nb, w, a| q8_1_rows::<N>(nb, w, 20, a, q4_1_unsigned);
    Q5_1, Q8_1 => vec_dot_q5_1, vec_dot_x4_q5_1
        = |nb, w, a| q8_1_rows::<N>(nb, w, 24, a, q5_1_unsigned);
}

/// Eight f32 at `p` (shared with the AVX-512 attention).
#[inline(always)]
pub(in crate::x86_64) unsafe fn load8_f32(p: *const u8) -> __m256 {
    // SAFETY: the caller passes 32 readable bytes.
    unsafe { _mm256_loadu_ps(p.cast()) }
}
/// Eight f16 at `p` as f32 (shared with the AVX-512 attention).
#[inline(always)]
pub(in crate::x86_64) unsafe fn load8_f16(p: *const u8) -> __m256 {
    // SAFETY: the caller passes 16 readable bytes; F16C is enabled.
    unsafe {
        if cfg!(miri) {
            // Miri lacks F16C (the AVX-512 attention's tests run there).
            let f: [f32; 8] = std::array::from_fn(|i| fp16(p.add(2 * i)));
            return _mm256_loadu_ps(f.as_ptr());
        }
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
}
