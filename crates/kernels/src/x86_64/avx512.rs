//! AVX-512 (F, BW, VL) + VNNI kernels: `vpdpbusd` sums four `u8 · i8`
//! products into each i32 lane without the 16-bit saturation of `maddubs`.
//!
//! Reachable only through [`super::AVX512`], handed out after detection.
//! The tests run them natively where the CPU has AVX-512 VNNI, and the tests
//! named `miri_avx512_*` run them under Miri on any x86-64 machine (see
//! `.ci/isa-tests.sh`), so only intrinsics Miri implements are used here, and
//! f16 scales are decoded in software.

use super::avx2::{
    AttendKernel, KeyRows, all_dwords, hsum_i32, k_block_step, legacy_tile, prefetch_block,
    prefetch_rows8, q4_0_unsigned, q4_k_tile, q5_0_unsigned, q6_k_tile, q8_0_unsigned,
};
use crate::GgmlType;
use crate::prefetch::stream_ahead;
use crate::scalar::{k4_scales_mins, row_blocks, rows8_blocks};
use core::arch::x86_64::*;
use half::f16;

#[inline(always)]
unsafe fn fp16(p: *const u8) -> f32 {
    // SAFETY: the caller passes two readable bytes.
    f16::from_bits(unsafe { p.cast::<u16>().read_unaligned() }).to_f32_const()
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    // SAFETY: the caller passes four readable bytes.
    unsafe { p.cast::<f32>().read_unaligned() }
}

#[inline(always)]
unsafe fn load256(p: *const u8) -> __m256i {
    // SAFETY: the caller passes 32 readable bytes; unaligned load.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Two 32-byte halves → one 64-byte vector.
#[inline(always)]
unsafe fn cat(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// The two 256-bit halves of `v` added: lane `l` of the result sums lanes
/// `l` and `l + 8`. A 64-byte `vpdpbusd` over two 32-byte chunks folded this
/// way gives each lane exactly the byte positions the AVX2 kernels' lane
/// gathers, so the float arithmetic after it can be theirs, bit for bit.
#[inline(always)]
unsafe fn fold(v: __m512i) -> __m256i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v)) }
}

/// Q4_K against `N` Q8_K rows: 64 values (two sub-blocks of 32) per
/// `vpdpbusd`; nibbles are unsigned, unpacked once for all `N` rows. Each
/// block's exact integer sums go through [`k_block_step`], so each result is
/// the AVX2 kernels' bit for bit.
#[inline(always)]
unsafe fn q4_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (144 and 292 bytes), checked by the
    // wrappers; AVX-512 F/BW/VL + VNNI are enabled in the callers.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let mut acc = [0.0f32; N];
        let mut summ = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(144 * i);
            prefetch_block(x, 144);
            let ys = a.map(|p| p.add(292 * i));
            let (scales, mins) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
            let mut sumi = [_mm512_setzero_si512(); N];
            for j in 0..4 {
                let q = load256(x.add(16 + 32 * j));
                let both = cat(q, q);
                // Low nibbles for the first 32 values, high nibbles for the next 32.
                let q = _mm512_and_si512(_mm512_mask_srli_epi16(both, 0xFFFF_0000, both, 4), m4);
                let sc = _mm512_mask_blend_epi32(
                    0xFF00,
                    _mm512_set1_epi32(scales[2 * j] as i32),
                    _mm512_set1_epi32(scales[2 * j + 1] as i32),
                );
                for c in 0..N {
                    let y8 = _mm512_loadu_si512(ys[c].add(4 + 64 * j).cast());
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y8);
                    sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(sc, p));
                }
            }
            let (dx, dminx) = (fp16(x), fp16(x.add(2)));
            for c in 0..N {
                let dy = f32_at(ys[c]);
                let bsums = &ys[c].add(260).cast::<[i16; 16]>().read_unaligned();
                let msum: i32 = (0..8)
                    .map(|j| mins[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32))
                    .sum();
                let s = hsum_i32(fold(sumi[c]));
                (acc[c], summ[c]) = k_block_step(dy * dx, s, acc[c], dy * dminx, msum, summ[c]);
            }
        }
        let mut out = [0.0f32; N];
        for c in 0..N {
            out[c] = acc[c] - summ[c];
        }
        out
    }
}

/// Q6_K against `N` Q8_K rows: unsigned 6-bit quants, 64 values per
/// `vpdpbusd`, unpacked once for all `N` rows; the `-32` offset comes from the
/// bsums once per block. The exact block sum, then the AVX2 kernels' float
/// step: their result bit for bit.
#[inline(always)]
unsafe fn q6_k<const N: usize>(nb: usize, w: *const u8, a: [*const u8; N]) -> [f32; N] {
    // SAFETY: every row holds `nb` blocks (210 and 292 bytes), checked by the
    // wrappers; AVX-512 F/BW/VL + VNNI are enabled in the callers.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let m2 = _mm512_set1_epi8(0x30);
        let mut acc = [0.0f32; N];
        for i in 0..nb {
            let x = w.add(210 * i);
            prefetch_block(x, 210);
            let ys = a.map(|p| p.add(292 * i));
            let sc = &*x.add(192).cast::<[i8; 16]>();
            let mut sumi = [_mm512_setzero_si512(); N];
            for half in 0..2 {
                let ql = _mm512_loadu_si512(x.add(64 * half).cast());
                let qh = load256(x.add(128 + 32 * half));
                // High bits moved to bit 4..5: values 0..63 take qh<<4 and qh<<2,
                // values 64..127 take qh and qh>>2.
                let qh_a = cat(_mm256_slli_epi16::<4>(qh), _mm256_slli_epi16::<2>(qh));
                let qh_b = cat(qh, _mm256_srli_epi16::<2>(qh));
                let lo = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(qh_a, m2));
                let hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                    _mm512_and_si512(qh_b, m2),
                );
                for (k, q) in [lo, hi].into_iter().enumerate() {
                    // Four lanes (16 values) per scale.
                    let s = 8 * half + 4 * k;
                    let scale = _mm512_set_epi32(
                        sc[s + 3] as i32,
                        sc[s + 3] as i32,
                        sc[s + 3] as i32,
                        sc[s + 3] as i32,
                        sc[s + 2] as i32,
                        sc[s + 2] as i32,
                        sc[s + 2] as i32,
                        sc[s + 2] as i32,
                        sc[s + 1] as i32,
                        sc[s + 1] as i32,
                        sc[s + 1] as i32,
                        sc[s + 1] as i32,
                        sc[s] as i32,
                        sc[s] as i32,
                        sc[s] as i32,
                        sc[s] as i32,
                    );
                    for c in 0..N {
                        let y8 = _mm512_loadu_si512(ys[c].add(4 + 128 * half + 64 * k).cast());
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y8);
                        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(scale, p));
                    }
                }
            }
            // -32 · Σ_s scale_s · bsum_s, spread over the lanes as the AVX2 kernel does.
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.as_ptr().cast()));
            let dx = fp16(x.add(208));
            for c in 0..N {
                let off = _mm256_madd_epi16(sc16, load256(ys[c].add(260)));
                let sumi = _mm256_sub_epi32(fold(sumi[c]), _mm256_slli_epi32::<5>(off));
                let dy = f32_at(ys[c]);
                acc[c] = (dy * dx).mul_add(hsum_i32(sumi) as f32, acc[c]);
            }
        }
        acc
    }
}

macro_rules! k_kernels {
    ($($ty:ident: $body:ident => $k1:ident, $k4:ident, $one:ident, $x4:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $k1(nb: usize, w: *const u8, a: [*const u8; 1]) -> [f32; 1] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { $body::<1>(nb, w, a) }
        }
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $k4(nb: usize, w: *const u8, a: [*const u8; 4]) -> [f32; 4] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { $body::<4>(nb, w, a) }
        }
        pub(crate) fn $one(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = row_blocks(GgmlType::$ty, n, w);
            row_blocks(GgmlType::Q8_K, n, a);
            // SAFETY: both rows hold `nb` blocks (checked above); reachable only through
            // the AVX512 table, handed out after AVX-512 F/BW/VL + VNNI were detected.
            unsafe { $k1(nb, w.as_ptr(), [a.as_ptr()])[0] }
        }
        pub(crate) fn $x4(n: usize, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
            let nb = row_blocks(GgmlType::$ty, n, w);
            for c in a {
                row_blocks(GgmlType::Q8_K, n, c);
            }
            // SAFETY: as for the row kernel; all five rows hold `nb` blocks.
            unsafe { $k4(nb, w.as_ptr(), a.map(<[u8]>::as_ptr)) }
        }
    )*};
}

// The K-quant tiles are AVX2's (see the AVX512 table).
k_kernels! {
    Q4_K: q4_k => k_q4_k, k_q4_k_x4, vec_dot_q4_k, vec_dot_x4_q4_k;
    Q6_K: q6_k => k_q6_k, k_q6_k_x4, vec_dot_q6_k, vec_dot_x4_q6_k;
}

/// `S` packed sets of four rows against unsigned quants `q` with 256-bit
/// `vpdpbusd` (exact for any unsigned byte). (512-bit steps covering both
/// sets at once measured 1.8× slower here: 6.6 vs 3.7 ns per block and 8
/// rows on a Xeon with AVX-512, one thread.)
#[inline(always)]
unsafe fn vnni_sets<const S: usize>(q: __m256i, y: *const u8, init: [__m256i; S]) -> [__m256i; S] {
    // SAFETY: `y` holds 4 × S packed vectors; AVX-512 VL + VNNI are enabled
    // in the callers.
    unsafe {
        let ws = all_dwords(q);
        let mut acc = init;
        for (j, w) in ws.into_iter().enumerate() {
            for (set, acc) in acc.iter_mut().enumerate() {
                let a = _mm256_loadu_si256(y.add(32 * (j * S + set)).cast());
                *acc = _mm256_dpbusd_epi32(*acc, w, a);
            }
        }
        acc
    }
}
// The same exact block sums as the AVX2 tiles (so the same bits), with every
// weight type made unsigned.
legacy_tile_fns! {
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    Q8_0, 34, q8_0_unsigned, 7, vnni_sets,
        k_q8_0_x16 => tile16_q8_0, k_q8_0_x12 => tile12_q8_0, k_q8_0_x8 => tile8_q8_0,
        k_q8_0_t4 => tile4_q8_0;
    Q4_0, 18, q4_0_unsigned, 3, vnni_sets,
        k_q4_0_x16 => tile16_q4_0, k_q4_0_x12 => tile12_q4_0, k_q4_0_x8 => tile8_q4_0,
        k_q4_0_t4 => tile4_q4_0;
    Q5_0, 22, q5_0_unsigned, 4, vnni_sets,
        k_q5_0_x16 => tile16_q5_0, k_q5_0_x12 => tile12_q5_0, k_q5_0_x8 => tile8_q5_0,
        k_q5_0_t4 => tile4_q5_0;
}

// ------------------------------------------------------- eight-row kernels
//
// Single tokens of the legacy types: eight weight rows against one Q8_0
// activation row, four rows' blocks per 512-bit vector (one row per 128-bit
// lane), unsigned quants through `vpdpbusd`. AVX2's eight-row kernel spends
// about fifteen uops per row and block (decode, `maddubs` + `madd`, a scalar
// scale conversion); this one about five, which a Zen 5 part needed to
// stream Q4_0 from memory instead of computing at half its bandwidth. Q8_0's
// signed quants go in as `q + 128` (offset 2^7); in cache its eight rows run
// at 110-124 GB/s against AVX2's 91-93.

