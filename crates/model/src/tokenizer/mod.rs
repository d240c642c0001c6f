//! Tokenizers that reproduce llama.cpp's `llama_tokenize` and
//! `llama_detokenize` token for token, read from GGUF metadata.
//!
//! Four vocabulary types are implemented: SentencePiece (`tokenizer.ggml.model
//! = "llama"`, e.g. Gemma), byte-level BPE (`"gpt2"`, e.g. SmolLM2, Llama 3,
//! Qwen2), WordPiece (`"bert"`, BERT-family encoders) and Unigram (`"t5"`,
//! XLM-R). The pipeline is llama.cpp's: special tokens are cut out of the raw
//! text first (`special`), then each text fragment goes through the
//! model's tokenizer (`spm_merge`, `pretok` + `bpe`, `wpm` or `ugm`).
//! WordPiece and Unigram follow the model's own Hugging Face tokenizer
//! where llama.cpp departs from it (their module docs list where). Loading follows
//! `llama_vocab::impl::load`, including its defaults and its name-based
//! fix-ups of token attributes, because those decide which tokens split the
//! text.

mod bert_chars;
mod bpe;
mod decode;
mod encode;
mod pair;
mod pretok;
mod special;
mod spm_merge;
mod stream;
mod table;
mod trie;
mod ugm;
mod unicode;
mod wpm;

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;
use lamina_gguf::{ArrayView, Gguf, Value, ValueType};

pub use pair::PairTemplate;
pub use stream::StreamDecoder;

use pretok::Splitter;
use table::{MergeTable, StrTable};

/// The largest vocabulary accepted: real ones stay under 300k tokens, and the
/// bound keeps a hostile token count from sizing tables by the gigabyte.
pub const MAX_VOCAB: usize = 1 << 24;

/// A tokenizer could not be built from the metadata.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] lamina_gguf::Error),
    #[error(
        "tokenizer.ggml.model {0:?} is not supported (\"llama\" = SentencePiece, \"gpt2\" = byte-level BPE, \"bert\" = WordPiece and \"t5\" = Unigram are)"
    )]
    UnsupportedModel(String),
    #[error("tokenizer.ggml.pre {0:?} is not a supported pre-tokenizer")]
    UnsupportedPre(String),
    #[error("{key}: expected {expected}, found {found}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("{key} has {len} entries, fewer than the {n_vocab} tokens")]
    TooShort {
        key: &'static str,
        len: usize,
        n_vocab: usize,
    },
    #[error("{key} = {id} is outside the vocabulary of {n_vocab} tokens")]
    IdOutOfRange {
        key: &'static str,
        id: i128,
        n_vocab: usize,
    },
    #[error("tokenizer.ggml.merges[{index}] = {text:?} is not two parts separated by a space")]
    BadMerge { index: usize, text: String },
    #[error("tokens {first} and {id} have the same text {text:?}")]
    DuplicateToken { first: u32, id: u32, text: String },
    #[error("the vocabulary (tokenizer.ggml.tokens) is empty")]
    EmptyVocab,
    #[error("the vocabulary has {0} tokens, more than the {MAX_VOCAB} this tokenizer accepts")]
    TooManyTokens(usize),
    #[error("pre-tokenizer: {0}")]
    Regex(String),
    #[error("tokenizer.ggml.precompiled_charsmap: {0}")]
    BadCharsmap(String),
}

pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

/// llama.cpp's `llama_token_attr` bits.
pub mod attr {
    pub const UNKNOWN: u32 = 1 << 0;
    pub const UNUSED: u32 = 1 << 1;
    pub const NORMAL: u32 = 1 << 2;
    pub const CONTROL: u32 = 1 << 3;
    pub const USER_DEFINED: u32 = 1 << 4;
    pub const BYTE: u32 = 1 << 5;
    pub const NORMALIZED: u32 = 1 << 6;
    pub const LSTRIP: u32 = 1 << 7;
    pub const RSTRIP: u32 = 1 << 8;
    pub const SINGLE_WORD: u32 = 1 << 9;
}

/// Which algorithm turns text fragments into tokens.
#[derive(Debug)]
enum Kind {
    Spm,
    Wpm(wpm::Wpm),
    Ugm(ugm::Ugm),
    Bpe {
        merges: MergeTable,
        splitters: Vec<Splitter>,
        ignore_merges: bool,
    },
}

