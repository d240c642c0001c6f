//! Real models' shapes, from their `config.json`, and the metadata
//! llama.cpp's converter writes for them.

/// A GGUF architecture the synthesizer writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Phi3,
    Gemma2,
    Granite,
}

impl Arch {
    /// The `general.architecture` name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Phi3 => "phi3",
            Arch::Gemma2 => "gemma2",
            Arch::Granite => "granite",
        }
    }

    /// Whether the converter writes `vocab_size` and `rope.dimension_count`
    /// (the `LlamaModel` family and Phi-3).
    fn writes_rope_dims(self) -> bool {
        matches!(self, Arch::Llama | Arch::Granite | Arch::Phi3)
    }
}

/// Where a shape's tokenizer (`tokenizer.*` keys) is copied from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vocab {
    /// `models/ggml-vocab-NAME.gguf` in the pinned llama.cpp sources.
    LlamaCpp(&'static str),
    /// A file of the project's models directory.
    Project(&'static str),
}

/// Llama 3's `rope_scaling` (type `llama3`), from which the converter
/// computes the `rope_freqs` tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Llama3Rope {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_context: f64,
}

/// One real model's hyperparameters, as its `config.json` gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Shape {
    pub name: &'static str,
    pub arch: Arch,
    pub n_embd: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub n_ff: u64,
    pub n_vocab: u64,
    /// `head_dim` where the config names it (the converter then writes
    /// `key_length` and `value_length`).
    pub head_dim: Option<u64>,
    /// Whether the LM head is the token embedding (no `output.weight`).
    pub tied: bool,
    pub n_ctx: u32,
    /// `rope_theta`; `None` where the converter writes no `rope.freq_base`.
    pub rope_theta: Option<f32>,
    pub rms_eps: f32,
    pub llama3_rope: Option<Llama3Rope>,
    /// Further `ARCH.`-prefixed float keys (soft-caps, Granite's multipliers).
    pub extra_f32: &'static [(&'static str, f32)],
    /// Further `ARCH.`-prefixed integer keys (sliding windows, original context).
    pub extra_u32: &'static [(&'static str, u32)],
    pub vocab: Vocab,
}

const LLAMA3_1B_ROPE: Llama3Rope = Llama3Rope {
    factor: 32.0,
    low_freq_factor: 1.0,
    high_freq_factor: 4.0,
    original_context: 8192.0,
};

const LLAMA3_8B_ROPE: Llama3Rope = Llama3Rope {
    factor: 8.0,
    ..LLAMA3_1B_ROPE
};

/// A shape with the fields most share; each entry below overrides the rest.
const BASE: Shape = Shape {
    name: "",
    arch: Arch::Llama,
    n_embd: 0,
    n_layer: 0,
    n_head: 0,
    n_head_kv: 0,
    n_ff: 0,
    n_vocab: 0,
    head_dim: None,
    tied: false,
    n_ctx: 0,
    rope_theta: None,
    rms_eps: 1e-5,
    llama3_rope: None,
    extra_f32: &[],
    extra_u32: &[],
    vocab: Vocab::LlamaCpp(""),
};