/// Four weight rows' 16-byte chunks at `p[r]` in the lanes of one vector.
#[inline(always)]
unsafe fn lanes4(p: [*const u8; 4]) -> __m512i {
    // SAFETY: each pointer has 16 readable bytes; AVX-512F is enabled.
    unsafe {
        let v = _mm512_castsi128_si512(_mm_loadu_si128(p[0].cast()));
        let v = _mm512_inserti32x4::<1>(v, _mm_loadu_si128(p[1].cast()));
        let v = _mm512_inserti32x4::<2>(v, _mm_loadu_si128(p[2].cast()));
        _mm512_inserti32x4::<3>(v, _mm_loadu_si128(p[3].cast()))
    }
}

/// Four legacy blocks at `x[r]` decoded to unsigned quants, one row per
/// 128-bit lane: `(quants 0..16, quants 16..32)`.
type Decode4 = unsafe fn([*const u8; 4]) -> (__m512i, __m512i);

#[inline(always)]
unsafe fn q4_0_lanes(x: [*const u8; 4]) -> (__m512i, __m512i) {
    // SAFETY: Q4_0 blocks have their 16 nibble bytes at offset 2; AVX-512BW is enabled.
    unsafe {
        let v = lanes4(x.map(|p| p.add(2)));
        let m4 = _mm512_set1_epi8(0x0F);
        (
            _mm512_and_si512(v, m4),
            _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4),
        )
    }
}

#[inline(always)]
unsafe fn q8_0_lanes(x: [*const u8; 4]) -> (__m512i, __m512i) {
    // SAFETY: Q8_0 blocks have their 32 signed quants at offset 2; AVX-512F is enabled.
    unsafe {
        // q + 128 as unsigned bytes.
        let flip = _mm512_set1_epi8(i8::MIN);
        (
            _mm512_xor_si512(lanes4(x.map(|p| p.add(2))), flip),
            _mm512_xor_si512(lanes4(x.map(|p| p.add(18))), flip),
        )
    }
}

#[inline(always)]
unsafe fn q5_0_lanes(x: [*const u8; 4]) -> (__m512i, __m512i) {
    // SAFETY: Q5_0 blocks have qh at offset 2 and 16 nibble bytes at 6;
    // AVX-512BW is enabled.
    unsafe {
        let (lo, hi) = q4_0_lanes(x.map(|p| p.add(4)));
        // The fifth bits (added: the nibbles are below 16): qh's low 16 bits
        // go with quants 0..16 of each lane, its high 16 with quants 16..32;
        // one byte shuffle gathers the four rows' halves into two masks
        // (a scalar loop of shifts and ors cost Q5_0 a third of its speed).
        let qh = x.map(|p| p.add(2).cast::<i32>().read_unaligned());
        let halves = _mm_shuffle_epi8(
            _mm_setr_epi32(qh[0], qh[1], qh[2], qh[3]),
            _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15),
        );
        let mlo = _mm_cvtsi128_si64(halves) as u64;
        let mhi = _mm_extract_epi64::<1>(halves) as u64;
        let b4 = _mm512_set1_epi8(0x10);
        (
            _mm512_mask_add_epi8(lo, mlo, lo, b4),
            _mm512_mask_add_epi8(hi, mhi, hi, b4),
        )
    }
}

/// Eight rows `stride` bytes apart of `nb` blocks of `wsize` bytes, decoded
/// by `decode` to unsigned quants with an offset of `2^shift`, against one
/// Q8_0 activation row. Per block each row's exact integer sum
/// `Σ q·a − 2^shift·Σa` (rows 0, 2, 4, 6 in one vector's lanes, 1, 3, 5, 7 in
/// another's, so the reduction leaves them in order), then AVX2's
/// eight-row float step: `acc[i % 2] = fma(d_w·d_a, Σ, acc[i % 2])` per lane
/// and `acc[0] + acc[1]`, each row's bits from the row kernel.
#[inline(always)]
unsafe fn legacy_rows8_vnni(
    nb: usize,
    w: *const u8,
    stride: usize,
    wsize: usize,
    a: *const u8,
    shift: u32,
    decode: Decode4,
) -> [f32; 8] {
    // SAFETY: the wrappers checked eight rows of `nb` whole blocks `stride` bytes
    // apart and an activation row of `nb` blocks; AVX-512 F/BW/VL + VNNI, FMA
    // and (outside Miri) F16C are enabled.
    unsafe {
        let offset = _mm512_set1_epi8(1 << shift);
        let mut acc = [_mm256_setzero_ps(); 2];
        for i in 0..nb {
            let y = a.add(i * 34);
            let ylo = _mm512_broadcast_i32x4(_mm_loadu_si128(y.add(2).cast()));
            let yhi = _mm512_broadcast_i32x4(_mm_loadu_si128(y.add(18).cast()));
            // −2^shift·Σa, spread over each lane's four dwords.
            let off = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, ylo);
            let neg = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_dpbusd_epi32(off, offset, yhi),
            );
            prefetch_rows8(w, stride, i, wsize);
            let x: [*const u8; 8] = std::array::from_fn(|r| w.add(r * stride + i * wsize));
            let (lo_e, hi_e) = decode([x[0], x[2], x[4], x[6]]);
            let (lo_o, hi_o) = decode([x[1], x[3], x[5], x[7]]);
            let even = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(neg, lo_e, ylo), hi_e, yhi);
            let odd = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(neg, lo_o, ylo), hi_o, yhi);
            // Per lane [e0+e2, e1+e3, o0+o2, o1+o3], then [E, E, O, O]; the low
            // dword of each qword is rows 0, 1, 2, … in order.
            let pairs = _mm512_add_epi32(
                _mm512_unpacklo_epi64(even, odd),
                _mm512_unpackhi_epi64(even, odd),
            );
            let sums = _mm512_add_epi32(pairs, _mm512_shuffle_epi32::<0b10_11_00_01>(pairs));
            let s = _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(sums));
            let d = _mm256_mul_ps(scales8(x), _mm256_set1_ps(super::avx2::fp16(y)));
            acc[i % 2] = _mm256_fmadd_ps(d, s, acc[i % 2]);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(acc[0], acc[1]));
        out
    }
}

/// The f16 scales at `x[r]` as eight f32 (exact).
#[inline(always)]
unsafe fn scales8(x: [*const u8; 8]) -> __m256 {
    // SAFETY: each pointer has two readable bytes; F16C is enabled outside Miri.
    unsafe {
        if cfg!(miri) {
            let f = x.map(|p| fp16(p));
            return _mm256_setr_ps(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
        }
        let h = x.map(|p| p.cast::<u16>().read_unaligned() as u64);
        let lo = h[0] | h[1] << 16 | h[2] << 32 | h[3] << 48;
        let hi = h[4] | h[5] << 16 | h[6] << 32 | h[7] << 48;
        _mm256_cvtph_ps(_mm_set_epi64x(hi as i64, lo as i64))
    }
}

macro_rules! legacy_rows8_fns {
    ($($ty:ident, $size:expr, $shift:expr, $decode:ident, $k:ident => $f:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $k(nb: usize, w: *const u8, stride: usize, a: *const u8) -> [f32; 8] {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { legacy_rows8_vnni(nb, w, stride, $size, a, $shift, $decode) }
        }
        pub(crate) fn $f(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
            let (nb, stride) = rows8_blocks(GgmlType::$ty, GgmlType::Q8_0, n, w, a);
            // SAFETY: eight rows of `nb` blocks, `stride` bytes apart, and an activation
            // row of `nb` blocks (checked above); reachable only through the AVX512
            // table, handed out after AVX-512 F/BW/VL + VNNI were detected.
            unsafe { $k(nb, w.as_ptr(), stride, a.as_ptr()) }
        }
    )*};
}

legacy_rows8_fns! {
    Q4_0, 18, 3, q4_0_lanes, k_q4_0_rows8 => vec_dot_rows8_q4_0;
    Q5_0, 22, 4, q5_0_lanes, k_q5_0_rows8 => vec_dot_rows8_q5_0;
    Q8_0, 34, 7, q8_0_lanes, k_q8_0_rows8 => vec_dot_rows8_q8_0;
}

/// Sixteen dwords of each of eight vectors summed: `[Σv0, …, Σv7]`.
#[inline(always)]
unsafe fn hsum8x16(v: [__m512i; 8]) -> __m256i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe {
        let pair =
            |a, b| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
        let quad =
            |a, b| _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
        // Per 128-bit lane: [Σv0, Σv1, Σv2, Σv3] of that lane, then the same
        // of v4..v7.
        let lo = quad(pair(v[0], v[1]), pair(v[2], v[3]));
        let hi = quad(pair(v[4], v[5]), pair(v[6], v[7]));
        // Lanes [lo0 + lo2, lo1 + lo3, hi0 + hi2, hi1 + hi3], then the halves'
        // lanes added: [Σv0..3 | Σv4..7] in the low 256 bits.
        let h = _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b01_00_01_00>(lo, hi),
            _mm512_shuffle_i32x4::<0b11_10_11_10>(lo, hi),
        );
        let t = _mm512_add_epi32(h, _mm512_shuffle_i32x4::<0b10_11_00_01>(h, h));
        _mm512_castsi512_si256(_mm512_shuffle_i32x4::<0b00_00_10_00>(t, t))
    }
}

/// Eight Q4_K rows `stride` bytes apart against one Q8_K activation row:
/// per row and super-block the row kernel's exact sums (scales through
/// `vpdpbusd` and `vpdpwssd`, mins through `vpmaddwd` against the bsums), the
/// eight rows' reductions and float steps shared: [`k_block_step`] per lane,
/// each row's bits from [`q4_k`].
#[inline(always)]
unsafe fn q4_k_rows8(nb: usize, w: *const u8, stride: usize, a: *const u8) -> [f32; 8] {
    // SAFETY: the wrapper checked eight rows of `nb` blocks (144 bytes) `stride`
    // bytes apart and an activation row of `nb` blocks (292 bytes); AVX-512
    // F/BW/VL + VNNI, FMA and (outside Miri) F16C are enabled.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        // Byte patterns spreading scale bytes (2j, 2j + 1) over 8 + 8 bytes.
        let spread: [__m128i; 4] = std::array::from_fn(|j| {
            let (a, b) = (2 * j as i8, 2 * j as i8 + 1);
            _mm_setr_epi8(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        });
        let mut acc = _mm256_setzero_ps();
        let mut accm = _mm256_setzero_ps();
        for i in 0..nb {
            let ys = a.add(292 * i);
            prefetch_rows8(w, stride, i, 144);
            let y8: [__m512i; 4] = std::array::from_fn(|j| load512(ys.add(4 + 64 * j)));
            // The sub-blocks' bsum pairs, as i16 in every 128-bit lane.
            let bs = _mm256_loadu_si256(ys.add(260).cast());
            let q8s = _mm512_broadcast_i32x4(_mm_hadd_epi16(
                _mm256_castsi256_si128(bs),
                _mm256_extracti128_si256::<1>(bs),
            ));
            let x: [*const u8; 8] = std::array::from_fn(|r| w.add(r * stride + 144 * i));
            let mut sums = [_mm512_setzero_si512(); 8];
            let mut mins = [0u64; 8];
            for (r, (&x, sumi)) in x.iter().zip(&mut sums).enumerate() {
                let (scales, m) = k4_scales_mins(&*x.add(4).cast::<[u8; 12]>());
                mins[r] = u64::from_le_bytes(m);
                let sc = _mm_cvtsi64_si128(u64::from_le_bytes(scales) as i64);
                for (j, (y8, spread)) in y8.iter().zip(&spread).enumerate() {
                    let q = load256(x.add(16 + 32 * j));
                    let both = cat(q, q);
                    // Low nibbles for the first 32 values, high nibbles for the next 32.
                    let q =
                        _mm512_and_si512(_mm512_mask_srli_epi16(both, 0xFFFF_0000, both, 4), m4);
                    let scale = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(sc, *spread));
                    let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, *y8);
                    // |p| ≤ 4·15·128 < 2^15 and the scale < 64: exact.
                    *sumi = scale_add(*sumi, p, scale);
                }
            }
            let s = hsum8x16(sums);
            // Σ min·bsum: rows 0, 2, 4, 6 in one vector's lanes, 1, 3, 5, 7 in
            // the other's, so the reduction leaves them in order.
            let lanes = |o: usize| {
                _mm512_cvtepu8_epi16(_mm256_setr_epi64x(
                    mins[o] as i64,
                    mins[o + 2] as i64,
                    mins[o + 4] as i64,
                    mins[o + 6] as i64,
                ))
            };
            let (me, mo) = (
                _mm512_madd_epi16(lanes(0), q8s),
                _mm512_madd_epi16(lanes(1), q8s),
            );
            let pairs =
                _mm512_add_epi32(_mm512_unpacklo_epi64(me, mo), _mm512_unpackhi_epi64(me, mo));
            let m = _mm512_cvtepi64_epi32(_mm512_add_epi32(
                pairs,
                _mm512_shuffle_epi32::<0b10_11_00_01>(pairs),
            ));
            let dy = _mm256_set1_ps(f32_at(ys));
            let d = _mm256_mul_ps(dy, scales8(x));
            let dm = _mm256_mul_ps(dy, scales8(x.map(|p| p.add(2))));
            // k_block_step, per lane.
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
            accm = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(m), accm);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_sub_ps(acc, accm));
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_q4_k_rows8(nb: usize, w: *const u8, stride: usize, a: *const u8) -> [f32; 8] {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { q4_k_rows8(nb, w, stride, a) }
}

