//! `llama_tokenize`: the special-token partition, then SentencePiece or BPE
//! on each text fragment; with an optional token limit that stops early,
//! and optional byte ranges in which control tokens are not recognised.

use aho_corasick::AhoCorasick;

use super::special::{self, Fragment, Guard};
use super::unicode::{BYTE_TO_CPT, push_utf8};
use super::{Kind, Tokenizer, attr, bpe, pretok, spm_merge};
use crate::ModelError;

/// SentencePiece's escaped space.
const SPACE_MARK: &[u8] = "\u{2581}".as_bytes();

impl Tokenizer {
    /// `llama_tokenize(text, add_special, parse_special)`.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        self.encode_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// [`Tokenizer::encode`] for text that need not be valid UTF-8.
    pub fn encode_bytes(&self, text: &[u8], add_special: bool, parse_special: bool) -> Vec<u32> {
        // Without a limit the encoder never stops early, so `Err` cannot occur.
        self.encode_limited(
            text,
            add_special,
            parse_special,
            usize::MAX,
            Guard::default(),
        )
        .unwrap_or_default()
    }

    /// [`Tokenizer::encode`] refusing text that needs more than `max_tokens`
    /// tokens: before tokenizing where the byte length alone proves it,
    /// otherwise as soon as the count (or a lower bound of the rest) passes
    /// the limit. The error is [`ModelError::ContextExceeded`] with the
    /// exact count, or with `at_least` set when encoding stopped early.
    pub fn encode_within(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        max_tokens: usize,
    ) -> Result<Vec<u32>, ModelError> {
        self.encode_guarded_within(text.as_bytes(), add_special, parse_special, max_tokens, &[])
    }

    /// [`Tokenizer::encode_within`] with byte ranges of `text` (sorted,
    /// disjoint) in which control and unknown tokens are not recognised,
    /// as if that part were encoded with `parse_special = false`.
    pub(crate) fn encode_guarded_within(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        max_tokens: usize,
        guarded: &[(usize, usize)],
    ) -> Result<Vec<u32>, ModelError> {
        let exceeded = |n_tokens, at_least| ModelError::ContextExceeded {
            n_tokens,
            n_ctx: max_tokens,
            at_least,
        };
        let guard = Guard { ranges: guarded };
        let ids = self
            .encode_limited(text, add_special, parse_special, max_tokens, guard)
            .map_err(|at_least| exceeded(at_least, true))?;
        if ids.len() > max_tokens {
            return Err(exceeded(ids.len(), false));
        }
        Ok(ids)
    }

    /// The tokens `add_special` puts first and last: BOS and EOS as the
    /// file says, except that WordPiece always adds BOS and SEP (llama.cpp).
    pub(crate) fn added_ids(&self, add_special: bool) -> (Option<u32>, Option<u32>) {
        match (&self.kind, add_special) {
            (_, false) => (None, None),
            (Kind::Wpm(_), true) => (self.special.bos, self.special.sep),
            (_, true) => (
                self.special.bos.filter(|_| self.add_bos),
                self.special.eos.filter(|_| self.add_eos),
            ),
        }
    }