/// The shapes `cargo xtask synth` knows, from each model's `config.json`.
pub(crate) const SHAPES: &[Shape] = &[
    Shape {
        name: "SmolLM2-135M",
        n_embd: 576,
        n_layer: 30,
        n_head: 9,
        n_head_kv: 3,
        n_ff: 1536,
        n_vocab: 49152,
        tied: true,
        n_ctx: 8192,
        rope_theta: Some(100_000.0),
        vocab: Vocab::Project("SmolLM2-135M-Instruct-Q4_1.gguf"),
        ..BASE
    },
    Shape {
        name: "Llama-3.2-1B",
        n_embd: 2048,
        n_layer: 16,
        n_head: 32,
        n_head_kv: 8,
        n_ff: 8192,
        n_vocab: 128_256,
        head_dim: Some(64),
        tied: true,
        n_ctx: 131_072,
        rope_theta: Some(500_000.0),
        llama3_rope: Some(LLAMA3_1B_ROPE),
        vocab: Vocab::LlamaCpp("llama-bpe"),
        ..BASE
    },
    Shape {
        name: "Llama-3.1-8B",
        n_embd: 4096,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 8,
        n_ff: 14336,
        n_vocab: 128_256,
        n_ctx: 131_072,
        rope_theta: Some(500_000.0),
        llama3_rope: Some(LLAMA3_8B_ROPE),
        vocab: Vocab::LlamaCpp("llama-bpe"),
        ..BASE
    },
    Shape {
        name: "Qwen2.5-0.5B",
        arch: Arch::Qwen2,
        n_embd: 896,
        n_layer: 24,
        n_head: 14,
        n_head_kv: 2,
        n_ff: 4864,
        n_vocab: 151_936,
        tied: true,
        n_ctx: 32768,
        rope_theta: Some(1_000_000.0),
        rms_eps: 1e-6,
        vocab: Vocab::LlamaCpp("qwen2"),
        ..BASE
    },
    Shape {
        name: "Qwen2.5-7B",
        arch: Arch::Qwen2,
        n_embd: 3584,
        n_layer: 28,
        n_head: 28,
        n_head_kv: 4,
        n_ff: 18944,
        n_vocab: 152_064,
        n_ctx: 32768,
        rope_theta: Some(1_000_000.0),
        rms_eps: 1e-6,
        vocab: Vocab::LlamaCpp("qwen2"),
        ..BASE
    },
    Shape {
        name: "Qwen2.5-14B",
        arch: Arch::Qwen2,
        n_embd: 5120,
        n_layer: 48,
        n_head: 40,
        n_head_kv: 8,
        n_ff: 13824,
        n_vocab: 152_064,
        n_ctx: 32768,
        rope_theta: Some(1_000_000.0),
        rms_eps: 1e-6,
        vocab: Vocab::LlamaCpp("qwen2"),
        ..BASE
    },
    Shape {
        name: "Qwen3-0.6B",
        arch: Arch::Qwen3,
        n_embd: 1024,
        n_layer: 28,
        n_head: 16,
        n_head_kv: 8,
        n_ff: 3072,
        n_vocab: 151_936,
        head_dim: Some(128),
        tied: true,
        n_ctx: 40960,
        rope_theta: Some(1_000_000.0),
        rms_eps: 1e-6,
        vocab: Vocab::LlamaCpp("qwen2"),
        ..BASE
    },
    Shape {
        name: "Phi-3-mini",
        arch: Arch::Phi3,
        n_embd: 3072,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 32,
        n_ff: 8192,
        n_vocab: 32064,
        n_ctx: 4096,
        rope_theta: Some(10_000.0),
        extra_u32: &[
            ("rope.scaling.original_context_length", 4096),
            ("attention.sliding_window", 2047),
        ],
        vocab: Vocab::LlamaCpp("phi-3"),
        ..BASE
    },
    Shape {
        name: "Gemma-2-2B",
        arch: Arch::Gemma2,
        n_embd: 2304,
        n_layer: 26,
        n_head: 8,
        n_head_kv: 4,
        n_ff: 9216,
        n_vocab: 256_000,
        head_dim: Some(256),
        tied: true,
        n_ctx: 8192,
        rms_eps: 1e-6,
        extra_f32: &[
            ("attn_logit_softcapping", 50.0),
            ("final_logit_softcapping", 30.0),
        ],
        extra_u32: &[("attention.sliding_window", 4096)],
        vocab: Vocab::Project("gemma-3-270m-Q4_K_M.gguf"),
        ..BASE
    },
    Shape {
        name: "Granite-3.3-8B",
        arch: Arch::Granite,
        n_embd: 4096,
        n_layer: 40,
        n_head: 32,
        n_head_kv: 8,
        n_ff: 12800,
        n_vocab: 49159,
        tied: true,
        n_ctx: 131_072,
        rope_theta: Some(10_000_000.0),
        extra_f32: &[
            ("attention.scale", 0.0078125),
            ("embedding_scale", 12.0),
            ("residual_scale", 0.22),
            ("logit_scale", 16.0),
        ],
        vocab: Vocab::Project("SmolLM2-135M-Instruct-Q4_1.gguf"),
        ..BASE
    },
];

/// The shape named `name` (case-insensitively).
pub(crate) fn find(name: &str) -> Option<&'static Shape> {
    SHAPES.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

impl Shape {
    /// Per-head width of queries and keys.
    pub(crate) fn head_dim(&self) -> u64 {
        self.head_dim.unwrap_or(self.n_embd / self.n_head)
    }

    /// Metadata keys this shape's converter writes besides the tokenizer,
    /// `general.*` and `file_type`: `(key without "ARCH.", value)`.
    pub(crate) fn hparams(&self) -> Vec<(String, lamina_gguf::OwnedValue)> {
        use lamina_gguf::OwnedValue as V;
        let u = |x: u64| V::U32(x as u32);
        let mut kv: Vec<(String, V)> = vec![
            ("context_length".into(), V::U32(self.n_ctx)),
            ("embedding_length".into(), u(self.n_embd)),
            ("feed_forward_length".into(), u(self.n_ff)),
            ("block_count".into(), u(self.n_layer)),
            ("attention.head_count".into(), u(self.n_head)),
            ("attention.head_count_kv".into(), u(self.n_head_kv)),
            (
                "attention.layer_norm_rms_epsilon".into(),
                V::F32(self.rms_eps),
            ),
        ];
        if let Some(theta) = self.rope_theta {
            kv.push(("rope.freq_base".into(), V::F32(theta)));
        }
        if let Some(d) = self.head_dim {
            kv.push(("attention.key_length".into(), u(d)));
            kv.push(("attention.value_length".into(), u(d)));
        }
        if self.arch.writes_rope_dims() {
            if self.arch != Arch::Phi3 {
                kv.push(("vocab_size".into(), u(self.n_vocab)));
            }
            kv.push(("rope.dimension_count".into(), u(self.head_dim())));
        }
        kv.extend(
            self.extra_f32
                .iter()
                .map(|&(k, v)| (k.to_string(), V::F32(v))),
        );
        kv.extend(
            self.extra_u32
                .iter()
                .map(|&(k, v)| (k.to_string(), V::U32(v))),
        );
        kv
    }
}
