//! Unigram (`tokenizer.ggml.model = "t5"`, XLM-R's SentencePiece model),
//! following Hugging Face `tokenizers` as transformers' XLM-R conversion
//! sets it up: the Precompiled normalizer (SentencePiece's charsmap), then
//! right-strip and `" {2,}"` -> `▁` (where `remove_extra_whitespaces`),
//! Metaspace (spaces become `▁`, a `▁` is prepended when
//! `add_space_prefix`, words start at each `▁`) and Viterbi per word with
//! unknown characters fused into one `<unk>`.
//!
//! Where llama.cpp's Unigram departs from `tokenizers` (we follow
//! `tokenizers`):
//! * the charsmap is applied per grapheme cluster: a cluster shorter than
//!   6 bytes is replaced whole by the mapping of its *shortest* mapped
//!   prefix (so `o` + U+0308 + U+0304 becomes `ö`); llama.cpp maps the
//!   longest prefix byte-wise;
//! * Viterbi runs per `▁`-word instead of over the whole text;
//! * the trie holds normal, user-defined and unused pieces, as llama.cpp's
//!   does (`tokenizers` also has the control pieces, which only special-token
//!   matching can produce).
//!
//! One difference from `tokenizers` comes from the file, not the algorithm:
//! convert_hf_to_gguf.py writes XLM-R's `<mask>` as a `[PAD…]` filler, so
//! "<mask>" in a text is ordinary text here and in llama.cpp.
//!
//! A charsmap index that points outside the blob is treated as "no mapping"
//! (llama.cpp throws, `tokenizers` panics); a blob whose declared sizes do
//! not fit, or whose replacement strings are not UTF-8, is refused at load.

use unicode_segmentation::UnicodeSegmentation;

use super::table::StrTable;
use super::trie::Trie;
use super::{TokenizerError, attr};

/// SentencePiece's penalty on an unknown character's score.
const UNK_PENALTY: f64 = 10.0;

const SPACE_MARK: char = '\u{2581}';

/// SentencePiece's precompiled normalization map: a double-array trie over
/// input bytes whose leaves point at NUL-terminated replacement strings.
#[derive(Debug, Default)]
struct Charsmap {
    xcda: Vec<u32>,
    replacements: String,
}

impl Charsmap {
    fn parse(blob: &[u8]) -> Result<Charsmap, TokenizerError> {
        let bad = |what: String| TokenizerError::BadCharsmap(what);
        if blob.is_empty() {
            return Ok(Charsmap::default());
        }
        let Some(head) = blob.get(..4) else {
            return Err(bad(format!("{} bytes, too short for its size", blob.len())));
        };
        let size = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let rest = &blob[4..];
        if size > rest.len() || !size.is_multiple_of(4) {
            return Err(bad(format!(
                "trie size {size} does not fit the {} bytes that follow",
                rest.len()
            )));
        }
        let xcda = rest[..size]
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let replacements = String::from_utf8(rest[size..].to_vec())
            .map_err(|e| bad(format!("replacement strings are not UTF-8: {e}")))?;
        Ok(Charsmap { xcda, replacements })
    }

    /// The replacement of the shortest prefix of `key` the map has
    /// (`spm_precompiled`'s `transform`).
    fn transform(&self, key: &[u8]) -> Option<&str> {
        let unit = |i: usize| self.xcda.get(i).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let mut node = offset(unit(0)?);
        for &c in key {
            if c == 0 {
                return None;
            }
            node ^= usize::from(c);
            let u = unit(node)?;
            if u & ((1 << 31) | 0xFF) != u32::from(c) {
                return None;
            }
            node ^= offset(u);
            if (u >> 8) & 1 == 1 {
                let start = (unit(node)? & ((1 << 31) - 1)) as usize;
                let tail = self.replacements.get(start..)?;
                return Some(&tail[..tail.find('\0').unwrap_or(tail.len())]);
            }
        }
        None
    }
}

#[derive(Debug)]
pub(crate) struct Ugm {
    trie: Trie,
    charsmap: Charsmap,
    unk_score: f64,
    add_space_prefix: bool,
    remove_extra_whitespaces: bool,
}

impl Ugm {
    pub fn new(
        tokens: &StrTable,
        attrs: &[u32],
        scores: &[f32],
        charsmap: &[u8],
        add_space_prefix: bool,
        remove_extra_whitespaces: bool,
    ) -> Result<Ugm, TokenizerError> {
        let piece = attr::NORMAL | attr::USER_DEFINED | attr::UNUSED;
        let trie = Trie::build(tokens, |id| attrs[id as usize] & piece != 0);
        let min_score = (0..tokens.len())
            .filter(|&i| attrs[i] & attr::NORMAL != 0)
            .map(|i| f64::from(scores[i]))
            .fold(f64::from(f32::MAX), f64::min);
        Ok(Ugm {
            trie,
            charsmap: Charsmap::parse(charsmap)?,
            unk_score: min_score - UNK_PENALTY,
            add_space_prefix,
            remove_extra_whitespaces,
        })
    }