/// Special token ids (`None` where the model has none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// A vocabulary and the algorithm that tokenizes with it.
#[derive(Debug)]
pub struct Tokenizer {
    kind: Kind,
    tokens: StrTable,
    scores: Vec<f32>,
    attrs: Vec<u32>,
    special: SpecialTokens,
    /// End-of-generation tokens, sorted.
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    /// SPM: `<0xXX>` (else the byte itself); BPE: the one-byte string.
    byte_token: Box<[Option<u32>; 256]>,
    /// CONTROL, USER_DEFINED and UNKNOWN tokens, longest first.
    special_cache: Vec<u32>,
    /// Finds which of `special_cache` occur in a text; built on first use so
    /// loading stays fast.
    special_finder: OnceLock<Option<AhoCorasick>>,
    /// Bounds the token count from the input bytes where the vocabulary
    /// allows it ([`Tokenizer::encode_within`]); computed on first use.
    span_bound: OnceLock<Option<encode::SpanBound>>,
}

/// Picks one id field of [`SpecialTokens`].
type SlotFn = fn(&mut SpecialTokens) -> &mut Option<u32>;

/// Type ids of `tokenizer.ggml.token_type` (llama.cpp's `llama_token_type`).
fn type_to_attr(t: i64) -> u32 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0, // UNDEFINED, and unknown types as llama.cpp maps them
    }
}

fn wrong_type(key: &'static str, expected: &'static str, found: &Value<'_>) -> TokenizerError {
    TokenizerError::WrongType {
        key,
        expected,
        found: found.type_description(),
    }
}

fn opt_str<'a, D: AsRef<[u8]>>(g: &'a Gguf<D>, key: &'static str) -> Result<Option<&'a str>> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| wrong_type(key, "string", &v)),
    }
}

fn opt_bool<D: AsRef<[u8]>>(g: &Gguf<D>, key: &'static str) -> Result<Option<bool>> {
    match g.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(v) => Err(wrong_type(key, "bool", &v)),
    }
}

fn opt_array<'a, D: AsRef<[u8]>>(
    g: &'a Gguf<D>,
    key: &'static str,
    elem: &[ValueType],
    expected: &'static str,
) -> Result<Option<ArrayView<'a>>> {
    match g.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) if elem.contains(&a.elem_type()) => Ok(Some(a)),
        Some(v) => Err(wrong_type(key, expected, &v)),
    }
}

