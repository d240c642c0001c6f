//! What a forward pass writes: activation buffers ([`Workspace`]) and the
//! keys and values of past positions ([`KvCache`]).

use half::f16;
use lamina_kernels::attention::KvRows;
use lamina_kernels::matmul::Scratch;
use lamina_kernels::ops;
use lamina_kernels::pool::Span;
use lamina_quant::blocks::{BlockQ8_0, QK};
use lamina_quant::quantize::quantize_q8_0;

use crate::hparams::HParams;

/// Activation buffers of a forward pass, sized for a number of tokens.
#[derive(Debug, Default)]
pub struct Buffers {
    /// Tokens in the current batch.
    pub(crate) t: usize,
    /// Residual stream, `T × n_embd`.
    pub(crate) x: Vec<f32>,
    /// Normed input of a projection, `T × n_embd` (final hidden state at the end).
    pub(crate) xn: Vec<f32>,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) att: Vec<f32>,
    pub(crate) o: Vec<f32>,
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    /// RoPE cosine and sine tables of the batch's positions ([`ops::rope_table`]):
    /// `T × rope_dims` for the global base, then as many for the sliding-window
    /// layers' base where the model has such layers.
    pub(crate) rope: Vec<f32>,
    pub(crate) scratch: Scratch,
}

/// Everything a forward pass writes, reused across calls.
#[derive(Debug, Default)]
pub struct Workspace {
    pub(crate) bufs: Buffers,
    pub(crate) pos: Vec<usize>,
    /// Per token: the batch range of its sequence.
    pub(crate) seq: Vec<(usize, usize)>,
    /// Per token: its segment (token type) in encoder models, 0 or 1.
    pub(crate) types: Vec<u8>,
    /// Per token: the cache row of its sequence's first position.
    pub(crate) kv_base: Vec<usize>,
    pub(crate) n_embd: usize,
}

impl Workspace {
    /// A workspace already sized for batches of `tokens`.
    pub fn new(hp: &HParams, tokens: usize) -> Workspace {
        let mut ws = Workspace::default();
        ws.ensure(hp, tokens);
        ws
    }

    /// Grows (never shrinks) the buffers for `tokens`; allocates only when growing.
    pub fn ensure(&mut self, hp: &HParams, tokens: usize) {
        let b = &mut self.bufs;
        if b.x.len() >= tokens * hp.n_embd
            && b.gate.len() >= tokens * hp.n_ff
            && b.q.len() >= tokens * hp.q_dim()
            && b.k.len() >= tokens * hp.kv_dim()
            && b.rope.len() >= 2 * tokens * hp.rope_dims
        {
            return;
        }
        // A first allocation comes zeroed from the allocator, so only the
        // tokens a batch uses become resident (a short prompt's few rows).
        let grow = |v: &mut Vec<f32>, n: usize| {
            if v.is_empty() {
                *v = bytemuck::zeroed_vec(n);
            } else {
                v.resize(n.max(v.len()), 0.0);
            }
        };
        grow(&mut b.x, tokens * hp.n_embd);
        grow(&mut b.xn, tokens * hp.n_embd);
        grow(&mut b.o, tokens * hp.n_embd);
        grow(&mut b.q, tokens * hp.q_dim());
        grow(&mut b.att, tokens * hp.q_dim());
        grow(&mut b.k, tokens * hp.kv_dim());
        grow(&mut b.v, tokens * hp.kv_dim());
        grow(&mut b.gate, tokens * hp.n_ff);
        grow(&mut b.up, tokens * hp.n_ff);
        grow(&mut b.rope, 2 * tokens * hp.rope_dims);
        self.pos.resize(tokens.max(self.pos.len()), 0);
        self.seq.resize(tokens.max(self.seq.len()), (0, 0));
        self.types.resize(tokens.max(self.types.len()), 0);
        self.kv_base.resize(tokens.max(self.kv_base.len()), 0);
        // Quantized activations of the widest input; F32 (4 bytes a value) is the worst case.
        let widest = hp.n_embd.max(hp.n_ff).max(hp.q_dim());
        b.scratch.reserve_bytes(tokens * widest * 4);
        self.n_embd = hp.n_embd;
    }

    /// The final-normed hidden states of the last forward: `T × n_embd`.
    pub fn hidden(&self) -> &[f32] {
        &self.bufs.xn[..self.bufs.t * self.n_embd]
    }
}