pub(crate) fn vec_dot_rows8_q4_k(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    let (nb, stride) = rows8_blocks(GgmlType::Q4_K, GgmlType::Q8_K, n, w, a);
    // SAFETY: eight rows of `nb` blocks, `stride` bytes apart, and an activation row
    // of `nb` blocks (checked above); reachable only through the AVX512 table, handed
    // out after AVX-512 F/BW/VL + VNNI were detected.
    unsafe { k_q4_k_rows8(nb, w.as_ptr(), stride, a.as_ptr()) }
}

/// One K-quant unit's exact sums against `S` packed sets of four rows with
/// `vpdpbusd` (each lane: 16 products of a quant and an i8), before scaling.
#[inline(always)]
unsafe fn vnni_unit_sums<const S: usize>(q: __m256i, y: *const u8) -> [__m256i; S] {
    // SAFETY: `y` holds the unit's 4 × S packed vectors; AVX-512 VL + VNNI are
    // enabled in the callers.
    unsafe {
        let ws = all_dwords(q);
        let mut parts = [_mm256_setzero_si256(); S];
        for (set, part) in parts.iter_mut().enumerate() {
            for (j, &w) in ws.iter().enumerate() {
                let a = _mm256_loadu_si256(y.add(32 * (j * S + set)).cast());
                *part = _mm256_dpbusd_epi32(*part, w, a);
            }
        }
        parts
    }
}

/// [`super::avx2::Q4KUnit`] with `vpdpbusd`: |Σ| ≤ 16·15·128 < 2^15 per lane,
/// so the i32 lanes are i16 values and one `madd` by `(scale, 0)` scales them
/// exactly.
#[inline(always)]
unsafe fn q4_k_unit<const S: usize>(q: __m256i, y: *const u8, scale: i16, acc: &mut [__m256i; S]) {
    // SAFETY: forwarded from the tile's contract; AVX-512 VL + VNNI are enabled.
    unsafe {
        let sc = _mm256_set1_epi32(scale as u16 as i32);
        for (acc, part) in acc.iter_mut().zip(vnni_unit_sums::<S>(q, y)) {
            *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(part, sc));
        }
    }
}

/// [`super::avx2::Q6KUnit`] with `vpdpbusd`: 16 products of up to 63·128 per
/// lane overflow i16, so the scales go on with one `vpmulld` (exact: the
/// sums stay far inside i32).
#[inline(always)]
unsafe fn q6_k_unit<const S: usize>(
    q: __m256i,
    y: *const u8,
    scales: [i8; 2],
    acc: &mut [__m256i; S],
) {
    // SAFETY: forwarded from the tile's contract; AVX-512 VL + VNNI are enabled.
    unsafe {
        let sc = _mm256_set_m128i(
            _mm_set1_epi32(scales[1] as i32),
            _mm_set1_epi32(scales[0] as i32),
        );
        for (acc, part) in acc.iter_mut().zip(vnni_unit_sums::<S>(q, y)) {
            *acc = _mm256_add_epi32(*acc, _mm256_mullo_epi32(part, sc));
        }
    }
}

k_tiles! {
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    Q4_K: q4_k_tile(q4_k_unit), k_q4_k_x16 => tile16_q4_k, k_q4_k_x12 => tile12_q4_k,
        k_q4_k_x8 => tile8_q4_k, k_q4_k_t4 => tile4_q4_k;
    Q6_K: q6_k_tile(q6_k_unit), k_q6_k_x16 => tile16_q6_k, k_q6_k_x12 => tile12_q6_k,
        k_q6_k_x8 => tile8_q6_k, k_q6_k_t4 => tile4_q6_k;
}

// ------------------------------------------------------------------ panels
//
// The kernels of [`crate::panel`]: sixteen weight rows, one per i32 lane,
// against `T` prepared activation rows; per multiply-add one broadcast of
// four activation bytes (a load, folded into `vpdpbusd`) and no shuffle.

#[inline(always)]
unsafe fn bcast(p: *const u8) -> __m512i {
    // SAFETY: the caller passes four readable bytes.
    unsafe { _mm512_set1_epi32(p.cast::<i32>().read_unaligned()) }
}

#[inline(always)]
unsafe fn load512(p: *const u8) -> __m512i {
    // SAFETY: the caller passes 64 readable bytes; unaligned load.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// How a legacy panel's blocks are laid out: unpacked per call
/// ([`crate::panel::LEGACY_BLOCK`]), or stored
/// ([`crate::panel::STORED_Q8_0_BLOCK`], [`crate::panel::STORED_Q5_0_BLOCK`]).
const UNPACKED: u8 = 0;
const STORED_Q8_0: u8 = 1;
const STORED_Q5_0: u8 = 2;

const fn legacy_block_bytes(form: u8) -> usize {
    match form {
        UNPACKED => crate::panel::LEGACY_BLOCK,
        STORED_Q8_0 => crate::panel::STORED_Q8_0_BLOCK,
        _ => crate::panel::STORED_Q5_0_BLOCK,
    }
}

/// A legacy panel block's eight quant dwords (`w + 2^shift`, one row per
/// lane) and sixteen scales, from its `FORM`.
#[inline(always)]
unsafe fn legacy_block<const FORM: u8>(wb: *const u8) -> ([__m512i; 8], __m512) {
    // SAFETY: a whole block of the form (the caller's contract); AVX-512 F/BW
    // are enabled in the callers.
    unsafe {
        match FORM {
            UNPACKED => (
                std::array::from_fn(|k| load512(wb.add(64 * k))),
                _mm512_loadu_ps(wb.add(512).cast()),
            ),
            STORED_Q8_0 => (
                std::array::from_fn(|k| load512(wb.add(64 * k))),
                load16_f16(wb.add(512)),
            ),
            _ => {
                // Nibbles, then each dword's fifth bits added as 16 per byte.
                let low = _mm512_set1_epi8(0x0F);
                let sixteen = _mm512_set1_epi8(0x10);
                // Plain loops: a closure here would not inherit the callers'
                // target features, and one too large to inline ran 10× slower.
                let mut w = [_mm512_setzero_si512(); 8];
                for j in 0..4 {
                    let p = load512(wb.add(64 * j));
                    w[j] = _mm512_and_si512(p, low);
                    w[j + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(p), low);
                }
                for (k, w) in w.iter_mut().enumerate() {
                    let mask: __mmask64 = wb.add(256 + 8 * k).cast::<u64>().read_unaligned();
                    *w = _mm512_mask_add_epi8(*w, mask, *w, sixteen);
                }
                (w, load16_f16(wb.add(320)))
            }
        }
    }
}

/// One 32-value block of a legacy panel (`wb`, laid out as `FORM`) against
/// `T` prepared rows' blocks (`ys`): the exact sums `Σ(w + o)·a − o·Σa`,
/// then the row kernel's `acc = fma(d_w·d_a, Σ, acc)` per lane.
#[inline(always)]
unsafe fn legacy_panel_step<const T: usize, const FORM: u8>(
    wb: *const u8,
    ys: [*const u8; T],
    acc: &mut [__m512; T],
) {
    // SAFETY: a whole panel block and `T` whole prepared blocks (the kernel's
    // contract); AVX-512 F/BW + VNNI are enabled in the callers.
    unsafe {
        let (w, dw) = legacy_block::<FORM>(wb);
        for t in 0..T {
            let y = ys[t];
            // Two chains, so eight tokens keep both `vpdpbusd` ports busy
            // (one chain measured 20% slower: latency-bound).
            let mut a0 = bcast(y.add(36));
            let mut a1 = _mm512_setzero_si512();
            for k in (0..8).step_by(2) {
                a0 = _mm512_dpbusd_epi32(a0, w[k], bcast(y.add(4 * k)));
                a1 = _mm512_dpbusd_epi32(a1, w[k + 1], bcast(y.add(4 * k + 4)));
            }
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(y.add(32))));
            acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), acc[t]);
        }
    }
}

/// A legacy panel of `nb` blocks against `T` prepared rows `arow` bytes
/// apart: even and odd blocks in two chains, added at the end (the row
/// kernels' order).
#[inline(always)]
unsafe fn legacy_panel<const T: usize, const FORM: u8>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: `nb` panel blocks, `T` prepared rows of `nb` blocks and `16·T`
    // floats of output (the wrapper's checks); features enabled in the callers.
    unsafe {
        use crate::panel::LEGACY_ACT;
        let block = legacy_block_bytes(FORM);
        let (mut even, mut odd) = ([_mm512_setzero_ps(); T], [_mm512_setzero_ps(); T]);
        let ys = |i: usize| std::array::from_fn(|t| acts.add(t * arow + i * LEGACY_ACT));
        let mut i = 0;
        while i + 2 <= nb {
            legacy_panel_step::<T, FORM>(panel.add(i * block), ys(i), &mut even);
            legacy_panel_step::<T, FORM>(panel.add((i + 1) * block), ys(i + 1), &mut odd);
            i += 2;
        }
        if i < nb {
            legacy_panel_step::<T, FORM>(panel.add(i * block), ys(i), &mut even);
        }
        for t in 0..T {
            _mm512_storeu_ps(out.add(16 * t), _mm512_add_ps(even[t], odd[t]));
        }
    }
}