impl Tokenizer {
    /// Build the tokenizer described by a GGUF file's `tokenizer.ggml.*` keys.
    pub fn from_gguf<D: AsRef<[u8]>>(g: &Gguf<D>) -> Result<Tokenizer> {
        let model = g.get_str("tokenizer.ggml.model")?;
        let pre = opt_str(g, "tokenizer.ggml.pre")?.unwrap_or("");

        // Defaults of llama_vocab::impl::load for each vocabulary type.
        let mut special = SpecialTokens::default();
        let (mut add_bos, mut add_eos, mut add_sep, mut add_space_prefix, mut clean_spaces) =
            (false, false, false, false, false);
        let is_bpe = match model {
            "llama" => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                (add_bos, add_eos, add_sep, add_space_prefix, clean_spaces) =
                    (true, false, false, true, false);
                false
            }
            "bert" => {
                (special.bos, special.unk, special.sep) = (Some(101), Some(100), Some(102));
                (special.pad, special.mask) = (Some(0), Some(103));
                (add_bos, add_sep, clean_spaces) = (true, true, true);
                false
            }
            "t5" => {
                (special.eos, special.unk, special.pad) = (Some(1), Some(2), Some(0));
                add_eos = true;
                false
            }
            "gpt2" => {
                special.bos = Some(11);
                special.eos = Some(11);
                true
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        let mut pre_cfg = None;
        if is_bpe {
            let cfg = pretok::pre_config(pre)
                .ok_or_else(|| TokenizerError::UnsupportedPre(pre.to_string()))?;
            (add_bos, add_eos, add_sep, add_space_prefix, clean_spaces) =
                (cfg.add_bos, false, cfg.add_sep, false, cfg.clean_spaces);
            if matches!(pre, "chatglm-bpe" | "glm4" | "glm5") {
                special.bos = None;
            }
            pre_cfg = Some(cfg);
        }
        if let Some(v) = opt_bool(g, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }

        // Tokens, scores and types.
        const TOKENS: &str = "tokenizer.ggml.tokens";
        let list = opt_array(g, TOKENS, &[ValueType::String], "array of string")?
            .ok_or_else(|| lamina_gguf::Error::MissingKey(TOKENS.to_string()))?;
        let n = list.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if n > MAX_VOCAB {
            return Err(TokenizerError::TooManyTokens(n));
        }
        let mut tokens = StrTable::with_capacity(n, n * 8);
        let strings = list.strings().into_iter().flatten();
        for (i, text) in strings.enumerate() {
            let pushed = if text.is_empty() {
                tokens.push(format!("[EMPTY_{i}]").as_bytes())
            } else {
                tokens.push(text)
            };
            if let Err(first) = pushed {
                return Err(TokenizerError::DuplicateToken {
                    first,
                    id: i as u32,
                    text: String::from_utf8_lossy(tokens.get(first)).into_owned(),
                });
            }
        }
        if tokens.len() != n {
            // The GGUF reader validated the array; this cannot happen.
            return Err(TokenizerError::TooShort {
                key: TOKENS,
                len: tokens.len(),
                n_vocab: n,
            });
        }

        const SCORES: &str = "tokenizer.ggml.scores";
        let scores = match opt_array(g, SCORES, &[ValueType::F32, ValueType::I32], "array of f32")?
        {
            None => vec![0.0; n],
            Some(a) if a.len() < n => {
                return Err(TokenizerError::TooShort {
                    key: SCORES,
                    len: a.len(),
                    n_vocab: n,
                });
            }
            // Read the little-endian words directly: decoding 262k values
            // one by one is a noticeable part of loading.
            Some(a) => {
                let raw = a.raw_scalars().unwrap_or_default();
                let words = raw
                    .chunks_exact(4)
                    .take(n)
                    .map(|w| [w[0], w[1], w[2], w[3]]);
                if a.elem_type() == ValueType::F32 {
                    words.map(f32::from_le_bytes).collect()
                } else {
                    words.map(|w| i32::from_le_bytes(w) as f32).collect()
                }
            }
        };
        const TYPES: &str = "tokenizer.ggml.token_type";
        let mut attrs = match opt_array(g, TYPES, &[ValueType::I32], "array of i32")? {
            None => vec![attr::NORMAL; n],
            Some(a) if a.len() < n => {
                return Err(TokenizerError::TooShort {
                    key: TYPES,
                    len: a.len(),
                    n_vocab: n,
                });
            }
            Some(a) => a
                .raw_scalars()
                .unwrap_or_default()
                .chunks_exact(4)
                .take(n)
                .map(|w| type_to_attr(i64::from(i32::from_le_bytes([w[0], w[1], w[2], w[3]]))))
                .collect(),
        };

        let kind = if let Some(cfg) = pre_cfg {
            const MERGES: &str = "tokenizer.ggml.merges";
            let list = opt_array(g, MERGES, &[ValueType::String], "array of string")?
                .ok_or_else(|| lamina_gguf::Error::MissingKey(MERGES.to_string()))?;
            // A hostile file's count reserves nothing beyond the vocabulary's
            // scale; the table grows as merges actually parse.
            let mut merges = MergeTable::with_capacity(list.len().min(2 * MAX_VOCAB));
            for (i, m) in list.strings().into_iter().flatten().enumerate() {
                // llama.cpp splits at the first space after the first byte.
                let pos = m.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1);
                let Some(pos) = pos else {
                    return Err(TokenizerError::BadMerge {
                        index: i,
                        text: String::from_utf8_lossy(m).into_owned(),
                    });
                };
                merges.insert(&m[..pos], &m[pos + 1..], i as u32);
            }
            let splitters = cfg
                .regexes
                .iter()
                .map(|e| Splitter::new(e))
                .collect::<Result<Vec<_>, _>>()
                .map_err(TokenizerError::Regex)?;
            Kind::Bpe {
                merges,
                splitters,
                ignore_merges: cfg.ignore_merges,
            }
        } else {
            Kind::Spm
        };

        // Special ids: defaults outside the vocabulary are dropped (llama.cpp
        // warns), explicit ids outside it are an error.
        for id in [
            &mut special.bos,
            &mut special.eos,
            &mut special.unk,
            &mut special.sep,
            &mut special.pad,
            &mut special.mask,
        ] {
            if id.is_some_and(|i| i as usize >= n) {
                *id = None;
            }
        }
        let read_id = |key: &'static str| -> Result<Option<u32>> {
            let Some(v) = g.get(key) else { return Ok(None) };
            let id = v
                .as_integer()
                .ok_or_else(|| wrong_type(key, "integer", &v))?;
            if id < 0 || id >= n as i128 {
                return Err(TokenizerError::IdOutOfRange {
                    key,
                    id,
                    n_vocab: n,
                });
            }
            Ok(Some(id as u32))
        };
        // Later keys override earlier ones (the deprecated FIM names last).
        let keys: [(&'static str, SlotFn); 17] = [
            ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
            ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
            ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
            ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
            ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
            ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
            ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
            ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
            ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
            ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
            ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
            ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
            ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
        ];
        for (key, slot) in keys {
            if let Some(id) = read_id(key)? {
                *slot(&mut special) = Some(id);
            }
        }
        if let Some(v) = opt_bool(g, "tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = opt_bool(g, "tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        if let Some(v) = opt_bool(g, "tokenizer.ggml.add_sep_token")? {
            add_sep = v;
        }

        let eog = fix_up_attrs(&tokens, &mut attrs, &mut special);

        // The special-token cache: a stable sort, so equal lengths keep id
        // order (llama.cpp's std::sort leaves ties unspecified; ties only
        // matter for overlapping same-length tokens).
        let mut special_cache: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        special_cache.sort_by_key(|&id| std::cmp::Reverse(tokens.get(id).len()));

        set_attrs_by_name(g, &tokens, &mut attrs, &special_cache)?;

        // WordPiece and Unigram tries hold pieces by the fixed-up attributes.
        let kind = if model == "bert" {
            Kind::Wpm(wpm::Wpm::new(
                &tokens,
                &attrs,
                opt_bool(g, "tokenizer.ggml.normalizer.lowercase")?,
                opt_bool(g, "tokenizer.ggml.normalizer.strip_accents")?,
            )?)
        } else if model == "t5" {
            const CHARSMAP: &str = "tokenizer.ggml.precompiled_charsmap";
            let charsmap = opt_array(g, CHARSMAP, &[ValueType::U8, ValueType::I8], "array of u8")?
                .map(|a| a.raw_scalars().unwrap_or_default())
                .unwrap_or_default();
            let remove_ws = opt_bool(g, "tokenizer.ggml.remove_extra_whitespaces")?;
            Kind::Ugm(ugm::Ugm::new(
                &tokens,
                &attrs,
                &scores,
                charsmap,
                add_space_prefix,
                remove_ws.unwrap_or(false),
            )?)
        } else {
            kind
        };

        let mut byte_token = Box::new([None; 256]);
        for (b, slot) in byte_token.iter_mut().enumerate() {
            let byte = [b as u8];
            *slot = if is_bpe {
                tokens.find(&byte)
            } else {
                tokens
                    .find(format!("<0x{b:02X}>").as_bytes())
                    .or_else(|| tokens.find(&byte))
            };
        }

        Ok(Tokenizer {
            kind,
            tokens,
            scores,
            attrs,
            special,
            eog,
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            clean_spaces,
            byte_token,
            special_cache,
            special_finder: OnceLock::new(),
            span_bound: OnceLock::new(),
        })
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }

    /// The special token ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS / appends EOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// `tokenizer.ggml.add_sep_token` (used by BERT-style models).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }

    /// Whether generation should stop at this token.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The raw text of a token as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&[u8]> {
        ((id as usize) < self.n_vocab()).then(|| self.tokens.get(id))
    }