    /// The encoder; `Err(n)` when it stopped because the text needs at
    /// least `n > max_tokens` tokens.
    fn encode_limited(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        max_tokens: usize,
        guard: Guard<'_>,
    ) -> Result<Vec<u32>, usize> {
        let (first, last) = self.added_ids(add_special);
        let (n_bos, n_eos) = (usize::from(first.is_some()), usize::from(last.is_some()));
        let limited = max_tokens != usize::MAX;
        let bound = if limited { self.span_bound() } else { None };
        // Lower bound of the tokens a piece of the input gives.
        let at_least = |piece: &[u8]| bound.map_or(0, |b| b.at_least(piece));
        if limited && n_bos + n_eos + at_least(text) > max_tokens {
            return Err(n_bos + n_eos + at_least(text));
        }

        let fragments = self.partition(text, parse_special, guard);
        // Lower bound of what the fragments not yet encoded give.
        let frag_bound = |f: &Fragment| match *f {
            Fragment::Token(_) => 1,
            Fragment::Text { start, end } => at_least(&text[start..end]),
        };
        let mut rest: usize = if limited {
            fragments.iter().map(frag_bound).sum::<usize>() + n_eos
        } else {
            0
        };
        let mut out = Vec::with_capacity((text.len() / 3 + 2).min(max_tokens.saturating_add(1)));
        out.extend(first);
        let check = |out: &Vec<u32>, rest: usize| {
            let n = out.len().saturating_add(rest);
            if limited && n > max_tokens {
                Err(n)
            } else {
                Ok(())
            }
        };
        check(&out, rest)?;
        match &self.kind {
            Kind::Spm => {
                // A space is prefixed to the first fragment and to any that
                // follows a special token.
                let mut prev_special = true;
                let mut buf = Vec::new();
                for f in fragments {
                    rest -= if limited { frag_bound(&f) } else { 0 };
                    match f {
                        Fragment::Text { start, end } => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.extend_from_slice(SPACE_MARK);
                            }
                            for &b in &text[start..end] {
                                if b == b' ' {
                                    buf.extend_from_slice(SPACE_MARK);
                                } else {
                                    buf.push(b);
                                }
                            }
                            spm_merge::tokenize(
                                &self.tokens,
                                &self.scores,
                                &self.byte_token,
                                self.special.unk,
                                &buf,
                                &mut out,
                            );
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                    check(&out, rest)?;
                }
            }
            Kind::Wpm(wpm) => {
                for f in fragments {
                    rest -= if limited { frag_bound(&f) } else { 0 };
                    match f {
                        Fragment::Text { start, end } => {
                            wpm.tokenize(&text[start..end], self.special.unk, &mut out);
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                    check(&out, rest)?;
                }
            }
            Kind::Ugm(ugm) => {
                for f in fragments {
                    rest -= if limited { frag_bound(&f) } else { 0 };
                    match f {
                        Fragment::Text { start, end } => ugm.tokenize(
                            &text[start..end],
                            &self.scores,
                            &self.attrs,
                            self.special.unk,
                            &mut out,
                        ),
                        Fragment::Token(id) => out.push(id),
                    }
                    check(&out, rest)?;
                }
            }
            Kind::Bpe {
                merges,
                splitters,
                ignore_merges,
            } => {
                let bpe = bpe::Bpe {
                    tokens: &self.tokens,
                    merges,
                    ignore_merges: *ignore_merges,
                    byte_token: &self.byte_token,
                };
                let mut session = bpe::Session::default();
                for f in fragments {
                    rest -= if limited { frag_bound(&f) } else { 0 };
                    match f {
                        Fragment::Text { start, end } => {
                            let words = pretok::split(&text[start..end], splitters);
                            for word in words.iter() {
                                bpe.word(&mut session, word, &mut out);
                                check(&out, rest)?;
                            }
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                    check(&out, rest)?;
                }
            }
        }
        out.extend(last);
        Ok(out)
    }

    /// Cut `text` on the special tokens that apply: all of them with
    /// `parse_special`, else only USER_DEFINED ones (as llama.cpp does);
    /// control and unknown tokens are not recognised inside `guard`.
    fn partition(&self, text: &[u8], parse_special: bool, guard: Guard<'_>) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        let present: Vec<usize> = match self.special_finder() {
            Some(ac) => special::present(ac, text),
            None => (0..self.special_cache.len()).collect(),
        };
        let specials = present
            .into_iter()
            .map(|i| self.special_cache[i])
            .filter(|&id| {
                parse_special || self.attrs[id as usize] & (attr::CONTROL | attr::UNKNOWN) == 0
            })
            .map(|id| {
                let a = self.attrs[id as usize];
                special::Special {
                    id,
                    text: self.tokens.get(id),
                    lstrip: a & attr::LSTRIP != 0,
                    rstrip: a & attr::RSTRIP != 0,
                    guarded: a & (attr::CONTROL | attr::UNKNOWN) != 0,
                }
            });
        special::partition(text, specials, guard)
    }

    fn special_finder(&self) -> Option<&AhoCorasick> {
        self.special_finder
            .get_or_init(|| {
                AhoCorasick::new(self.special_cache.iter().map(|&id| self.tokens.get(id))).ok()
            })
            .as_ref()
    }

    /// Whether `text` holds the text of a control or unknown token (which
    /// `parse_special` would turn into that token).
    pub(crate) fn has_control_text(&self, text: &[u8]) -> bool {
        let is_control = |id: u32| self.attrs[id as usize] & (attr::CONTROL | attr::UNKNOWN) != 0;
        match self.special_finder() {
            Some(ac) => special::present(ac, text)
                .into_iter()
                .any(|i| is_control(self.special_cache[i])),
            None => self.special_cache.iter().any(|&id| {
                is_control(id) && memchr::memmem::find(text, self.tokens.get(id)).is_some()
            }),
        }
    }

    /// A lower bound of the token count from the input bytes, or `None`
    /// where the vocabulary allows none ([`SpanBound`]); computed once.
    pub(crate) fn span_bound(&self) -> Option<SpanBound> {
        *self.span_bound.get_or_init(|| self.compute_span_bound())
    }

    fn compute_span_bound(&self) -> Option<SpanBound> {
        let strips = self
            .special_cache
            .iter()
            .any(|&id| self.attrs[id as usize] & (attr::LSTRIP | attr::RSTRIP) != 0);
        if strips {
            return None;
        }
        let ids = 0..self.tokens.len() as u32;
        let mut covered = [true; 256];
        let span = match &self.kind {
            // Normalization drops characters, so bytes bound nothing.
            Kind::Wpm(_) | Kind::Ugm(_) => return None,
            Kind::Spm => {
                let all_bytes = self.byte_token.iter().all(Option::is_some);
                if !all_bytes && self.special.unk.is_none() {
                    return None;
                }
                ids.map(|id| self.tokens.get(id).len()).max()?
            }
            Kind::Bpe { merges, .. } => {
                if merges.joined().any(|m| self.tokens.find(m).is_none()) {
                    return None;
                }
                let mut sym = Vec::with_capacity(2);
                for (b, c) in covered.iter_mut().zip(BYTE_TO_CPT) {
                    sym.clear();
                    push_utf8(&mut sym, c);
                    *b = self.tokens.find(&sym).is_some();
                }
                let cpts = |t: &[u8]| t.iter().filter(|&&b| b & 0xC0 != 0x80).count();
                let normal = ids.map(|id| cpts(self.tokens.get(id))).max()?;
                let special = self
                    .special_cache
                    .iter()
                    .map(|&id| self.tokens.get(id).len())
                    .max()
                    .unwrap_or(0);
                normal.max(special)
            }
        };
        Some(SpanBound {
            span: span.max(1),
            all_covered: covered.iter().all(|&c| c),
            covered,
        })
    }
}

/// How few tokens a piece of input can become.
///
/// The tokens of an encoding cover the input bytes left to right without
/// gaps; every *covered* byte lies under at least one token, provided no
/// special token swallows unbounded whitespace (LSTRIP/RSTRIP: such a
/// vocabulary has no bound). One token lies over at most `span` bytes, so
/// `tokens >= ceil(covered bytes / span)`. Per token kind:
/// * a special token cut out by the partition lies over exactly its text;
/// * SentencePiece: input spaces become the 3-byte "▁" and every other byte
///   stays one byte, and the "▁" prefixed to a fragment stands for no
///   input, so a token matched in the escaped text lies over at most its
///   own byte length; a character that is no token goes out as one byte
///   token (or unknown token) per byte, so every byte is covered when each
///   has a byte token or there is an unknown token (else: no bound);
/// * BPE: every input byte becomes one codepoint of the byte-encoded word,
///   so a token lies over at most its codepoint count. A final symbol that
///   is no token falls back to single-byte tokens that may not exist and
///   vanishes; when every merge result is a token (else: no bound), only a
///   lone symbol of a byte whose codepoint is no token can vanish, so the
///   other bytes are covered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpanBound {
    span: usize,
    covered: [bool; 256],
    all_covered: bool,
}

impl SpanBound {
    fn at_least(&self, piece: &[u8]) -> usize {
        let n = if self.all_covered {
            piece.len()
        } else {
            piece
                .iter()
                .filter(|&&b| self.covered[usize::from(b)])
                .count()
        };
        n.div_ceil(self.span)
    }
}