/// `n` stored legacy panels of `nb` blocks against one prepared row, each
/// panel as [`legacy_panel`] for one token, each block's bytes prefetched
/// `ahead` bytes further on ([`crate::prefetch`]; 0: none). Without
/// software prefetch, on the Zen 4 host, SmolLM2's single-token matmuls
/// back to back streamed 36-39 GB/s against 32-35 with prefetches 8 KiB
/// ahead where the probe read 34-37 (vCPUs close), and 53-59 against 39-42
/// where it read 61-63 (far apart); 1 to 32 KiB ahead were all slower.
#[inline(always)]
unsafe fn stored_single<const FORM: u8>(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    use crate::panel::LEGACY_ACT;
    let block = legacy_block_bytes(FORM);
    // SAFETY: `n` panels of `nb` stored blocks, a prepared row of `nb` blocks
    // and `16·n` floats of output (the wrapper's checks); the features are
    // enabled in the callers.
    unsafe {
        for p in 0..n {
            let panel = panels.add(p * nb * block);
            let (mut even, mut odd) = ([_mm512_setzero_ps()], [_mm512_setzero_ps()]);
            for i in 0..nb {
                let wb = panel.add(i * block);
                stream_ahead(wb, ahead, block);
                let acc = if i % 2 == 0 { &mut even } else { &mut odd };
                legacy_panel_step::<1, FORM>(wb, [act.add(i * LEGACY_ACT)], acc);
            }
            _mm512_storeu_ps(out.add(16 * p), _mm512_add_ps(even[0], odd[0]));
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_stored_single_q8_0(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { stored_single::<STORED_Q8_0>(nb, panels, n, act, out, ahead) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_stored_single_q5_0(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: forwarded from the wrapper's checks.
    unsafe { stored_single::<STORED_Q5_0>(nb, panels, n, act, out, ahead) }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_unpack_stored_q5_0(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::{LEGACY_BLOCK, STORED_Q5_0_BLOCK};
    // SAFETY: `nb` stored blocks in and `nb` legacy blocks out (the wrapper's
    // checks); the features are enabled.
    unsafe {
        for i in 0..nb {
            let (w, dw) = legacy_block::<STORED_Q5_0>(panel.add(i * STORED_Q5_0_BLOCK));
            let dst = out.add(i * LEGACY_BLOCK);
            for (k, w) in w.into_iter().enumerate() {
                _mm512_storeu_si512(dst.add(64 * k).cast(), w);
            }
            _mm512_storeu_ps(dst.add(512).cast(), dw);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_stored_single_q4_k(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    use crate::panel::STORED_Q4_K_BLOCK;
    // SAFETY: `n` panels of `nb` stored super-blocks, a prepared row and `16·n`
    // outputs (the wrapper's checks); the features are enabled.
    unsafe {
        for p in 0..n {
            let panel = panels.add(p * nb * STORED_Q4_K_BLOCK);
            q4_k_panel_ahead::<1, true>(nb, panel, act, 0, out.add(16 * p), ahead);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_unpack_stored_q4_k(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::{Q4_K_BLOCK, STORED_Q4_K_BLOCK};
    // SAFETY: `nb` stored super-blocks in and `nb` panel super-blocks out (the
    // wrapper's checks); the features are enabled.
    unsafe {
        let low = _mm512_set1_epi8(0x0F);
        for i in 0..nb {
            let p = panel.add(i * STORED_Q4_K_BLOCK);
            let dst = out.add(i * Q4_K_BLOCK);
            for j in 0..4 {
                for k in 0..8 {
                    let packed = load512(p.add(512 * j + 64 * k));
                    let lo = _mm512_and_si512(packed, low);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(packed), low);
                    _mm512_storeu_si512(dst.add(1024 * j + 64 * k).cast(), lo);
                    _mm512_storeu_si512(dst.add(1024 * j + 512 + 64 * k).cast(), hi);
                }
            }
            let meta = stored_q4_k_meta(p);
            for sb in 0..8 {
                _mm512_storeu_si512(dst.add(4096 + 64 * sb).cast(), q4_k_scale(&meta, sb));
            }
            for q in 0..4 {
                _mm512_storeu_si512(dst.add(4608 + 64 * q).cast(), q4_k_min_pair(&meta, q));
            }
            _mm512_storeu_ps(dst.add(4864).cast(), load16_f16(p.add(2240)));
            _mm512_storeu_ps(dst.add(4928).cast(), load16_f16(p.add(2272)));
        }
    }
}

/// A stored type's sizes, for the checked entry points below.
struct StoredShape {
    ty: &'static str,
    /// Values per block.
    values: usize,
    /// Bytes of a stored block (sixteen rows).
    block: usize,
    /// Bytes of a block of the activation row the one-token kernel reads
    /// ([`crate::panel::StoredPanelFns::single_reads_quantized`]).
    act_block: usize,
    /// Bytes of a block of the panel a stored block unpacks to.
    panel_block: usize,
}

const SHAPE_Q8_0: StoredShape = StoredShape {
    ty: "Q8_0",
    values: 32,
    block: crate::panel::STORED_Q8_0_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::LEGACY_BLOCK,
};
const SHAPE_Q5_0: StoredShape = StoredShape {
    ty: "Q5_0",
    values: 32,
    block: crate::panel::STORED_Q5_0_BLOCK,
    act_block: crate::panel::LEGACY_ACT,
    panel_block: crate::panel::LEGACY_BLOCK,
};
const SHAPE_Q4_K: StoredShape = StoredShape {
    ty: "Q4_K",
    values: 256,
    block: crate::panel::STORED_Q4_K_BLOCK,
    act_block: crate::panel::Q4_K_ACT,
    panel_block: crate::panel::Q4_K_BLOCK,
};
const SHAPE_Q6_K: StoredShape = StoredShape {
    ty: "Q6_K",
    values: 256,
    block: crate::panel::STORED_Q6_K_BLOCK,
    // Its one-token kernel reads the Q8_K row itself.
    act_block: crate::panel::Q8_K_BYTES,
    panel_block: crate::panel::Q6_K_BLOCK,
};

/// A one-token stored kernel: (blocks per row, panels, panel count,
/// activation row, outputs, prefetch distance).
type StoredSingleKernel = unsafe fn(usize, *const u8, usize, *const u8, *mut f32, usize);
/// A stored-panel unpacker: (blocks per row, stored panel, panel out).
type UnpackStoredKernel = unsafe fn(usize, *const u8, *mut u8);

/// Checks a one-token call over stored panels of `shape` (whole blocks,
/// whole panels, the activation row's and the output's sizes), then runs
/// `kernel` on it.
fn stored_single_call(
    shape: &StoredShape,
    kernel: StoredSingleKernel,
    cols: usize,
    panels: &[u8],
    act: &[u8],
    out: &mut [f32],
) {
    let StoredShape { ty, values, .. } = *shape;
    assert!(
        cols > 0 && cols.is_multiple_of(values),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / values;
    let pbytes = nb * shape.block;
    assert!(
        panels.len().is_multiple_of(pbytes),
        "stored {ty}: {} bytes is not whole panels",
        panels.len()
    );
    let n = panels.len() / pbytes;
    assert_eq!(act.len(), nb * shape.act_block, "{ty} activation row size");
    assert_eq!(out.len(), 16 * n, "stored panel output size");
    // SAFETY: `n` whole panels of `nb` stored blocks, an activation row of
    // `nb` blocks and `16·n` outputs (checked above), as every kernel passed here
    // reads and writes; reachable only through the AVX512 table, handed out
    // after AVX-512 F/BW/VL + VNNI were detected.
    unsafe {
        kernel(
            nb,
            panels.as_ptr(),
            n,
            act.as_ptr(),
            out.as_mut_ptr(),
            crate::prefetch::ahead(),
        )
    }
}

/// Checks an unpacking call of one stored panel of `shape` (whole blocks,
/// both sizes), then runs `kernel` on it.
fn unpack_stored_call(
    shape: &StoredShape,
    kernel: UnpackStoredKernel,
    cols: usize,
    panel: &[u8],
    out: &mut [u8],
) {
    let StoredShape { ty, values, .. } = *shape;
    assert!(
        cols.is_multiple_of(values),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / values;
    assert_eq!(panel.len(), nb * shape.block, "stored {ty} panel size");
    assert_eq!(out.len(), nb * shape.panel_block, "{ty} panel size");
    // SAFETY: `nb` blocks each way (checked above), as every unpacker passed
    // here reads and writes; reachable only through the AVX512 table, handed
    // out after AVX-512 F/BW/VL + VNNI were detected.
    unsafe { kernel(nb, panel.as_ptr(), out.as_mut_ptr()) }
}

pub(crate) fn stored_single_q8_0(cols: usize, panels: &[u8], act: &[u8], out: &mut [f32]) {
    stored_single_call(&SHAPE_Q8_0, k_stored_single_q8_0, cols, panels, act, out)
}
pub(crate) fn stored_single_q5_0(cols: usize, panels: &[u8], act: &[u8], out: &mut [f32]) {
    stored_single_call(&SHAPE_Q5_0, k_stored_single_q5_0, cols, panels, act, out)
}
pub(crate) fn stored_single_q4_k(cols: usize, panels: &[u8], act: &[u8], out: &mut [f32]) {
    stored_single_call(&SHAPE_Q4_K, k_stored_single_q4_k, cols, panels, act, out)
}
pub(crate) fn stored_single_q6_k(cols: usize, panels: &[u8], act: &[u8], out: &mut [f32]) {
    stored_single_call(&SHAPE_Q6_K, k_stored_single_q6_k, cols, panels, act, out)
}

/// A stored panel → the panel its type's kernels read (the legacy panel for
/// Q5_0), with the stored kernels' expansion (checked against the file's
/// rows unpacked).
pub(crate) fn unpack_stored_q5_0(cols: usize, panel: &[u8], out: &mut [u8]) {
    unpack_stored_call(&SHAPE_Q5_0, k_unpack_stored_q5_0, cols, panel, out)
}
pub(crate) fn unpack_stored_q4_k(cols: usize, panel: &[u8], out: &mut [u8]) {
    unpack_stored_call(&SHAPE_Q4_K, k_unpack_stored_q4_k, cols, panel, out)
}
pub(crate) fn unpack_stored_q6_k(cols: usize, panel: &[u8], out: &mut [u8]) {
    unpack_stored_call(&SHAPE_Q6_K, k_unpack_stored_q6_k, cols, panel, out)
}

/// `s + x · scale` per i32 lane, exact for `|x| < 2^15` and a scale
/// `0 ≤ scale < 2^15` (its lane read as the i16 pair `(scale, 0)`): one
/// `vpdpwssd`, or under Miri (which does not implement it) the same
/// `vpmaddwd` and add.
#[inline(always)]
unsafe fn scale_add(s: __m512i, x: __m512i, scale: __m512i) -> __m512i {
    // SAFETY: AVX-512F/BW + VNNI are enabled in every caller.
    unsafe {
        if cfg!(miri) {
            _mm512_add_epi32(s, _mm512_madd_epi16(x, scale))
        } else {
            _mm512_dpwssd_epi32(s, x, scale)
        }
    }
}

/// A Q4_K panel against `T` prepared rows: per super-block the exact
/// `Σ_s scale_s · Σ q·a` per lane (each sub-block's sum in two halves of 16
/// products, |Σ| ≤ 16·15·128 < 2^15, scaled with [`scale_add`]), then `acc = fma(d_w·d_a, Σ, acc)`; the
/// mins' chain `accm = fma(dmin_w·d_a, Σ_s min_s · Σa_s, accm)` runs in a
/// second pass (independent of the first, so the same bits as the row
/// kernel's interleaved steps, with fewer live registers); the result is
/// `acc − accm`.
#[inline(always)]
unsafe fn q4_k_panel<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: the same contract.
    unsafe { q4_k_panel_ahead::<T, STORED>(nb, panel, acts, arow, out, 0) }
}

/// [`q4_k_panel`], each sub-block's bytes prefetched `ahead` bytes further
/// on ([`crate::prefetch`]; 0: none).
#[inline(always)]
unsafe fn q4_k_panel_ahead<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
    ahead: usize,
) {
    // SAFETY: as for [`legacy_panel`], with Q4_K panel (or stored) and
    // prepared blocks.
    unsafe {
        use crate::panel::{Q4_K_ACT, Q4_K_BLOCK, STORED_Q4_K_BLOCK};
        let block = if STORED {
            STORED_Q4_K_BLOCK
        } else {
            Q4_K_BLOCK
        };
        let ys = |i: usize| -> [*const u8; T] {
            std::array::from_fn(|t| acts.add(t * arow + i * Q4_K_ACT))
        };
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * block);
            let ys = ys(i);
            let meta = if STORED {
                stored_q4_k_meta(p)
            } else {
                [_mm512_setzero_si512(); 4]
            };
            let mut s = [_mm512_setzero_si512(); T];
            for sb in 0..8 {
                stream_ahead(p.add(block / 8 * sb), ahead, block / 8);
                let mut w = [_mm512_setzero_si512(); 8];
                for (k, w) in w.iter_mut().enumerate() {
                    *w = if !STORED {
                        load512(p.add(512 * sb + 64 * k))
                    } else if sb % 2 == 0 {
                        _mm512_and_si512(load512(p.add(512 * (sb / 2) + 64 * k)), low)
                    } else {
                        let packed = load512(p.add(512 * (sb / 2) + 64 * k));
                        _mm512_and_si512(_mm512_srli_epi16::<4>(packed), low)
                    };
                }
                let sc = if STORED {
                    // Byte `sb % 4` of the scales' dword alone, as an i32.
                    q4_k_scale(&meta, sb)
                } else {
                    load512(p.add(4096 + 64 * sb))
                };
                for t in 0..T {
                    let y = ys[t].add(4 + 32 * sb);
                    let mut a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], bcast(y));
                    let mut a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bcast(y.add(4)));
                    for k in 1..4 {
                        a0 = _mm512_dpbusd_epi32(a0, w[2 * k], bcast(y.add(8 * k)));
                        a1 = _mm512_dpbusd_epi32(a1, w[2 * k + 1], bcast(y.add(8 * k + 4)));
                    }
                    s[t] = scale_add(scale_add(s[t], a0, sc), a1, sc);
                }
            }
            let dw = if STORED {
                load16_f16(p.add(2240))
            } else {
                _mm512_loadu_ps(p.add(4864).cast())
            };
            for t in 0..T {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(ys[t])));
                acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[t]), acc[t]);
            }
        }
        let mut accm = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * block);
            let ys = ys(i);
            let mut mins = [_mm512_setzero_si512(); 4];
            if STORED {
                let meta = stored_q4_k_meta(p);
                for (q, mins) in mins.iter_mut().enumerate() {
                    *mins = q4_k_min_pair(&meta, q);
                }
            } else {
                for (q, mins) in mins.iter_mut().enumerate() {
                    *mins = load512(p.add(4608 + 64 * q));
                }
            }
            let dmw = if STORED {
                load16_f16(p.add(2272))
            } else {
                _mm512_loadu_ps(p.add(4928).cast())
            };
            for t in 0..T {
                let y = ys[t];
                let mut m = _mm512_madd_epi16(mins[0], bcast(y.add(260)));
                for (q, &mins) in mins.iter().enumerate().skip(1) {
                    m = _mm512_add_epi32(m, _mm512_madd_epi16(mins, bcast(y.add(260 + 4 * q))));
                }
                let dm = _mm512_mul_ps(dmw, _mm512_set1_ps(f32_at(y)));
                accm[t] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m), accm[t]);
            }
        }
        for t in 0..T {
            _mm512_storeu_ps(out.add(16 * t), _mm512_sub_ps(acc[t], accm[t]));
        }
    }
}