    /// The id of a token with exactly this text.
    pub fn token_id(&self, text: &[u8]) -> Option<u32> {
        self.tokens.find(text)
    }

    /// llama.cpp's attribute bits of a token ([`attr`]); 0 for ids out of range.
    pub fn token_attr(&self, id: u32) -> u32 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }
}

/// Name-based attribute fix-ups of `llama_vocab::impl::load`: EOT/EOM/FIM
/// and end-of-generation tokens recognised by their text become CONTROL,
/// control tokens named "unused" become UNUSED, and a few model-specific
/// overrides. Returns the sorted end-of-generation ids.
fn fix_up_attrs(tokens: &StrTable, attrs: &mut [u32], sp: &mut SpecialTokens) -> Vec<u32> {
    let find_all = |names: &[&str]| -> Vec<u32> {
        let mut ids: Vec<u32> = names
            .iter()
            .filter_map(|n| tokens.find(n.as_bytes()))
            .collect();
        ids.sort_unstable();
        ids
    };
    // llama.cpp takes the first match in hash-map order, which is not
    // reproducible; we take the lowest id. Only vocabularies holding two of
    // the names of one list can tell the difference.
    let detect = |slot: &mut Option<u32>, names: &[&str], attrs: &mut [u32]| {
        if slot.is_none()
            && let Some(&id) = find_all(names).first()
        {
            *slot = Some(id);
            attrs[id as usize] |= attr::CONTROL;
        }
    };
    detect(
        &mut sp.eot,
        &[
            "<|eot_id|>",
            "<|im_end|>",
            "<|end|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "<|end_of_text|>",
            "<EOT>",
            "_<EOT>",
            "[EOT]",
            "<｜end▁of▁sentence｜>",
            "<end_of_utterance>",
        ],
        attrs,
    );
    detect(&mut sp.eom, &["<|eom_id|>"], attrs);
    detect(
        &mut sp.fim_pre,
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
        attrs,
    );
    detect(
        &mut sp.fim_suf,
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
        attrs,
    );
    detect(
        &mut sp.fim_mid,
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
        attrs,
    );
    detect(
        &mut sp.fim_pad,
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        attrs,
    );
    detect(
        &mut sp.fim_rep,
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        attrs,
    );
    detect(&mut sp.fim_sep, &["<|file_sep|>"], attrs);

    for (id, a) in attrs.iter_mut().enumerate() {
        if *a & attr::CONTROL != 0
            && memchr::memmem::find(tokens.get(id as u32), b"unused").is_some()
        {
            *a |= attr::UNUSED;
        }
    }

    let mut eog: Vec<u32> = [sp.fim_pad, sp.fim_rep, sp.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for id in find_all(&[
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "<｜end▁of▁sentence｜>",
        "[e~[",
    ]) {
        eog.push(id);
        attrs[id as usize] |= attr::CONTROL;
    }
    // gpt-oss: always render these.
    for id in find_all(&["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]) {
        attrs[id as usize] = attr::USER_DEFINED;
    }
    eog.extend([sp.eos, sp.eot, sp.eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();

    let text_of = |id: u32| tokens.get(id);
    let has = |eog: &[u32], t: &[u8]| eog.iter().copied().find(|&id| text_of(id) == t);
    // o200k_harmony / solar-open: "<|end|>" is not end-of-generation there.
    let end = has(&eog, b"<|end|>");
    let call = has(&eog, b"<|call|>").or(has(&eog, b"<|calls|>"));
    if let (Some(end), Some(_)) = (end, call)
        && (has(&eog, b"<|return|>").is_some() || has(&eog, b"<|flush|>").is_some())
    {
        eog.retain(|&id| id != end);
        attrs[end as usize] = attr::USER_DEFINED;
    }
    // gemma4 and plamo have an ordinary "</s>".
    if let Some(s) = has(&eog, b"</s>")
        && (has(&eog, b"<|tool_response>").is_some() || has(&eog, b"<|plamo:eos|>").is_some())
    {
        eog.retain(|&id| id != s);
        attrs[s as usize] = attr::NORMAL;
    }
    eog
}

/// The per-model LSTRIP/RSTRIP attributes llama.cpp sets by name.
fn set_attrs_by_name<D: AsRef<[u8]>>(
    g: &Gguf<D>,
    tokens: &StrTable,
    attrs: &mut [u32],
    cache: &[u32],
) -> Result<()> {
    let name = opt_str(g, "general.name")?
        .unwrap_or("")
        .to_ascii_lowercase();
    let pre = opt_str(g, "tokenizer.ggml.pre")?.unwrap_or("");
    let arch = opt_str(g, "general.architecture")?.unwrap_or("");
    let contains_any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
    let mut set = |text: &str, bit: u32, on: bool| {
        if let Some(id) = tokens.find(text.as_bytes()) {
            let a = &mut attrs[id as usize];
            *a = if on { *a | bit } else { *a & !bit };
        }
    };
    if contains_any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"])
        || contains_any(arch, &["nomic-bert-moe", "jina-bert-v3"])
    {
        set("<mask>", attr::LSTRIP, true);
    } else if contains_any(&name, &["phi-3", "phi3"]) {
        for &id in cache {
            attrs[id as usize] |= attr::RSTRIP;
        }
        let mut set = |text: &str, on: bool| {
            if let Some(id) = tokens.find(text.as_bytes()) {
                let a = &mut attrs[id as usize];
                *a = if on {
                    *a | attr::RSTRIP
                } else {
                    *a & !attr::RSTRIP
                };
            }
        };
        set("</s>", true);
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            set(t, false);
        }
    } else if contains_any(&name, &["modern-bert"]) {
        set("[MASK]", attr::LSTRIP, true);
    }
    Ok(())
}
