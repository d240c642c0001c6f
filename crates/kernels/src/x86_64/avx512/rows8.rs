//! AVX-512 VNNI eight-row kernels: eight weight rows against one activation
//! row, four rows' blocks per 512-bit `vpdpbusd`.

use super::*;

//
// Single tokens of the legacy types: eight weight rows against one Q8_0
// activation row, four rows' blocks per 512-bit vector (one row per 128-bit
// lane), unsigned quants through `vpdpbusd`: about a third of the AVX2
// eight-row kernel's uops per row and block, so single tokens stream from
// memory instead of being compute-bound. Q8_0's signed quants go in as
// `q + 128` (offset 2^7).

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
            let d = _mm256_mul_ps(scales8(x), _mm256_set1_ps(fp16(y)));
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
            let f = x.map(|p| fp16_soft(p));
            return _mm256_setr_ps(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
        }
        let h = x.map(|p| p.cast::<u16>().read_unaligned() as u64);
        let lo = h[0] | h[1] << 16 | h[2] << 32 | h[3] << 48;
        let hi = h[4] | h[5] << 16 | h[6] << 32 | h[7] << 48;
        _mm256_cvtph_ps(_mm_set_epi64x(hi as i64, lo as i64))
    }
}

kernel_fns! { rows8 avx512;
    Q4_0, Q8_0 => vec_dot_rows8_q4_0
        = |nb, w, stride, a| legacy_rows8_vnni(nb, w, stride, 18, a, 3, q4_0_lanes);
    Q5_0, Q8_0 => vec_dot_rows8_q5_0
        = |nb, w, stride, a| legacy_rows8_vnni(nb, w, stride, 22, a, 4, q5_0_lanes);
    Q8_0, Q8_0 => vec_dot_rows8_q8_0
        = |nb, w, stride, a| legacy_rows8_vnni(nb, w, stride, 34, a, 7, q8_0_lanes);
    Q4_K, Q8_K => vec_dot_rows8_q4_k = |nb, w, stride, a| q4_k_rows8(nb, w, stride, a);
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
