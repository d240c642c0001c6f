//! Float rows (f32, and f16 and bf16 widened exactly): the row and
//! eight-row kernels, f32's 4×3 tile, and the widening that lets f16 and
//! bf16 batches take that tile.
//!
//! Every path sums an output in one four-lane FMA chain (lane `l` adds
//! `w[k]·a[k]` for `k ≡ l (mod 4)`, in order), reduces it with `vaddvq_f32`,
//! then adds the last `n mod 4` products one by one: the tile and the
//! eight-row kernel so give each output the row kernel's bits, and an f16 or
//! bf16 row kernel those of the f32 one over the widened rows.

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

/// How a float row's elements load: four at a time as f32 lanes, or one.
trait FloatElem {
    /// Bytes per element.
    const SIZE: usize;
    /// Four elements at `p` as f32 lanes.
    unsafe fn load4(p: *const u8) -> float32x4_t;
    /// The element at `p` as f32.
    unsafe fn one(p: *const u8) -> f32;
}

struct F32;
struct F16;
struct Bf16;

impl FloatElem for F32 {
    const SIZE: usize = 4;
    #[inline(always)]
    unsafe fn load4(p: *const u8) -> float32x4_t {
        // SAFETY: forwarded (16 readable bytes).
        unsafe { ld4_f32(p) }
    }
    #[inline(always)]
    unsafe fn one(p: *const u8) -> f32 {
        // SAFETY: forwarded (four readable bytes).
        unsafe { f32_at(p) }
    }
}

impl FloatElem for F16 {
    const SIZE: usize = 2;
    #[inline(always)]
    unsafe fn load4(p: *const u8) -> float32x4_t {
        // SAFETY: forwarded (eight readable bytes).
        unsafe { cvt4(p) }
    }
    #[inline(always)]
    unsafe fn one(p: *const u8) -> f32 {
        // SAFETY: forwarded (two readable bytes).
        unsafe { fp16(p) }
    }
}

impl FloatElem for Bf16 {
    const SIZE: usize = 2;
    #[inline(always)]
    unsafe fn load4(p: *const u8) -> float32x4_t {
        // SAFETY: the caller passes eight readable bytes; a bf16 is an f32's high half.
        unsafe { vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p.cast()))) }
    }
    #[inline(always)]
    unsafe fn one(p: *const u8) -> f32 {
        // SAFETY: the caller passes two readable bytes.
        f32::from_bits(u32::from(unsafe { p.cast::<u16>().read_unaligned() }) << 16)
    }
}

/// The products past the last whole four, added one by one to `sum`.
#[inline(always)]
unsafe fn tail<E: FloatElem>(n: usize, w: *const u8, a: *const u8, mut sum: f32) -> f32 {
    for i in n / 4 * 4..n {
        // SAFETY: both rows hold `n` elements.
        sum += unsafe { E::one(w.add(E::SIZE * i)) * E::one(a.add(E::SIZE * i)) };
    }
    sum
}

/// f32's tail.
#[inline(always)]
unsafe fn f32_tail(n: usize, w: *const u8, a: *const u8, sum: f32) -> f32 {
    // SAFETY: forwarded.
    unsafe { tail::<F32>(n, w, a, sum) }
}

#[inline(always)]
unsafe fn row_body<E: FloatElem>(n: usize, w: *const u8, a: *const u8) -> f32 {
    // SAFETY: both rows hold `n` elements (the wrapper's checks).
    unsafe {
        let mut acc = vdupq_n_f32(0.0);
        for i in (0..n / 4 * 4).step_by(4) {
            let o = E::SIZE * i;
            acc = vfmaq_f32(acc, E::load4(w.add(o)), E::load4(a.add(o)));
        }
        tail::<E>(n, w, a, vaddvq_f32(acc))
    }
}

#[inline(always)]
unsafe fn rows8_body<E: FloatElem>(n: usize, w: *const u8, a: *const u8) -> [f32; 8] {
    // SAFETY: eight rows of `n` elements back to back at `w`, `n` at `a`.
    unsafe {
        let row = |r: usize| w.add(E::SIZE * r * n);
        let mut acc = [vdupq_n_f32(0.0); 8];
        for i in (0..n / 4 * 4).step_by(4) {
            let x = E::load4(a.add(E::SIZE * i));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(*acc, E::load4(row(r).add(E::SIZE * i)), x);
            }
        }
        std::array::from_fn(|r| tail::<E>(n, row(r), a, vaddvq_f32(acc[r])))
    }
}