/// Keys and values of past positions, per layer, for one or more sequences.
/// Each sequence owns `n_ctx` consecutive rows of every layer's buffers, so
/// a query of sequence `s` attends to one contiguous range of rows and a
/// batch may mix sequences. A layer's buffers are head-major: each kv
/// head's rows (every sequence's) back to back, so decoding's pass over a
/// long cache reads one contiguous stream per head rather than a head's
/// slice of every row.
#[derive(Debug)]
pub struct KvCache {
    pub(super) n_ctx: usize,
    kv_dim: usize,
    head_dim: usize,
    /// Rows per kv head: every sequence's `n_ctx`.
    n_rows: usize,
    /// Positions filled, per sequence.
    pub(super) lens: Vec<usize>,
    layers: Vec<(KvBuf, KvBuf)>,
}

/// The element type of one side of the cache (keys or values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvElement {
    F16,
    F32,
    /// ggml's Q8_0 blocks, as llama.cpp's `--cache-type-k/-v q8_0`: 8.5
    /// bits a value. Heads must be whole blocks of 32 values
    /// ([`crate::mem::check_session`] refuses others).
    Q8_0,
}

impl KvElement {
    /// Bytes of a cache row of `values` values (whole Q8_0 blocks for Q8_0).
    pub fn row_bytes(self, values: usize) -> usize {
        match self {
            KvElement::F16 => 2 * values,
            KvElement::F32 => 4 * values,
            KvElement::Q8_0 => values / QK * std::mem::size_of::<BlockQ8_0>(),
        }
    }
}

/// The element types of the cache's keys and of its values, as llama.cpp's
/// `--cache-type-k` and `--cache-type-v` choose them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvType {
    pub k: KvElement,
    pub v: KvElement,
}

impl KvType {
    /// Keys and values in f16 (the default).
    pub const F16: KvType = KvType::both(KvElement::F16);
    /// Keys and values in f32.
    pub const F32: KvType = KvType::both(KvElement::F32);
    /// Keys and values as Q8_0 blocks.
    pub const Q8_0: KvType = KvType::both(KvElement::Q8_0);

    /// Keys and values of one type.
    pub const fn both(e: KvElement) -> KvType {
        KvType { k: e, v: e }
    }

    /// Bytes of a position's keys and values, `values` values each.
    pub fn row_bytes(self, values: usize) -> usize {
        self.k.row_bytes(values) + self.v.row_bytes(values)
    }

    /// Whether either side holds Q8_0 blocks.
    pub fn has_q8_0(self) -> bool {
        self.k == KvElement::Q8_0 || self.v == KvElement::Q8_0
    }
}

#[derive(Debug)]
enum KvBuf {
    F16(Vec<f16>),
    F32(Vec<f32>),
    Q8_0(Vec<BlockQ8_0>),
}

impl KvCache {
    /// A cache of `n_ctx` positions for one sequence (all allocated now).
    pub fn new(hp: &HParams, n_ctx: usize, ty: KvType) -> KvCache {
        KvCache::with_sequences(hp, n_ctx, 1, ty)
    }

    /// A cache of `n_seq` sequences of `n_ctx` positions each (all allocated now).
    pub fn with_sequences(hp: &HParams, n_ctx: usize, n_seq: usize, ty: KvType) -> KvCache {
        let n = n_seq * n_ctx * hp.kv_dim();
        // Zeroed by the allocator: pages the OS maps in only when a position
        // is first written, so a long context costs memory as it fills.
        let buf = |e: KvElement| match e {
            KvElement::F16 => KvBuf::F16(bytemuck::zeroed_vec(n)),
            KvElement::F32 => KvBuf::F32(bytemuck::zeroed_vec(n)),
            KvElement::Q8_0 => KvBuf::Q8_0(bytemuck::zeroed_vec(n / QK)),
        };
        KvCache {
            n_ctx,
            kv_dim: hp.kv_dim(),
            head_dim: hp.head_dim,
            n_rows: n_seq * n_ctx,
            lens: vec![0; n_seq],
            layers: (0..hp.n_layer).map(|_| (buf(ty.k), buf(ty.v))).collect(),
        }
    }

    /// Positions filled in the first sequence.
    pub fn len(&self) -> usize {
        self.lens[0]
    }
    pub fn is_empty(&self) -> bool {
        self.lens[0] == 0
    }
    /// Positions filled in sequence `seq`.
    pub fn seq_len(&self, seq: usize) -> usize {
        self.lens[seq]
    }
    /// Sequences the cache holds.
    pub fn n_seq(&self) -> usize {
        self.lens.len()
    }
    /// Capacity in positions, per sequence.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }
    /// Forgets the first sequence's positions from `len` on (to reuse a common prefix).
    pub fn truncate(&mut self, len: usize) {
        self.truncate_seq(0, len);
    }
    /// Forgets sequence `seq`'s positions from `len` on.
    pub fn truncate_seq(&mut self, seq: usize, len: usize) {
        self.lens[seq] = self.lens[seq].min(len);
    }