/// Each i32 lane's first byte index within its 128-bit lane (`4·(lane % 4)`),
/// the base of the shuffles picking bytes of a lane's own dword.
#[inline(always)]
unsafe fn lane_bytes4() -> __m512i {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe { _mm512_set_epi32(12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0) }
}

/// Sub-block `sb`'s scale of a stored Q4_K super-block's `meta`
/// ([`stored_q4_k_meta`]), one row per i32 lane.
#[inline(always)]
unsafe fn q4_k_scale(meta: &[__m512i; 4], sb: usize) -> __m512i {
    // SAFETY: AVX-512F/BW are enabled in every caller.
    unsafe {
        // Byte `sb % 4` of the lane's dword, then three zeros.
        let pick = (0x8080_8000 | (sb % 4) as u32) as i32;
        let pick = _mm512_or_si512(lane_bytes4(), _mm512_set1_epi32(pick));
        _mm512_shuffle_epi8(meta[sb / 4], pick)
    }
}

/// Sub-blocks `2q` and `2q + 1`'s mins of a stored Q4_K super-block's
/// `meta`, as an i16 pair per lane (the Q4_K panel's layout).
#[inline(always)]
unsafe fn q4_k_min_pair(meta: &[__m512i; 4], q: usize) -> __m512i {
    // SAFETY: AVX-512F/BW are enabled in every caller.
    unsafe {
        // Bytes `2q % 4` and `2q % 4 + 1` of the lane's dword, each then a zero.
        let b = (2 * q % 4) as u32;
        let pick = (0x8000_8000 | b | (b + 1) << 16) as i32;
        let base = _mm512_or_si512(lane_bytes4(), _mm512_slli_epi32::<16>(lane_bytes4()));
        let pick = _mm512_or_si512(base, _mm512_set1_epi32(pick));
        _mm512_shuffle_epi8(meta[2 + q / 2], pick)
    }
}

/// A stored Q4_K super-block's 6-bit scales and mins as bytes, one row per
/// i32 lane: scales 0..4, scales 4..8, mins 0..4, mins 4..8 (ggml's
/// `get_scale_min_k4` on the three dwords of twelve bytes).
#[inline(always)]
unsafe fn stored_q4_k_meta(p: *const u8) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512F/BW.
    unsafe {
        let d0 = load512(p.add(2048));
        let d1 = load512(p.add(2112));
        let d2 = load512(p.add(2176));
        let six = _mm512_set1_epi8(0x3F);
        let low = _mm512_set1_epi8(0x0F);
        let top = _mm512_set1_epi8(0x30);
        [
            _mm512_and_si512(d0, six),
            _mm512_or_si512(
                _mm512_and_si512(d2, low),
                _mm512_and_si512(_mm512_srli_epi32::<2>(d0), top),
            ),
            _mm512_and_si512(d1, six),
            _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32::<4>(d2), low),
                _mm512_and_si512(_mm512_srli_epi32::<2>(d1), top),
            ),
        ]
    }
}

/// A Q6_K panel against `T` prepared rows: signed quants `q − 32` against
/// activations `a + 128`; per super-block the sum starts from the rows'
/// `Σ_s scale_s · (−128·Σ(q − 32))`, so it ends as the row kernel's exact
/// `Σ_s scale_s · Σ (q − 32)·a`; then `acc = fma(d_w·d_a, Σ, acc)`.
#[inline(always)]
unsafe fn q6_k_panel<const T: usize, const STORED: bool>(
    nb: usize,
    panel: *const u8,
    acts: *const u8,
    arow: usize,
    out: *mut f32,
) {
    // SAFETY: as for [`legacy_panel`], with Q6_K panel (or stored) and
    // prepared blocks.
    unsafe {
        use crate::panel::{Q6_K_ACT, Q6_K_BLOCK, STORED_Q6_K_BLOCK};
        let block = if STORED {
            STORED_Q6_K_BLOCK
        } else {
            Q6_K_BLOCK
        };
        let mut acc = [_mm512_setzero_ps(); T];
        for i in 0..nb {
            let p = panel.add(i * block);
            let ys: [*const u8; T] = std::array::from_fn(|t| acts.add(t * arow + i * Q6_K_ACT));
            let mut w = [[_mm512_setzero_si512(); 4]; 16];
            let mut sc = [_mm512_setzero_si512(); 16];
            let offset = if STORED {
                stored_q6_k_expand(p, &mut w, &mut sc)
            } else {
                load512(p.add(5120))
            };
            let mut s = [offset; T];
            for sb in 0..16 {
                let (w, sc) = if STORED {
                    (w[sb], sc[sb])
                } else {
                    (
                        std::array::from_fn(|k| load512(p.add(256 * sb + 64 * k))),
                        load512(p.add(4096 + 64 * sb)),
                    )
                };
                for t in 0..T {
                    let y = ys[t].add(4 + 16 * sb);
                    let mut a = _mm512_setzero_si512();
                    for (k, &w) in w.iter().enumerate() {
                        a = _mm512_dpbusd_epi32(a, bcast(y.add(4 * k)), w);
                    }
                    s[t] = _mm512_add_epi32(s[t], _mm512_mullo_epi32(a, sc));
                }
            }
            let dw = if STORED {
                load16_f16(p.add(3328))
            } else {
                _mm512_loadu_ps(p.add(5184).cast())
            };
            for t in 0..T {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(ys[t])));
                acc[t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[t]), acc[t]);
            }
        }
        for (t, &acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.add(16 * t), acc);
        }
    }
}

/// Sub-blocks `4m..4m + 4`'s scales of a stored Q6_K super-block, one row
/// per i32 lane.
#[inline(always)]
unsafe fn q6_k_scales(p: *const u8, m: usize) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512F.
    unsafe {
        let scales = load512(p.add(3072 + 64 * m));
        [
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(scales)),
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(scales)),
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(scales)),
            _mm512_srai_epi32::<24>(scales),
        ]
    }
}

/// The quants `q` (0..64) of values `128h + 32g + 4·k8..+4` of a stored
/// Q6_K super-block's sixteen rows, for `g` in 0..4 (sub-block
/// `8h + 2g + k8/4`, dword `k8 % 4` of the Q6_K panel).
#[inline(always)]
unsafe fn q6_k_quants(p: *const u8, h: usize, k8: usize) -> [__m512i; 4] {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512F/BW.
    unsafe {
        let (m4, m2) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let at = p.add(192 * (8 * h + k8));
        let qh = load512(at);
        // The high bits of group `g` at bits 4-5 of each byte.
        let high = [
            _mm512_slli_epi16::<4>(qh),
            _mm512_slli_epi16::<2>(qh),
            qh,
            _mm512_srli_epi16::<2>(qh),
        ];
        let (ql0, ql1) = (load512(at.add(64)), load512(at.add(128)));
        let low = [
            ql0,
            ql1,
            _mm512_srli_epi16::<4>(ql0),
            _mm512_srli_epi16::<4>(ql1),
        ];
        // (low & 0x0F) | (high & 0x30) (a loop, not a closure: see
        // `legacy_block`).
        let mut q = [_mm512_setzero_si512(); 4];
        for (g, q) in q.iter_mut().enumerate() {
            *q = _mm512_ternarylogic_epi32::<0xF8>(_mm512_and_si512(low[g], m4), high[g], m2);
        }
        q
    }
}

/// A stored Q6_K super-block expanded into the Q6_K panel's quants `q − 32`
/// (`w[s][k]`: sub-block `s`, dword `k`) and scales as i32 (`sc[s]`);
/// returns the panel's per-row offset `Σ_s scale_s · (−128·Σ(q − 32))`.
#[inline(always)]
unsafe fn stored_q6_k_expand(
    p: *const u8,
    w: &mut [[__m512i; 4]; 16],
    sc: &mut [__m512i; 16],
) -> __m512i {
    // SAFETY: a whole stored super-block (the caller's contract); AVX-512
    // F/BW + VNNI are enabled in the callers.
    unsafe {
        let (ones, b32) = (_mm512_set1_epi8(1), _mm512_set1_epi8(32));
        for m in 0..4 {
            sc[4 * m..4 * m + 4].copy_from_slice(&q6_k_scales(p, m));
        }
        let mut offset = _mm512_setzero_si512();
        for h in 0..2 {
            for k8 in 0..8 {
                // Values 128h + 32g + 4·k8.. for g in 0..4: sub-block
                // 8h + 2g + k8 / 4, dword k8 % 4.
                for (g, q) in q6_k_quants(p, h, k8).into_iter().enumerate() {
                    w[8 * h + 2 * g + k8 / 4][k8 % 4] = _mm512_sub_epi8(q, b32);
                }
            }
        }
        for s in 0..16 {
            // Σ(q − 32) per row: four dwords' bytes added first (|Σ| ≤ 4·32).
            let [a, b, c, d] = w[s];
            let bytes = _mm512_add_epi8(_mm512_add_epi8(a, b), _mm512_add_epi8(c, d));
            let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, bytes);
            offset = _mm512_add_epi32(offset, _mm512_mullo_epi32(sc[s], sum));
        }
        // × −128.
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(offset))
    }
}

