//! f32 and f16 row dot products; f32's eight-row kernel and 4×3 tile.
//!
//! Every f32 path sums an output in one four-lane FMA chain (lane `l` adds
//! `w[k]·a[k]` for `k ≡ l (mod 4)`, in order), reduces it with `vaddvq_f32`,
//! then adds the last `n mod 4` products one by one: the tile and the
//! eight-row kernel so give each output the row kernel's bits.

use super::*;

/// 4 f16 → 4 f32 (`fcvtl`, base ARMv8 Advanced SIMD; the intrinsic needs the unstable `f16`).
#[inline(always)]
unsafe fn cvt4(p: *const u8) -> float32x4_t {
    // SAFETY: the caller passes 8 readable bytes; `fcvtl` is register-only.
    unsafe {
        let h = vld1_u16(p.cast());
        let out: float32x4_t;
        asm!("fcvtl {o:v}.4s, {i:v}.4h", o = lateout(vreg) out, i = in(vreg) h,
            options(pure, nomem, nostack));
        out
    }
}

#[inline(always)]
unsafe fn ld4_f32(p: *const u8) -> float32x4_t {
    // SAFETY: the caller passes 16 readable bytes.
    unsafe { vld1q_f32(p.cast()) }
}

/// f16 rows, in four chains.
#[inline(always)]
unsafe fn f16_body(n: usize, x: *const u8, y: *const u8) -> f32 {
    // SAFETY: both rows hold `n` f16 values (checked by the wrapper).
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                let o = (i + 4 * k) * 2;
                *a = vfmaq_f32(*a, cvt4(x.add(o)), cvt4(y.add(o)));
            }
            i += 16;
        }
        let mut sum = vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        ));
        while i < n {
            sum += fp16(x.add(2 * i)) * fp16(y.add(2 * i));
            i += 1;
        }
        sum
    }
}

target_fns! { neon:
    unsafe fn k_f16(n: usize, x: *const u8, y: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { f16_body(n, x, y) }
    }
}

/// Weight rows of the tile.
const R: usize = 4;
/// Tokens of the tile: its twelve sums and the vectors feeding them leave
/// registers to spare.
const T: usize = 3;

/// The tile, as the table holds it.
pub(crate) const F32_TILE: crate::dispatch::F32Tile = crate::dispatch::F32Tile {
    tile: f32_tile,
    rows: R,
    tokens: T,
};

/// The products past the last whole four, added one by one to `sum`.
#[inline(always)]
unsafe fn f32_tail(n: usize, w: *const u8, a: *const u8, mut sum: f32) -> f32 {
    for i in n / 4 * 4..n {
        // SAFETY: both rows hold `n` values.
        sum += unsafe { f32_at(w.add(4 * i)) * f32_at(a.add(4 * i)) };
    }
    sum
}

#[inline(always)]
unsafe fn f32_row_body(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: both rows hold `n` values (the wrapper's checks).
    unsafe {
        let mut acc = vdupq_n_f32(0.0);
        for i in (0..n / 4 * 4).step_by(4) {
            acc = vfmaq_f32(acc, ld4_f32(w.add(4 * i)), ld4_f32(a.add(4 * i)));
        }
        f32_tail(n, w, a, vaddvq_f32(acc))
    }
}

target_fns! { neon:
    unsafe fn k_f32_row(n: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { f32_row_body(n, w, a) }
    }
}

#[inline(always)]
unsafe fn f32_rows8_body(n: usize, w: *const u8, a: *const u8) -> [f32; 8] {
    // SAFETY: eight rows of `n` values back to back at `w`, `n` at `a`.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 8];
        for i in (0..n / 4 * 4).step_by(4) {
            let x = ld4_f32(a.add(4 * i));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(*acc, ld4_f32(w.add(4 * (r * n + i))), x);
            }
        }
        std::array::from_fn(|r| f32_tail(n, w.add(4 * r * n), a, vaddvq_f32(acc[r])))
    }
}

target_fns! { neon:
    unsafe fn k_f32_rows8(n: usize, w: *const u8, a: *const u8) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { f32_rows8_body(n, w, a) }
    }
}

#[inline(always)]
unsafe fn f32_tile_body(n: usize, w: *const u8, a: *const u8) -> [f32; R * T] {
    // SAFETY: `R` rows of `n` values back to back at `w`, `T` at `a`.
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); T]; R];
        for i in (0..n / 4 * 4).step_by(4) {
            let x: [float32x4_t; T] = std::array::from_fn(|t| ld4_f32(a.add(4 * (t * n + i))));
            for (r, acc) in acc.iter_mut().enumerate() {
                let wv = ld4_f32(w.add(4 * (r * n + i)));
                for (acc, &x) in acc.iter_mut().zip(&x) {
                    *acc = vfmaq_f32(*acc, wv, x);
                }
            }
        }
        std::array::from_fn(|o| {
            let (t, r) = (o / R, o % R);
            f32_tail(n, w.add(4 * r * n), a.add(4 * t * n), vaddvq_f32(acc[r][t]))
        })
    }
}

target_fns! { neon:
    unsafe fn k_f32_tile(n: usize, w: *const u8, a: *const u8) -> [f32; R * T] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { f32_tile_body(n, w, a) }
    }
}

/// Checks that `bytes` holds `rows` rows of `n` f32.
fn f32_rows(n: usize, rows: usize, bytes: &[u8], what: &str) {
    assert_eq!(bytes.len(), rows * n * 4, "{what}: {rows} rows of {n} f32");
}

pub(crate) fn vec_dot_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    f32_rows(n, 1, w, "weights");
    f32_rows(n, 1, a, "activations");
    // SAFETY: one row of `n` values each (checked above); reachable only after NEON
    // detection.
    unsafe { k_f32_row(n, w.as_ptr(), a.as_ptr()) }
}

pub(crate) fn vec_dot_rows8_f32(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    f32_rows(n, 8, w, "weights");
    f32_rows(n, 1, a, "activations");
    // SAFETY: eight weight rows and one activation row of `n` values (checked above);
    // reachable only after NEON detection.
    unsafe { k_f32_rows8(n, w.as_ptr(), a.as_ptr()) }
}

/// `out[t · R + r]` is weight row `r`'s dot product with token `t`.
/// `ahead` goes unused, as in every aarch64 kernel: only x86-64 kernels
/// hint their streams ([`crate::prefetch::stream_ahead`]).
fn f32_tile(n: usize, w: &[u8], a: &[u8], out: &mut [f32], _ahead: usize) {
    f32_rows(n, R, w, "weights");
    f32_rows(n, T, a, "activations");
    // SAFETY: `R` weight rows and `T` activation rows of `n` values (checked above);
    // reachable only after NEON detection.
    out.copy_from_slice(&unsafe { k_f32_tile(n, w.as_ptr(), a.as_ptr()) });
}
pub(crate) fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    row_blocks(GgmlType::F16, n, w);
    row_blocks(GgmlType::F16, n, a);
    // SAFETY: both rows hold `n` values (checked above); reachable only after NEON detection.
    unsafe { k_f16(n, w.as_ptr(), a.as_ptr()) }
}
