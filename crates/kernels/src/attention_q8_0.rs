//! Attention over a q8_0 KV cache, as llama.cpp's flash attention computes
//! it on the CPU: each query head is quantized once with the ISA's Q8_0
//! activation quantizer (ggml's `quantize_row_q8_0`), each score sums a key
//! block's integer products with it, scaled by both blocks' scales, and each
//! value block is added scaled by its weight and its scale. The block loops
//! are portable and written for the compiler to vectorize (integer sums are
//! exact, the float steps run in one order), so a row's result depends only
//! on its query, its rows and the quantizer. A side that is f32 or f16 is
//! read as the portable kernel reads it.

use half::f16;

use crate::Isa;
use crate::attention::{
    HeadRows, KvRows, MAX_HEAD_DIM, Q8_0_BYTES, Q8_0_VALUES, RowArgs, float_row, online_softmax,
};
use crate::dispatch::TypeKernels;
use crate::ops;

/// Bytes of a quantized query head.
const MAX_QUERY_BYTES: usize = MAX_HEAD_DIM / Q8_0_VALUES * Q8_0_BYTES;

/// [`crate::attention::AttendFn`] with `q8_0`, the Q8_0 kernels of `isa`
/// (which this CPU runs): the query heads of `args` one at a time, the
/// loops compiled for AVX2 where `isa` has it.
pub(crate) fn attend(isa: Isa, q8_0: &TypeKernels, args: RowArgs<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx2 | Isa::Avx512Vnni | Isa::Amx) {
        // SAFETY: `attention_on` checked that this CPU runs `isa`, and every
        // one of these ISAs includes AVX2, FMA and F16C.
        return unsafe { crate::x86_64::avx2::q8_0_heads(q8_0, args, out) };
    }
    let _ = isa;
    heads(q8_0, args, out, false)
}

/// `avx2`: the block loops in AVX2 (the caller runs with AVX2 enabled).
#[inline(always)]
pub(crate) fn heads(q8_0: &TypeKernels, args: RowArgs<'_>, out: &mut [f32], avx2: bool) {
    let hd = args.head_dim;
    for (q, out) in args.q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        head(q8_0, RowArgs { q, ..args.clone() }, out, avx2);
    }
}

#[inline(always)]
fn head(q8_0: &TypeKernels, args: RowArgs<'_>, out: &mut [f32], avx2: bool) {
    let hd = args.q.len();
    let mut quantized = [0u8; MAX_QUERY_BYTES];
    let quantized = &mut quantized[..hd / Q8_0_VALUES * Q8_0_BYTES];
    if args.k.is_q8_0() {
        (q8_0.quantize_activation)(args.q, quantized);
    }
    let (mut kw, mut vw) = ([0.0f32; MAX_HEAD_DIM], [0.0f32; MAX_HEAD_DIM]);
    let mut rows = Q8Rows {
        args: &args,
        avx2,
        quantized,
        kw: &mut kw[..hd],
        vw: &mut vw[..hd],
    };
    online_softmax(&args, out, &mut rows);
}

/// One head's rows, one side or both q8_0, and its quantized query.
struct Q8Rows<'a, 'b> {
    args: &'a RowArgs<'b>,
    /// The block loops in AVX2 (only ever true where the CPU has it).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    avx2: bool,
    quantized: &'a [u8],
    kw: &'a mut [f32],
    vw: &'a mut [f32],
}

impl HeadRows for Q8Rows<'_, '_> {
    #[inline(always)]
    fn dot(&mut self, j: usize) -> f32 {
        let RowArgs {
            q, k, off, kv_row, ..
        } = *self.args;
        let at = j * kv_row + off;
        match k {
            KvRows::Q8_0(k) => {
                let k = blocks(k, at, q.len());
                #[cfg(target_arch = "x86_64")]
                if self.avx2 {
                    // SAFETY: `avx2` is set only under AVX2 (`attend`).
                    return unsafe { crate::x86_64::avx2::q8_0_dot(k, self.quantized) };
                }
                dot(k, self.quantized)
            }
            _ => ops::dot(q, float_row(k, at, self.kw)),
        }
    }