/// Super-blocks of the activation row whose sub-block sums
/// [`k_stored_single_q6_k`] widens at a time (on the stack).
const Q6_K_SINGLE_CHUNK: usize = 16;

/// One token over stored Q6_K panels, against the Q8_K row itself: each 64
/// bytes of quants rebuilt as unsigned `q` (0..64) and multiplied at once
/// with the signed activations (`vpdpbusd` takes them in that order), half
/// a super-block at a time; each sub-block's sum then takes `32·Σa` from
/// the row's own sub-block sums, so it is the row kernel's exact
/// `Σ (q − 32)·a` with neither the `− 32` per quant byte nor the quants'
/// byte sums the prepared (`a + 128`) form needs: about a third fewer
/// vector instructions, where this kernel was compute-bound (kernel bench,
/// 640×2048 in cache on two Zen 4 threads, runs alternated: 43-54 GB/s
/// before, 105-107 after; Q4_K's stored kernel reads 66-98). The activation's
/// sums are widened to `32·Σa` as i32 once per call for up to
/// [`Q6_K_SINGLE_CHUNK`] super-blocks, then broadcast from memory; longer
/// rows go in chunks, each panel's accumulator kept in `out` between
/// them (the same additions in the same order).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_stored_single_q6_k(
    nb: usize,
    panels: *const u8,
    n: usize,
    act: *const u8,
    out: *mut f32,
    ahead: usize,
) {
    use crate::panel::{Q8_K_BYTES, STORED_Q6_K_BLOCK};
    // SAFETY: `n` panels of `nb` stored super-blocks, `nb` Q8_K blocks and
    // `16·n` outputs (the wrapper's checks); the features are enabled; the
    // stack buffer holds the sums of the chunk's super-blocks only.
    unsafe {
        let mut sums = [0i32; 16 * Q6_K_SINGLE_CHUNK];
        for c0 in (0..nb).step_by(Q6_K_SINGLE_CHUNK) {
            let c1 = nb.min(c0 + Q6_K_SINGLE_CHUNK);
            for i in c0..c1 {
                // Q8_K: the scale (f32), 256 quants, then 16 i16 sums.
                let bsums = _mm256_loadu_si256(act.add(i * Q8_K_BYTES + 260).cast());
                let wide = _mm512_slli_epi32::<5>(_mm512_cvtepi16_epi32(bsums));
                _mm512_storeu_si512(sums.as_mut_ptr().add(16 * (i - c0)).cast(), wide);
            }
            for panel in 0..n {
                let mut acc = if c0 == 0 {
                    _mm512_setzero_ps()
                } else {
                    _mm512_loadu_ps(out.add(16 * panel))
                };
                for i in c0..c1 {
                    let p = panels.add((panel * nb + i) * STORED_Q6_K_BLOCK);
                    let y = act.add(i * Q8_K_BYTES);
                    let b = sums.as_ptr().add(16 * (i - c0));
                    let mut s = _mm512_setzero_si512();
                    for h in 0..2 {
                        // Sub-block 8h + j's Σ q·a.
                        let mut a = [_mm512_setzero_si512(); 8];
                        for k8 in 0..8 {
                            // A sixteenth of the block, `ahead` further on.
                            let part = STORED_Q6_K_BLOCK / 16;
                            stream_ahead(p.add(part * (8 * h + k8)), ahead, part);
                            for (g, w) in q6_k_quants(p, h, k8).into_iter().enumerate() {
                                // Values 128h + 32g + 4·k8..: quants 4 + that.
                                let x = bcast(y.add(4 + 128 * h + 32 * g + 4 * k8));
                                let j = 2 * g + k8 / 4;
                                a[j] = _mm512_dpbusd_epi32(a[j], w, x);
                            }
                        }
                        for m in 0..2 {
                            for (c, sc) in q6_k_scales(p, 2 * h + m).into_iter().enumerate() {
                                let j = 4 * m + c;
                                let t =
                                    _mm512_sub_epi32(a[j], _mm512_set1_epi32(*b.add(8 * h + j)));
                                s = _mm512_add_epi32(s, _mm512_mullo_epi32(t, sc));
                            }
                        }
                    }
                    let d = _mm512_mul_ps(load16_f16(p.add(3328)), _mm512_set1_ps(f32_at(y)));
                    acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
                }
                _mm512_storeu_ps(out.add(16 * panel), acc);
            }
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_unpack_stored_q6_k(nb: usize, panel: *const u8, out: *mut u8) {
    use crate::panel::{Q6_K_BLOCK, STORED_Q6_K_BLOCK};
    // SAFETY: `nb` stored super-blocks in and `nb` panel super-blocks out (the
    // wrapper's checks); the features are enabled.
    unsafe {
        for i in 0..nb {
            let p = panel.add(i * STORED_Q6_K_BLOCK);
            let dst = out.add(i * Q6_K_BLOCK);
            let mut w = [[_mm512_setzero_si512(); 4]; 16];
            let mut sc = [_mm512_setzero_si512(); 16];
            let offset = stored_q6_k_expand(p, &mut w, &mut sc);
            for (s, (w, &sc)) in w.iter().zip(&sc).enumerate() {
                for (k, &w) in w.iter().enumerate() {
                    store512(dst.add(256 * s + 64 * k), w);
                }
                store512(dst.add(4096 + 64 * s), sc);
            }
            store512(dst.add(5120), offset);
            _mm512_storeu_ps(dst.add(5184).cast(), load16_f16(p.add(3328)));
        }
    }
}

macro_rules! panel_fns {
    ($($ty:literal, $values:literal: $body:ident[$form:expr], $block:expr, $act:expr,
       $kw:ident => $wide:ident, $kn:ident => $narrow:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $kw(nb: usize, panel: *const u8, acts: *const u8, arow: usize, out: *mut f32) {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { $body::<{ crate::panel::PANEL_TOKENS }, { $form }>(nb, panel, acts, arow, out) }
        }
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $kn(nb: usize, panel: *const u8, acts: *const u8, arow: usize, out: *mut f32) {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { $body::<{ crate::panel::PANEL_TOKENS / 2 }, { $form }>(nb, panel, acts, arow, out) }
        }
        pub(crate) fn $wide(cols: usize, panel: &[u8], acts: &[u8], out: &mut [f32]) {
            let (nb, arow) = panel_call($ty, $values, cols, panel, $block, acts, $act, out, crate::panel::PANEL_TOKENS);
            // SAFETY: `nb` panel blocks, the tokens' prepared rows and their outputs
            // (checked above); reachable only through the AVX512 table, handed out
            // after AVX-512 F/BW/VL + VNNI were detected.
            unsafe { $kw(nb, panel.as_ptr(), acts.as_ptr(), arow, out.as_mut_ptr()) }
        }
        pub(crate) fn $narrow(cols: usize, panel: &[u8], acts: &[u8], out: &mut [f32]) {
            let (nb, arow) = panel_call($ty, $values, cols, panel, $block, acts, $act, out, crate::panel::PANEL_TOKENS / 2);
            // SAFETY: as for the wide kernel, with half the tokens.
            unsafe { $kn(nb, panel.as_ptr(), acts.as_ptr(), arow, out.as_mut_ptr()) }
        }
    )*};
}

/// Checks a panel call's buffers; returns (blocks, prepared row bytes).
#[allow(clippy::too_many_arguments)]
pub(super) fn panel_call(
    ty: &str,
    bs: usize,
    cols: usize,
    panel: &[u8],
    block: usize,
    acts: &[u8],
    act_block: usize,
    out: &[f32],
    tokens: usize,
) -> (usize, usize) {
    assert!(
        cols.is_multiple_of(bs),
        "{ty}: {cols} values is not whole blocks"
    );
    let nb = cols / bs;
    assert_eq!(panel.len(), nb * block, "{ty} panel size");
    assert_eq!(
        acts.len(),
        tokens * nb * act_block,
        "{ty} prepared rows size"
    );
    assert_eq!(out.len(), 16 * tokens, "{ty} panel output size");
    (nb, nb * act_block)
}

// One legacy kernel serves Q8_0, Q4_0 and Q5_0: their panels differ only
// in how they were unpacked.
panel_fns! {
    "legacy", 32: legacy_panel[UNPACKED], crate::panel::LEGACY_BLOCK, crate::panel::LEGACY_ACT,
        k_panel8_legacy => panel8_legacy, k_panel4_legacy => panel4_legacy;
    "stored Q8_0", 32: legacy_panel[STORED_Q8_0], crate::panel::STORED_Q8_0_BLOCK, crate::panel::LEGACY_ACT,
        k_panel8_stored_q8_0 => panel8_stored_q8_0, k_panel4_stored_q8_0 => panel4_stored_q8_0;
    "stored Q5_0", 32: legacy_panel[STORED_Q5_0], crate::panel::STORED_Q5_0_BLOCK, crate::panel::LEGACY_ACT,
        k_panel8_stored_q5_0 => panel8_stored_q5_0, k_panel4_stored_q5_0 => panel4_stored_q5_0;
    "Q4_K", 256: q4_k_panel[false], crate::panel::Q4_K_BLOCK, crate::panel::Q4_K_ACT,
        k_panel8_q4_k => panel8_q4_k, k_panel4_q4_k => panel4_q4_k;
    "stored Q4_K", 256: q4_k_panel[true], crate::panel::STORED_Q4_K_BLOCK, crate::panel::Q4_K_ACT,
        k_panel8_stored_q4_k => panel8_stored_q4_k, k_panel4_stored_q4_k => panel4_stored_q4_k;
    "Q6_K", 256: q6_k_panel[false], crate::panel::Q6_K_BLOCK, crate::panel::Q6_K_ACT,
        k_panel8_q6_k => panel8_q6_k, k_panel4_q6_k => panel4_q6_k;
    "stored Q6_K", 256: q6_k_panel[true], crate::panel::STORED_Q6_K_BLOCK, crate::panel::Q6_K_ACT,
        k_panel8_stored_q6_k => panel8_stored_q6_k, k_panel4_stored_q6_k => panel4_stored_q6_k;
}

// ----------------------------------------------------------- panel unpacking

/// Sixteen vectors of sixteen dwords (rows) → sixteen vectors of the rows'
/// dword `d` each: 4×4 transposes inside each 128-bit lane, then a 4×4
/// transpose of the lanes.
#[inline(always)]
unsafe fn transpose16(v: [__m512i; 16]) -> [__m512i; 16] {
    // SAFETY: AVX-512F is enabled in every caller.
    unsafe {
        // x[g][c], lane L: dword 4L + c of rows 4g..4g+4.
        let mut x = [[_mm512_setzero_si512(); 4]; 4];
        for (g, x) in x.iter_mut().enumerate() {
            let (a, b, c, d) = (v[4 * g], v[4 * g + 1], v[4 * g + 2], v[4 * g + 3]);
            let (ab_lo, ab_hi) = (_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
            let (cd_lo, cd_hi) = (_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
            x[0] = _mm512_unpacklo_epi64(ab_lo, cd_lo);
            x[1] = _mm512_unpackhi_epi64(ab_lo, cd_lo);
            x[2] = _mm512_unpacklo_epi64(ab_hi, cd_hi);
            x[3] = _mm512_unpackhi_epi64(ab_hi, cd_hi);
        }
        let mut o = [_mm512_setzero_si512(); 16];
        for c in 0..4 {
            let y0 = _mm512_shuffle_i32x4::<0b01_00_01_00>(x[0][c], x[1][c]);
            let y1 = _mm512_shuffle_i32x4::<0b11_10_11_10>(x[0][c], x[1][c]);
            let y2 = _mm512_shuffle_i32x4::<0b01_00_01_00>(x[2][c], x[3][c]);
            let y3 = _mm512_shuffle_i32x4::<0b11_10_11_10>(x[2][c], x[3][c]);
            o[c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(y0, y2);
            o[4 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(y0, y2);
            o[8 + c] = _mm512_shuffle_i32x4::<0b10_00_10_00>(y1, y3);
            o[12 + c] = _mm512_shuffle_i32x4::<0b11_01_11_01>(y1, y3);
        }
        o
    }
}

#[inline(always)]
unsafe fn store512(p: *mut u8, v: __m512i) {
    // SAFETY: the caller passes 64 writable bytes; unaligned store.
    unsafe { _mm512_storeu_si512(p.cast(), v) }
}

/// The quants of block `i` of sixteen Q4_K rows (`rb` bytes apart from
/// `rows`) into panel block `dst`: each row's 128 bytes as two vectors of
/// low and high nibbles, transposed sixteen rows at a time.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_unpack_q4_k(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: sixteen rows of at least `i + 1` blocks and a whole panel
    // block at `dst` (the wrapper's checks); features as enabled above.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        for half in 0..2 {
            let (mut lo, mut hi) = ([_mm512_setzero_si512(); 16], [_mm512_setzero_si512(); 16]);
            for r in 0..16 {
                let q = load512(rows.add(r * rb + i * 144 + 16 + 64 * half));
                lo[r] = _mm512_and_si512(q, m4);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4);
            }
            let (lo, hi) = (transpose16(lo), transpose16(hi));
            // Dword d of the vector: bytes 32j.. of the half's chunk j = d / 8,
            // low nibbles sub-block 2(2·half + j), high ones the next.
            for d in 0..16 {
                let (s, k) = (4 * half + 2 * (d / 8), d % 8);
                store512(dst.add(512 * s + 64 * k), lo[d]);
                store512(dst.add(512 * (s + 1) + 64 * k), hi[d]);
            }
        }
    }
}

/// The quants of block `i` of sixteen Q6_K rows as `q − 32` into panel
/// block `dst`, and the rows' `Σ_s scale_s · (−128 · Σ(q − 32))` from the
/// scales already there (decoded as the AVX-512 row kernel does, then
/// transposed sixteen rows at a time).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_unpack_q6_k(rows: *const u8, rb: usize, i: usize, dst: *mut u8) {
    // SAFETY: as for `k_unpack_q4_k`, with Q6_K rows and panel block.
    unsafe {
        let (m4, m2, b32) = (
            _mm512_set1_epi8(0x0F),
            _mm512_set1_epi8(0x30),
            _mm512_set1_epi8(32),
        );
        let ones = _mm512_set1_epi8(1);
        let mut offset = _mm512_setzero_si512();
        for h in 0..2 {
            let (mut lo, mut hi) = ([_mm512_setzero_si512(); 16], [_mm512_setzero_si512(); 16]);
            for r in 0..16 {
                let x = rows.add(r * rb + i * 210);
                let ql = load512(x.add(64 * h));
                let qh = load256(x.add(128 + 32 * h));
                let qh_a = cat(_mm256_slli_epi16::<4>(qh), _mm256_slli_epi16::<2>(qh));
                let qh_b = cat(qh, _mm256_srli_epi16::<2>(qh));
                let l = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(qh_a, m2));
                let u = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                    _mm512_and_si512(qh_b, m2),
                );
                lo[r] = _mm512_sub_epi8(l, b32);
                hi[r] = _mm512_sub_epi8(u, b32);
            }
            // Vector x of half h: values 128h + 64x + 4d.. in dword d, i.e.
            // sub-block 8h + 4x + d / 4, dword d % 4.
            for (x, v) in [transpose16(lo), transpose16(hi)].into_iter().enumerate() {
                for s4 in 0..4 {
                    let s = 8 * h + 4 * x + s4;
                    let mut sum = _mm512_setzero_si512();
                    for k in 0..4 {
                        store512(dst.add(256 * s + 64 * k), v[4 * s4 + k]);
                        sum = _mm512_dpbusd_epi32(sum, ones, v[4 * s4 + k]);
                    }
                    let scale = load512(dst.add(4096 + 64 * s));
                    offset = _mm512_add_epi32(offset, _mm512_mullo_epi32(scale, sum));
                }
            }
        }
        // × −128.
        store512(
            dst.add(5120),
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(offset)),
        );
    }
}