    /// Tokenize one text fragment, appending to `out`.
    pub fn tokenize(
        &self,
        text: &[u8],
        scores: &[f32],
        attrs: &[u32],
        unk: Option<u32>,
        out: &mut Vec<u32>,
    ) {
        let normalized = self.normalize(&String::from_utf8_lossy(text));
        let mut start = 0;
        for (i, _) in normalized.match_indices(SPACE_MARK) {
            if i > start {
                self.viterbi(&normalized[start..i], scores, attrs, unk, out);
            }
            start = i;
        }
        if start < normalized.len() {
            self.viterbi(&normalized[start..], scores, attrs, unk, out);
        }
    }

    /// Precompiled, Strip, Replace and Metaspace's replacement and prefix.
    fn normalize(&self, text: &str) -> String {
        let mut s = String::with_capacity(text.len() + 3);
        let mut buf = [0u8; 4];
        for g in text.graphemes(true) {
            if g.len() < 6
                && let Some(r) = self.charsmap.transform(g.as_bytes())
            {
                s.push_str(r);
                continue;
            }
            for c in g.chars() {
                match self.charsmap.transform(c.encode_utf8(&mut buf).as_bytes()) {
                    Some(r) => s.push_str(r),
                    None => s.push(c),
                }
            }
        }
        let mut out = String::with_capacity(s.len() + 3);
        if self.remove_extra_whitespaces {
            let trimmed = s.trim_end();
            let mut spaces = 0;
            for c in trimmed.chars() {
                if c == ' ' {
                    spaces += 1;
                    continue;
                }
                // One space and a run of them both become a single `▁`.
                if spaces > 0 {
                    out.push(SPACE_MARK);
                }
                spaces = 0;
                out.push(c);
            }
        } else {
            out.extend(s.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));
        }
        if self.add_space_prefix && !out.is_empty() && !out.starts_with(SPACE_MARK) {
            out.insert(0, SPACE_MARK);
        }
        out
    }

    /// The best-scoring segmentation of one word (`tokenizers`'
    /// `encode_optimized`), consecutive unknown characters fused.
    fn viterbi(
        &self,
        word: &str,
        scores: &[f32],
        attrs: &[u32],
        unk: Option<u32>,
        out: &mut Vec<u32>,
    ) {
        let bytes = word.as_bytes();
        let n = bytes.len();
        // Per end position: (score, start, token; None = unknown), if reached.
        let mut best: Vec<Option<(f64, usize, Option<u32>)>> = vec![None; n + 1];
        best[0] = Some((0.0, 0, None));
        let mut pos = 0;
        while pos < n {
            let char_len = word[pos..].chars().next().map_or(1, char::len_utf8);
            let Some((here, _, _)) = best[pos] else {
                pos += char_len;
                continue;
            };
            let mut single = false;
            let mut node = Some(Trie::ROOT);
            let mut end = pos;
            while end < n {
                node = node.and_then(|nd| self.trie.child(nd, bytes[end]));
                end += 1;
                let Some(nd) = node else { break };
                let Some(id) = self.trie.value(nd) else {
                    continue;
                };
                if !word.is_char_boundary(end) {
                    continue;
                }
                let score = if attrs[id as usize] & attr::USER_DEFINED != 0 {
                    0.0
                } else {
                    f64::from(scores[id as usize])
                };
                let cand = here + score;
                if best[end].is_none_or(|(s, _, _)| cand > s) {
                    best[end] = Some((cand, pos, Some(id)));
                }
                single |= end - pos == char_len;
            }
            if !single {
                let end = pos + char_len;
                let cand = here + self.unk_score;
                if best[end].is_none_or(|(s, _, _)| cand > s) {
                    best[end] = Some((cand, pos, None));
                }
            }
            pos += char_len;
        }
        let first = out.len();
        let mut end = n;
        let mut prev_unknown = false;
        while end > 0 {
            let Some((_, start, id)) = best[end] else {
                break;
            };
            match id {
                Some(id) => out.push(id),
                None if !prev_unknown => out.extend(unk),
                None => {}
            }
            prev_unknown = id.is_none();
            end = start;
        }
        out[first..].reverse();
    }
}