/// `n` elements at `src` widened into `dst`.
#[inline(always)]
unsafe fn widen_body<E: FloatElem>(n: usize, src: *const u8, dst: *mut f32) {
    // SAFETY: `n` elements at `src`, room for `n` f32 at `dst`.
    unsafe {
        for i in (0..n / 4 * 4).step_by(4) {
            vst1q_f32(dst.add(i), E::load4(src.add(E::SIZE * i)));
        }
        for i in n / 4 * 4..n {
            *dst.add(i) = E::one(src.add(E::SIZE * i));
        }
    }
}

target_fns! { neon:
    unsafe fn k_f32_row(n: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { row_body::<F32>(n, w, a) }
    }
    unsafe fn k_f16_row(n: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { row_body::<F16>(n, w, a) }
    }
    unsafe fn k_bf16_row(n: usize, w: *const u8, a: *const u8) -> f32 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { row_body::<Bf16>(n, w, a) }
    }
    unsafe fn k_f32_rows8(n: usize, w: *const u8, a: *const u8) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { rows8_body::<F32>(n, w, a) }
    }
    unsafe fn k_f16_rows8(n: usize, w: *const u8, a: *const u8) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { rows8_body::<F16>(n, w, a) }
    }
    unsafe fn k_bf16_rows8(n: usize, w: *const u8, a: *const u8) -> [f32; 8] {
        // SAFETY: forwarded from the caller's contract.
        unsafe { rows8_body::<Bf16>(n, w, a) }
    }
    unsafe fn k_widen_f16(n: usize, src: *const u8, dst: *mut f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { widen_body::<F16>(n, src, dst) }
    }
    unsafe fn k_widen_bf16(n: usize, src: *const u8, dst: *mut f32) {
        // SAFETY: forwarded from the caller's contract.
        unsafe { widen_body::<Bf16>(n, src, dst) }
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
/// `hint` goes unused, as in every aarch64 kernel: only x86-64 kernels
/// hint their streams ([`crate::prefetch::stream_ahead`]).
fn f32_tile(n: usize, w: &[u8], a: &[u8], out: &mut [f32], _hint: crate::dispatch::TileHint) {
    f32_rows(n, R, w, "weights");
    f32_rows(n, T, a, "activations");
    // SAFETY: `R` weight rows and `T` activation rows of `n` values (checked above);
    // reachable only after NEON detection.
    out.copy_from_slice(&unsafe { k_f32_tile(n, w.as_ptr(), a.as_ptr()) });
}
/// Checks that `bytes` holds `rows` rows of `n` two-byte elements.
fn half_rows(n: usize, rows: usize, bytes: &[u8], what: &str) {
    assert_eq!(
        bytes.len(),
        rows * n * 2,
        "{what}: {rows} rows of {n} halves"
    );
}

pub(crate) fn vec_dot_f16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    half_rows(n, 1, w, "weights");
    half_rows(n, 1, a, "activations");
    // SAFETY: one row of `n` halves each (checked above); reachable only after NEON
    // detection.
    unsafe { k_f16_row(n, w.as_ptr(), a.as_ptr()) }
}

pub(crate) fn vec_dot_bf16(n: usize, w: &[u8], a: &[u8]) -> f32 {
    half_rows(n, 1, w, "weights");
    half_rows(n, 1, a, "activations");
    // SAFETY: as in `vec_dot_f16`.
    unsafe { k_bf16_row(n, w.as_ptr(), a.as_ptr()) }
}

pub(crate) fn vec_dot_rows8_f16(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    half_rows(n, 8, w, "weights");
    half_rows(n, 1, a, "activations");
    // SAFETY: eight weight rows and one activation row of `n` halves (checked
    // above); reachable only after NEON detection.
    unsafe { k_f16_rows8(n, w.as_ptr(), a.as_ptr()) }
}

pub(crate) fn vec_dot_rows8_bf16(n: usize, w: &[u8], a: &[u8]) -> [f32; 8] {
    half_rows(n, 8, w, "weights");
    half_rows(n, 1, a, "activations");
    // SAFETY: as in `vec_dot_rows8_f16`.
    unsafe { k_bf16_rows8(n, w.as_ptr(), a.as_ptr()) }
}

/// F16 elements as f32, exactly.
pub(crate) fn widen_f16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "f16 elements and their f32");
    // SAFETY: `dst.len()` halves at `src` and as many f32 at `dst` (checked above);
    // reachable only after NEON detection.
    unsafe { k_widen_f16(dst.len(), src.as_ptr(), dst.as_mut_ptr()) }
}

/// BF16 elements as f32, exactly.
pub(crate) fn widen_bf16(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "bf16 elements and their f32");
    // SAFETY: as in `widen_f16`.
    unsafe { k_widen_bf16(dst.len(), src.as_ptr(), dst.as_mut_ptr()) }
}