macro_rules! panel_unpackers {
    ($($ty:ident, $size:expr, $block:ident, $meta:ident, $k:ident => $f:ident;)*) => {$(
        pub(crate) fn $f(cols: usize, rows: &[u8], out: &mut [u8]) {
            use crate::panel::{$block, PANEL_ROWS};
            let (nb, given) = crate::panel::panel_shape(GgmlType::$ty, cols, rows, out, $block);
            if given < PANEL_ROWS {
                return crate::panel::$f(cols, rows, out);
            }
            let rb = nb * $size;
            for (i, dst) in out.chunks_exact_mut($block).enumerate() {
                let dst: &mut [u8; $block] = dst.try_into().unwrap();
                for r in 0..PANEL_ROWS {
                    let b = &rows[r * rb + i * $size..][..$size];
                    crate::panel::$meta(r, b.try_into().unwrap(), dst);
                }
                // SAFETY: sixteen whole rows of `nb > i` blocks and a whole panel block
                // (checked above); reachable only through the AVX512 table, handed out
                // after AVX-512 F/BW/VL + VNNI were detected.
                unsafe { $k(rows.as_ptr(), rb, i, dst.as_mut_ptr()) };
            }
        }
    )*};
}

panel_unpackers! {
    Q4_K, 144, Q4_K_BLOCK, q4_k_meta, k_unpack_q4_k => unpack_q4_k;
    Q6_K, 210, Q6_K_BLOCK, q6_k_meta, k_unpack_q6_k => unpack_q6_k;
}

/// The quants of sixteen legacy rows (`rb` bytes apart, `nb` blocks of
/// `wsize` bytes each) into their panel (`out`), two blocks per vector:
/// each row's pair of blocks decoded unsigned by `quants` (the panel's
/// `w + 2^shift`), then transposed sixteen rows at a time.
#[inline(always)]
unsafe fn unpack_legacy_quants(
    rows: *const u8,
    rb: usize,
    wsize: usize,
    nb: usize,
    quants: unsafe fn(*const u8) -> __m256i,
    out: *mut u8,
) {
    use crate::panel::LEGACY_BLOCK;
    // SAFETY: sixteen rows of `nb` blocks and `nb` panel blocks (the
    // wrapper's checks); AVX-512 F/BW/VL and AVX2 are enabled in the callers.
    unsafe {
        let mut i = 0;
        while i < nb {
            let pair = i + 1 < nb;
            let mut v = [_mm512_setzero_si512(); 16];
            for (r, v) in v.iter_mut().enumerate() {
                let x = rows.add(r * rb + i * wsize);
                let next = if pair {
                    quants(x.add(wsize))
                } else {
                    _mm256_setzero_si256()
                };
                *v = cat(quants(x), next);
            }
            let o = transpose16(v);
            for d in 0..8 {
                store512(out.add(i * LEGACY_BLOCK + 64 * d), o[d]);
                if pair {
                    store512(out.add((i + 1) * LEGACY_BLOCK + 64 * d), o[8 + d]);
                }
            }
            i += 2;
        }
    }
}

macro_rules! legacy_unpackers {
    ($($ty:ident, $size:expr, $quants:ident, $k:ident => $f:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn $k(rows: *const u8, rb: usize, nb: usize, out: *mut u8) {
            // SAFETY: forwarded from the wrapper's checks.
            unsafe { unpack_legacy_quants(rows, rb, $size, nb, $quants, out) }
        }
        /// [`crate::panel`]'s unpacker of this type for whole panels with AVX-512
        /// (partial ones take the reference).
        pub(crate) fn $f(cols: usize, rows: &[u8], out: &mut [u8]) {
            use crate::panel::{LEGACY_BLOCK, PANEL_ROWS};
            let (nb, given) = crate::panel::panel_shape(GgmlType::$ty, cols, rows, out, LEGACY_BLOCK);
            if given < PANEL_ROWS {
                return crate::panel::$f(cols, rows, out);
            }
            let rb = nb * $size;
            // SAFETY: sixteen whole rows of `nb` blocks and `nb` panel blocks (checked
            // above); reachable only through the AVX512 table, handed out after
            // AVX-512 F/BW/VL + VNNI were detected.
            unsafe { $k(rows.as_ptr(), rb, nb, out.as_mut_ptr()) };
            for (i, dst) in out.chunks_exact_mut(LEGACY_BLOCK).enumerate() {
                for r in 0..PANEL_ROWS {
                    let b = &rows[r * rb + i * $size..][..2];
                    let d = crate::scalar::f16f(half::f16::from_le_bytes([b[0], b[1]]));
                    dst[512 + 4 * r..516 + 4 * r].copy_from_slice(&d.to_le_bytes());
                }
            }
        }
    )*};
}

legacy_unpackers! {
    Q8_0, 34, q8_0_unsigned, k_unpack_q8_0 => unpack_q8_0;
    Q4_0, 18, q4_0_unsigned, k_unpack_q4_0 => unpack_q4_0;
    Q5_0, 22, q5_0_unsigned, k_unpack_q5_0 => unpack_q5_0;
}

// ------------------------------------------------------------ attention

use crate::attention::{KEY_BLOCK, MAX_HEAD_DIM};
use std::mem::MaybeUninit;

/// 16 f32 at `p`.
#[inline(always)]
unsafe fn load16_f32(p: *const u8) -> __m512 {
    // SAFETY: the caller passes 64 readable bytes; AVX-512F is enabled.
    unsafe { _mm512_loadu_ps(p.cast()) }
}

/// 16 f16 at `p`, widened (exactly) to f32.
#[inline(always)]
unsafe fn load16_f16(p: *const u8) -> __m512 {
    // SAFETY: the caller passes 32 readable bytes; AVX-512F is enabled.
    unsafe {
        if cfg!(miri) {
            let f: [f32; 16] = std::array::from_fn(|i| fp16(p.add(2 * i)));
            return _mm512_loadu_ps(f.as_ptr());
        }
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
}

/// How [`attend16`] reads key rows (8 values, as AVX2's kernel does) and
/// value rows (16 values), for f32 or f16 rows.
#[derive(Clone, Copy)]
struct RowLoads {
    key8: unsafe fn(*const u8) -> __m256,
    value16: unsafe fn(*const u8) -> __m512,
}

const LOADS_F32: RowLoads = RowLoads {
    key8: super::avx2::load8_f32,
    value16: load16_f32,
};
const LOADS_F16: RowLoads = RowLoads {
    key8: super::avx2::load8_f16,
    value16: load16_f16,
};

/// `a` in the low half of a vector, `b` in the high half.
#[inline(always)]
unsafe fn halves(a: __m256, b: __m256) -> __m512 {
    // SAFETY: AVX-512F is enabled in every kernel calling this.
    unsafe {
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castps_pd(_mm512_castps256_ps512(a)),
            _mm256_castps_pd(b),
        ))
    }
}

