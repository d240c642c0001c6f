//! WordPiece (`tokenizer.ggml.model = "bert"`), following Hugging Face
//! `tokenizers` (BertNormalizer, BertPreTokenizer, WordPiece) rather than
//! llama.cpp where the two differ.
//!
//! The GGUF stores BERT's vocabulary the way convert_hf_to_gguf.py rewrites
//! it: a word-initial piece `foo` becomes `▁foo`, a continuation `##foo`
//! becomes `foo`, control tokens stay as they are.
//!
//! Per text fragment: drop NUL, U+FFFD and control/format/private-use
//! characters, turn whitespace into spaces, put spaces around CJK
//! ideographs, then (where enabled) strip accents (NFD less nonspacing
//! marks) and lowercase; split on whitespace and isolate punctuation; each
//! word of more than 100 characters is `[UNK]`, any other word is cut
//! greedily into the longest pieces, and a word with an uncovered rest is
//! `[UNK]` as a whole.
//!
//! Lowercasing and accent stripping: `tokenizer.ggml.normalizer.lowercase`
//! and `tokenizer.ggml.normalizer.strip_accents` when the file has them
//! (accent stripping defaults to the lowercase setting, as in both
//! references). Files without them get the vocabulary's answer: uncased
//! when lowercasing changes no normal piece (bert-base-uncased has `ℝ` but
//! no letter with a lowercase form), cased otherwise.
//!
//! Where llama.cpp's WordPiece departs from `tokenizers` (we follow
//! `tokenizers`; testdata/tokenizer/README.md lists the corpus strings):
//! * accent stripping drops only nonspacing marks (Mn); llama.cpp drops
//!   every mark, so Devanagari vowel signs (Mc) and the keycap's enclosing
//!   U+20E3 (Me) vanish there;
//! * NFD decomposes Hangul syllables into jamo; llama.cpp's NFD table
//!   leaves them whole;
//! * a word of more than 100 characters is `[UNK]`; llama.cpp has no limit;
//! * lowercasing uses the full Unicode mapping (`İ` becomes `i̇` where
//!   accents are kept); llama.cpp maps one codepoint to one;
//! * `tokenizers`' character tables predate Unicode 16; we follow them
//!   (see `bert_chars`).

use super::bert_chars::{is_chinese, is_punct, is_removed, is_whitespace, strip_accents};
use super::table::StrTable;
use super::trie::Trie;
use super::{TokenizerError, attr};

/// `tokenizers`' WordPiece `max_input_chars_per_word`.
const MAX_WORD_CHARS: usize = 100;

const SPACE_MARK: &[u8] = "\u{2581}".as_bytes();

#[derive(Debug)]
pub(crate) struct Wpm {
    trie: Trie,
    /// The trie node after `▁`: word-initial pieces start there.
    word_start: Option<u32>,
    lowercase: bool,
    strip_accents: bool,
}

impl Wpm {
    /// `lowercase` / `strip_accents` as the file states them, if it does.
    pub fn new(
        tokens: &StrTable,
        attrs: &[u32],
        lowercase: Option<bool>,
        strip_accents: Option<bool>,
    ) -> Result<Wpm, TokenizerError> {
        let is_piece = |id: u32| attrs[id as usize] & (attr::CONTROL | attr::UNKNOWN) == 0;
        let trie = Trie::build(tokens, is_piece);
        let lowercase = lowercase.unwrap_or_else(|| {
            !(0..tokens.len() as u32)
                .filter(|&id| is_piece(id))
                .any(|id| {
                    let text = String::from_utf8_lossy(tokens.get(id));
                    text.chars().any(|c| c.to_lowercase().ne([c]))
                })
        });
        let word_start = trie.walk(Trie::ROOT, SPACE_MARK);
        Ok(Wpm {
            trie,
            word_start,
            lowercase,
            strip_accents: strip_accents.unwrap_or(lowercase),
        })
    }

    /// Tokenize one text fragment, appending to `out`.
    pub fn tokenize(&self, text: &[u8], unk: Option<u32>, out: &mut Vec<u32>) {
        let chars = self.normalize(&String::from_utf8_lossy(text));
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut Vec<u32>| {
            if !word.is_empty() {
                self.word(word, unk, out);
                word.clear();
            }
        };
        for c in chars {
            if c.is_whitespace() {
                flush(&mut word, out);
            } else if is_punct(c) {
                flush(&mut word, out);
                word.push(c);
                flush(&mut word, out);
            } else {
                word.push(c);
            }
        }
        flush(&mut word, out);
    }

    /// BertNormalizer: clean-up, CJK padding, accents, case.
    fn normalize(&self, text: &str) -> Vec<char> {
        let mut chars = Vec::with_capacity(text.len());
        for c in text.chars() {
            if is_removed(c) {
                continue;
            }
            if is_whitespace(c) {
                chars.push(' ');
            } else if is_chinese(c) {
                chars.extend([' ', c, ' ']);
            } else {
                chars.push(c);
            }
        }
        if self.strip_accents {
            strip_accents(&mut chars);
        }
        if self.lowercase {
            chars = chars.into_iter().flat_map(char::to_lowercase).collect();
        }
        chars
    }

    /// WordPiece on one word: greedy longest pieces, `[UNK]` for a word too
    /// long or not covered.
    fn word(&self, word: &str, unk: Option<u32>, out: &mut Vec<u32>) {
        let start_len = out.len();
        let unknown = |out: &mut Vec<u32>| {
            out.truncate(start_len);
            out.extend(unk);
        };
        if word.chars().count() > MAX_WORD_CHARS {
            return unknown(out);
        }
        let bytes = word.as_bytes();
        let mut pos = 0;
        while pos < bytes.len() {
            let from = if pos == 0 {
                self.word_start
            } else {
                Some(Trie::ROOT)
            };
            let mut best = None;
            let mut node = from;
            let mut end = pos;
            while let Some(n) = node {
                if end > pos
                    && word.is_char_boundary(end)
                    && let Some(id) = self.trie.value(n)
                {
                    best = Some((end, id));
                }
                if end == bytes.len() {
                    break;
                }
                node = self.trie.child(n, bytes[end]);
                end += 1;
            }
            match best {
                Some((end, id)) => {
                    out.push(id);
                    pos = end;
                }
                None => return unknown(out),
            }
        }
    }
}