    #[inline(always)]
    fn dot_block(&mut self, j0: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let (true, KvRows::Q8_0(k), false) = (self.avx2, self.args.k, out.is_empty()) {
            let RowArgs { off, kv_row, .. } = *self.args;
            let first = (j0 * kv_row + off) / Q8_0_VALUES * Q8_0_BYTES;
            let stride = kv_row / Q8_0_VALUES * Q8_0_BYTES;
            let len = (out.len() - 1) * stride + self.quantized.len();
            // SAFETY: `avx2` is set only under AVX2 (`attend`).
            return unsafe {
                crate::x86_64::avx2::q8_0_dot_rows(
                    &k[first..first + len],
                    stride,
                    self.quantized,
                    out,
                )
            };
        }
        for (i, s) in out.iter_mut().enumerate() {
            *s = self.dot(j0 + i);
        }
    }

    #[inline(always)]
    fn add(&mut self, j: usize, p: f32, out: &mut [f32]) {
        let RowArgs { v, off, kv_row, .. } = *self.args;
        let at = j * kv_row + off;
        match v {
            KvRows::Q8_0(v) => {
                let v = blocks(v, at, out.len());
                #[cfg(target_arch = "x86_64")]
                if self.avx2 {
                    // SAFETY: `avx2` is set only under AVX2 (`attend`).
                    return unsafe { crate::x86_64::avx2::q8_0_add_scaled(p, v, out) };
                }
                add_scaled(p, v, out)
            }
            _ => ops::axpy(p, float_row(v, at, self.vw), out),
        }
    }

    #[inline(always)]
    fn add_block(&mut self, j0: usize, ps: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let (true, KvRows::Q8_0(v), false) = (self.avx2, self.args.v, ps.is_empty()) {
            let RowArgs { off, kv_row, .. } = *self.args;
            let first = (j0 * kv_row + off) / Q8_0_VALUES * Q8_0_BYTES;
            let stride = kv_row / Q8_0_VALUES * Q8_0_BYTES;
            let (n, hd) = (ps.len(), out.len());
            // The rows' head blocks, each `stride` bytes after the last.
            let rows = &v[first..first + (n - 1) * stride + hd / Q8_0_VALUES * Q8_0_BYTES];
            // SAFETY: `avx2` is set only under AVX2 (`attend`).
            return unsafe { crate::x86_64::avx2::q8_0_add_rows(rows, stride, ps, out) };
        }
        for (i, &p) in ps.iter().enumerate() {
            self.add(j0 + i, p, out);
        }
    }
}

/// The blocks of values `at..at + n` (whole blocks).
#[inline(always)]
fn blocks(rows: &[u8], at: usize, n: usize) -> &[u8] {
    let first = at / Q8_0_VALUES * Q8_0_BYTES;
    &rows[first..first + n / Q8_0_VALUES * Q8_0_BYTES]
}

/// A block's f16 scale as f32, exactly; normal values without a call.
#[inline(always)]
pub(crate) fn scale_of(block: &[u8]) -> f32 {
    let h = u32::from(u16::from_le_bytes([block[0], block[1]]));
    let exp = (h >> 10) & 0x1f;
    if exp == 0 || exp == 0x1f {
        return f16::from_bits(h as u16).to_f32_const();
    }
    f32::from_bits(((h & 0x8000) << 16) | ((exp + 112) << 23) | ((h & 0x3ff) << 13))
}

/// A block's 32 quants.
#[inline(always)]
fn quants(block: &[u8]) -> &[u8; Q8_0_VALUES] {
    block[2..Q8_0_BYTES].try_into().expect("a whole block")
}

/// ggml's `vec_dot_q8_0_q8_0` over `a` and `b`: per block the exact sum of
/// the quants' products, times the two scales, summed block by block.
#[inline(always)]
fn dot(a: &[u8], b: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (x, y) in a.chunks_exact(Q8_0_BYTES).zip(b.chunks_exact(Q8_0_BYTES)) {
        let (qx, qy) = (quants(x), quants(y));
        let mut products = 0i32;
        for i in 0..Q8_0_VALUES {
            products += i32::from(qx[i] as i8) * i32::from(qy[i] as i8);
        }
        sum += products as f32 * (scale_of(x) * scale_of(y));
    }
    sum
}

/// `out += p · dequantize(blocks)`, each value `p · d · q` with `d` its
/// block's scale.
#[inline(always)]
fn add_scaled(p: f32, blocks: &[u8], out: &mut [f32]) {
    for (b, out) in blocks
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(Q8_0_VALUES))
    {
        let (s, q) = (p * scale_of(b), quants(b));
        let out: &mut [f32; Q8_0_VALUES] = out.try_into().expect("a whole block");
        for i in 0..Q8_0_VALUES {
            out[i] += s * f32::from(q[i] as i8);
        }
    }
}