/// Scores of keys `j..j + 2P` (`2P` a multiple of 4) for `R` heads into
/// `s[r][j..]`: two keys per vector (one per 256-bit half), so each key's FMA
/// chain over 8-value chunks, and its `hadd` tree, are AVX2's.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn score_pairs<const R: usize, const P: usize, const ESIZE: usize>(
    qd: &[[MaybeUninit<__m512>; MAX_HEAD_DIM / 8]; R],
    hd: usize,
    key: impl Fn(usize) -> *const u8,
    j: usize,
    scale: f32,
    key8: unsafe fn(*const u8) -> __m256,
    s: &mut [[f32; KEY_BLOCK]; R],
) {
    // SAFETY: the caller passes keys `j..j + 2P` of the block, each with `hd` values,
    // `j + 2P ≤ KEY_BLOCK`, and `qd[r][..hd / 8]` written; AVX-512 F/VL, AVX2 and FMA
    // are enabled.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        for c in 0..hd / 8 {
            for pr in 0..P {
                let kv = halves(
                    key8(key(j + 2 * pr).add(8 * c * ESIZE)),
                    key8(key(j + 2 * pr + 1).add(8 * c * ESIZE)),
                );
                for r in 0..R {
                    acc[r][pr] = _mm512_fmadd_ps(qd[r][c].assume_init(), kv, acc[r][pr]);
                }
            }
        }
        for r in 0..R {
            for g in 0..P / 2 {
                let (a, b) = (acc[r][2 * g], acc[r][2 * g + 1]);
                let hi =
                    |v: __m512| _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
                let four = [
                    _mm512_castps512_ps256(a),
                    hi(a),
                    _mm512_castps512_ps256(b),
                    hi(b),
                ];
                let sv = _mm_mul_ps(super::avx2::hsum4_ps(four), _mm_set1_ps(scale));
                _mm_storeu_ps(s[r].as_mut_ptr().add(j + 4 * g), sv);
            }
        }
    }
}

/// AVX2's attention kernel (`avx2::attend`) with 512-bit vectors and the
/// same bits, for heads of a multiple of 16 values: `R` query heads sharing
/// one kv head against key rows `start..end` (row `j`'s head at `k + j·row`),
/// into `out[r]`. Scores take two keys per vector, eight keys per pass
/// (sixteen for a lone head, to keep eight FMA chains in flight), each key's
/// FMA chain and addition tree AVX2's, and the keys past the last whole eight
/// AVX2's single-key path; the block's softmax is AVX2's; the value rows are
/// accumulated into up to four 16-value chunks of every head at a time, each
/// value in key order as AVX2 does. So every head gets AVX2's bits, alone or
/// with others, from f32 or f16 rows. Twice AVX2's lanes per FMA: a Zen 5
/// part spent 24-30 % of pp512 in AVX2's kernel.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
unsafe fn attend16<const R: usize, const ESIZE: usize>(
    rows: KeyRows,
    q: [*const f32; R],
    out: [*mut f32; R],
    loads: RowLoads,
) {
    use super::avx2::{normalize, score_one, softmax_block};
    let KeyRows {
        hd,
        k,
        v,
        row,
        start,
        end,
        scale,
        softcap,
    } = rows;
    // SAFETY: the wrapper checked `hd` values (a multiple of 16, at most
    // MAX_HEAD_DIM) at each `q[r]` and `out[r]` and that every key and value row of
    // the range holds `hd` elements; AVX-512 F/VL, AVX2, FMA and F16C are enabled.
    unsafe {
        let chunks = hd / 16;
        for o in out {
            for c in 0..chunks {
                _mm512_storeu_ps(o.add(16 * c), _mm512_setzero_ps());
            }
        }
        // Each head's 8-value chunks, each in both halves of a vector; only
        // the first `hd / 8` are written and read (zeroing all of them cost
        // every call, decoding's single queries too, 4 KiB per head).
        let mut qd = [[MaybeUninit::<__m512>::uninit(); MAX_HEAD_DIM / 8]; R];
        for r in 0..R {
            for c in 0..hd / 8 {
                let x = _mm256_loadu_ps(q[r].add(8 * c));
                qd[r][c].write(halves(x, x));
            }
        }
        let (mut max, mut sum) = ([f32::NEG_INFINITY; R], [0.0f32; R]);
        let mut s = [[f32::NEG_INFINITY; KEY_BLOCK]; R];
        let mut p = [[0.0f32; KEY_BLOCK]; R];
        let mut j0 = start;
        while j0 < end {
            let n = (end - j0).min(KEY_BLOCK);
            let key = |j: usize| k.add((j0 + j) * row);
            let mut j = 0;
            while j + 8 <= n {
                if R == 1 && j + 16 <= n {
                    score_pairs::<R, 8, ESIZE>(&qd, hd, key, j, scale, loads.key8, &mut s);
                    j += 16;
                } else {
                    score_pairs::<R, 4, ESIZE>(&qd, hd, key, j, scale, loads.key8, &mut s);
                    j += 8;
                }
            }
            while j < n {
                score_one::<R, ESIZE>(q, hd, key(j), scale, loads.key8, &mut s, j);
                j += 1;
            }
            softmax_block(&mut s, n, softcap, &mut max, &mut sum, &mut p, out, hd);
            // Values: up to four 16-value chunks of all R outputs in registers
            // while the block's value rows stream past.
            let mut c = 0;
            while c < chunks {
                let w = (chunks - c).min(4);
                let mut acc = [[_mm512_setzero_ps(); 4]; R];
                for r in 0..R {
                    for i in 0..w {
                        acc[r][i] = _mm512_loadu_ps(out[r].add(16 * (c + i)));
                    }
                }
                for jj in 0..n {
                    let vrow = v.add((j0 + jj) * row + 16 * c * ESIZE);
                    let vv: [__m512; 4] = std::array::from_fn(|i| {
                        if i < w {
                            (loads.value16)(vrow.add(16 * i * ESIZE))
                        } else {
                            _mm512_setzero_ps()
                        }
                    });
                    for r in 0..R {
                        let pj = _mm512_set1_ps(p[r][jj]);
                        for i in 0..w {
                            acc[r][i] = _mm512_fmadd_ps(pj, vv[i], acc[r][i]);
                        }
                    }
                }
                for r in 0..R {
                    for i in 0..w {
                        _mm512_storeu_ps(out[r].add(16 * (c + i)), acc[r][i]);
                    }
                }
                c += w;
            }
            j0 += n;
        }
        normalize(&sum, out, hd);
    }
}

attend_fns! {
    "avx2,fma,f16c,avx512f,avx512vl", attend16;
    ATTEND16_F32: 4, LOADS_F32 => z_attend1_f32: 1, z_attend2_f32: 2, z_attend3_f32: 3, z_attend4_f32: 4;
    ATTEND16_F16: 2, LOADS_F16 => z_attend1_f16: 1, z_attend2_f16: 2, z_attend3_f16: 3, z_attend4_f16: 4;
}

/// [`crate::attention::AttendFn`] in 512-bit vectors (head dimension a
/// multiple of 16); reachable only after AVX-512 F/VL detection.
pub(crate) fn attend_row(args: crate::attention::RowArgs<'_>, out: &mut [f32]) {
    assert!(
        args.head_dim.is_multiple_of(16),
        "heads of {} values",
        args.head_dim
    );
    super::avx2::attend_row_with([ATTEND16_F32, ATTEND16_F16], args, out)
}

// ------------------------------------------------------------ activations

/// [`crate::ops::exp_fast`] in 16 lanes, with AVX2's `exp_ps` bits per
/// lane (NaN included: clamped to −87 as `max_ps` does). Float compares,
/// `min`/`max` and conversions are done on the bits with integer ops, which
/// Miri implements: a float's bits order like its value among the
/// positives as signed integers, among the negatives reversed as unsigned.
#[inline(always)]
unsafe fn exp_ps16(x: __m512) -> __m512 {
    // SAFETY: AVX-512 F is enabled in every kernel calling this.
    unsafe {
        let bits = _mm512_castps_si512(x);
        let abs = _mm512_and_si512(bits, _mm512_set1_epi32(i32::MAX));
        let nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F80_0000));
        let lowest = (-87.0f32).to_bits() as i32;
        let below = _mm512_cmpgt_epu32_mask(bits, _mm512_set1_epi32(lowest)) & !nan;
        let above =
            _mm512_cmpgt_epi32_mask(bits, _mm512_set1_epi32(88.0f32.to_bits() as i32)) & !nan;
        let x = _mm512_mask_mov_ps(x, below | nan, _mm512_set1_ps(-87.0));
        let x = _mm512_mask_mov_ps(x, above, _mm512_set1_ps(88.0));
        let magic = _mm512_set1_ps(12_582_912.0);
        let shifted = _mm512_add_ps(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
            magic,
        );
        let n = _mm512_sub_ps(shifted, magic);
        let r = _mm512_sub_ps(
            _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693_359_4))),
            _mm512_mul_ps(n, _mm512_set1_ps(-2.121_944_4e-4)),
        );
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(c));
        }
        let e = _mm512_add_ps(
            _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
            _mm512_set1_ps(1.0),
        );
        // `n` as an integer: `shifted` is 1.5·2^23 + n, whose bits step by one
        // per unit within its binade (|n| ≤ 127 after the clamp).
        let n = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(magic));
        let pow2 = _mm512_slli_epi32::<23>(_mm512_add_epi32(n, _mm512_set1_epi32(127)));
        _mm512_maskz_mov_ps(!below, _mm512_mul_ps(e, _mm512_castsi512_ps(pow2)))
    }
}

/// [`crate::ops::gelu_mul`] in 16 lanes: AVX2's `k_gelu_mul` operation for
/// operation, so the same bits, in half the instructions (see [`k_silu_mul`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_gelu_mul(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX-512 F is enabled.
    unsafe {
        let (c, a) = (_mm512_set1_ps(0.797_884_6), _mm512_set1_ps(0.044_715));
        let (one, m2) = (_mm512_set1_ps(1.0), _mm512_set1_ps(-2.0));
        for i in (0..n / 16).map(|i| 16 * i) {
            let u = _mm512_loadu_ps(gate.add(i));
            let z = _mm512_mul_ps(
                _mm512_mul_ps(c, u),
                _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(a, u), u)),
            );
            let g = _mm512_div_ps(u, _mm512_add_ps(one, exp_ps16(_mm512_mul_ps(m2, z))));
            _mm512_storeu_ps(gate.add(i), _mm512_mul_ps(g, _mm512_loadu_ps(up.add(i))));
        }
    }
}

/// [`crate::ops::silu_mul`] in 16 lanes, the same bits as AVX2's: 1536
/// values hot 1.27 → 0.77 µs on the Zen 4 host (a decoded token's serial
/// SiLU·mul, one per layer, is bound by the division and the `exp` chain).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn k_silu_mul(n: usize, gate: *mut f32, up: *const f32) {
    // SAFETY: the wrapper checked `n` values in both slices; AVX-512 F is enabled.
    unsafe {
        let one = _mm512_set1_ps(1.0);
        let sign = _mm512_set1_epi32(i32::MIN);
        for i in (0..n / 16).map(|i| 16 * i) {
            let g = _mm512_loadu_ps(gate.add(i));
            let minus_g = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
            let s = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps16(minus_g)));
            _mm512_storeu_ps(gate.add(i), _mm512_mul_ps(s, _mm512_loadu_ps(up.add(i))));
        }
    }
}

/// The SIMD part of a gated activation: 16 lanes, then AVX2's 8 for a
/// remaining half vector; the caller finishes the tail with the scalar
/// code. Returns the count done. Reachable only after AVX-512 detection.
pub(crate) fn gelu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; AVX-512 was detected.
    unsafe { k_gelu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    let done = gate.len() / 16 * 16;
    done + super::avx2::gelu_mul(&mut gate[done..], &up[done..])
}

/// As [`gelu_mul`], for SiLU.
pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) -> usize {
    assert_eq!(gate.len(), up.len());
    // SAFETY: both slices hold `gate.len()` values; AVX-512 was detected.
    unsafe { k_silu_mul(gate.len(), gate.as_mut_ptr(), up.as_ptr()) };
    let done = gate.len() / 16 * 16;
    done + super::avx2::silu_mul(&mut gate[done..], &up[done..])
}