    /// Makes sequence `to` hold the first `n` positions of sequence `from`
    /// (a shared prefix copied instead of recomputed).
    pub fn copy_prefix(&mut self, from: usize, to: usize, n: usize) {
        let n = n.min(self.lens[from]).min(self.n_ctx);
        if from != to {
            let hd = self.head_dim;
            let m = n * hd;
            for g in 0..self.kv_dim / hd {
                let (src, dst) = (self.at(g, self.base(from)), self.at(g, self.base(to)));
                for (k, v) in &mut self.layers {
                    for b in [&mut *k, &mut *v] {
                        match b {
                            KvBuf::F16(d) => d.copy_within(src..src + m, dst),
                            KvBuf::F32(d) => d.copy_within(src..src + m, dst),
                            KvBuf::Q8_0(d) => d.copy_within(src / QK..(src + m) / QK, dst / QK),
                        }
                    }
                }
            }
        }
        self.lens[to] = n;
    }

    /// The first cache row of sequence `seq`.
    pub(super) fn base(&self, seq: usize) -> usize {
        seq * self.n_ctx
    }

    /// Index of kv head `g`'s first value in cache row `row`.
    fn at(&self, g: usize, row: usize) -> usize {
        (g * self.n_rows + row) * self.head_dim
    }

    /// Writes rows of keys and values at cache row `row` of layer `il`
    /// (`k` and `v`: consecutive rows of every kv head, as projected).
    pub(super) fn store(&mut self, il: usize, row: usize, k: &[f32], v: &[f32]) {
        let (hd, kvd, n_rows) = (self.head_dim, self.kv_dim, self.n_rows);
        let n = k.len() / kvd;
        let (kb, vb) = &mut self.layers[il];
        for (src, dst) in [(k, kb), (v, vb)] {
            for g in 0..kvd / hd {
                for i in 0..n {
                    let src = &src[i * kvd + g * hd..][..hd];
                    // `self.at(g, row + i)`, with the layer borrowed.
                    let at = (g * n_rows + row + i) * hd;
                    match &mut *dst {
                        KvBuf::F16(d) => ops::f32_to_f16(src, &mut d[at..at + hd]),
                        KvBuf::F32(d) => d[at..at + hd].copy_from_slice(src),
                        // Heads are whole blocks (`mem::check_session`): ggml's quantizer.
                        KvBuf::Q8_0(d) => quantize_q8_0(src, &mut d[at / QK..(at + hd) / QK]),
                    }
                }
            }
        }
    }

    /// The memory of layer `il`'s key and value rows `rows` of its first
    /// two kv heads (where decoding's attention tasks start).
    pub(super) fn spans(&self, il: usize, rows: std::ops::Range<usize>) -> [Span; 4] {
        let heads = (self.kv_dim / self.head_dim).min(2);
        let (k, v) = &self.layers[il];
        let span = |b: &KvBuf, g: usize| {
            let m = self.at(g, rows.start)..self.at(g, rows.end);
            match b {
                KvBuf::F16(d) => Span::of(&d[m]),
                KvBuf::F32(d) => Span::of(&d[m]),
                KvBuf::Q8_0(d) => Span::of(&d[m.start / QK..m.end / QK]),
            }
        };
        std::array::from_fn(|i| {
            let g = i / 2;
            match (g < heads, i % 2) {
                (false, _) => Span::default(),
                (true, 0) => span(k, g),
                (true, _) => span(v, g),
            }
        })
    }

    /// Layer `il`'s keys and values, head-major, and the rows of each kv
    /// head ([`lamina_kernels::attention::attention_head_major`]'s layout).
    pub(super) fn heads(&self, il: usize) -> (KvRows<'_>, KvRows<'_>, usize) {
        fn view(b: &KvBuf) -> KvRows<'_> {
            match b {
                KvBuf::F16(d) => KvRows::F16(d),
                KvBuf::F32(d) => KvRows::F32(d),
                KvBuf::Q8_0(d) => KvRows::Q8_0(bytemuck::cast_slice(d)),
            }
        }
        let (k, v) = &self.layers[il];
        (view(k), view(v), self.n_rows)
    }
}
