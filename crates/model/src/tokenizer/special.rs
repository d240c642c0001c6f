//! `tokenizer_st_partition`: cut the raw text on special tokens before any
//! model-specific tokenization.
//!
//! llama.cpp takes the special tokens longest first and, for each, splits
//! every remaining text fragment at all its occurrences. Doing that for all
//! 6k+ special tokens of Gemma would cost a scan per token, so an
//! Aho-Corasick pass first finds which special tokens occur in the text at
//! all; only those run the exact llama.cpp procedure (a token absent from the
//! text is absent from every fragment of it).

use aho_corasick::AhoCorasick;
use memchr::memmem;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// `text[start..end]`.
    Text {
        start: usize,
        end: usize,
    },
    Token(u32),
}

/// A special token as the partition needs it.
pub(crate) struct Special<'a> {
    pub id: u32,
    pub text: &'a [u8],
    pub lstrip: bool,
    pub rstrip: bool,
    /// Not recognised inside the [`Guard`] ranges (control tokens).
    pub guarded: bool,
}

/// C's `isspace` in the "C" locale, which llama.cpp uses for (l|r)strip.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Indices into `specials` (already in llama.cpp's order) of the tokens
/// that occur somewhere in `text`, in that same order.
///
/// A whitespace run can end a match of dozens of nested whitespace tokens
/// at every byte, so matches are folded into a bitset as they stream by
/// instead of being collected.
pub(crate) fn present(ac: &AhoCorasick, text: &[u8]) -> Vec<usize> {
    let n = ac.patterns_len();
    let mut seen = vec![0u64; n.div_ceil(64)];
    let mut count = 0;
    for m in ac.find_overlapping_iter(text) {
        let i = m.pattern().as_usize();
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if seen[word] & bit == 0 {
            seen[word] |= bit;
            count += 1;
            if count == n {
                break;
            }
        }
    }
    (0..n)
        .filter(|&i| seen[i / 64] & (1u64 << (i % 64)) != 0)
        .collect()
}

/// Byte ranges of the text (sorted, disjoint) in which `guarded` special
/// tokens are not recognised: message content a chat template placed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Guard<'r> {
    pub ranges: &'r [(usize, usize)],
}

impl Guard<'_> {
    /// Where to resume searching if a match `[m, m + len)` overlaps a
    /// range: its end (every later match starting inside it overlaps too).
    fn blocked(&self, m: usize, len: usize) -> Option<usize> {
        let i = self.ranges.partition_point(|&(_, end)| end <= m);
        let &(start, end) = self.ranges.get(i)?;
        (start < m + len).then_some(end)
    }
}

/// Split `text` on the given special tokens, in order.
pub(crate) fn partition<'a>(
    text: &[u8],
    specials: impl Iterator<Item = Special<'a>>,
    guard: Guard<'_>,
) -> Vec<Fragment> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text {
        start: 0,
        end: text.len(),
    });
    for sp in specials {
        if sp.text.is_empty() {
            continue;
        }
        let finder = memmem::Finder::new(sp.text);
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in frags {
            let Fragment::Text { mut start, end } = f else {
                next.push(f);
                continue;
            };
            let mut from = start;
            while from < end {
                let Some(m) = finder.find(&text[from..end]).map(|p| p + from) else {
                    break;
                };
                if sp.guarded
                    && let Some(resume) = guard.blocked(m, sp.text.len())
                {
                    from = resume;
                    continue;
                }
                let mut left_end = m;
                if sp.lstrip {
                    while left_end > start && is_c_space(text[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > start {
                    next.push(Fragment::Text {
                        start,
                        end: left_end,
                    });
                }
                next.push(Fragment::Token(sp.id));
                start = m + sp.text.len();
                if sp.rstrip {
                    while start < end && is_c_space(text[start]) {
                        start += 1;
                    }
                }
                from = start;
            }
            if start < end {
                next.push(Fragment::Text { start, end });
            }
        }
        frags = next;
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(id: u32, text: &[u8]) -> Special<'_> {
        Special {
            id,
            text,
            lstrip: false,
            rstrip: false,
            guarded: false,
        }
    }

    #[test]
    fn longest_first_order_is_respected() {
        let text = b"xabcdx";
        let f = partition(
            text,
            [sp(1, b"bcd"), sp(2, b"ab")].into_iter(),
            Guard::default(),
        );
        assert_eq!(
            f,
            [
                Fragment::Text { start: 0, end: 2 },
                Fragment::Token(1),
                Fragment::Text { start: 5, end: 6 }
            ]
        );
    }

    #[test]
    fn guarded_tokens_are_text_inside_the_ranges() {
        let text = b"<m>a<m><u>b<m>";
        let ranges = [(3, 10)];
        let guard = Guard { ranges: &ranges };
        let specials = || {
            [
                Special {
                    guarded: true,
                    ..sp(1, b"<m>")
                },
                sp(2, b"<u>"),
            ]
            .into_iter()
        };
        let f = partition(text, specials(), guard);
        assert_eq!(
            f,
            [
                Fragment::Token(1),
                Fragment::Text { start: 3, end: 7 },
                Fragment::Token(2),
                Fragment::Text { start: 10, end: 11 },
                Fragment::Token(1),
            ]
        );
        // A match only overlapping a range is blocked too.
        let ranges = [(0, 1)];
        let f = partition(b"<m>", specials(), Guard { ranges: &ranges });
        assert_eq!(f, [Fragment::Text { start: 0, end: 3 }]);
        assert_eq!(partition(text, specials(), Guard::default()).len(), 6);
    }

    #[test]
    fn strips_spaces_around() {
        let text = b"a  <m>  b";
        let s = Special {
            id: 7,
            text: b"<m>",
            lstrip: true,
            rstrip: true,
            guarded: false,
        };
        let f = partition(text, [s].into_iter(), Guard::default());
        assert_eq!(
            f,
            [
                Fragment::Text { start: 0, end: 1 },
                Fragment::Token(7),
                Fragment::Text { start: 8, end: 9 }
            ]
        );
        let f = partition(b"<m><m>", [sp(3, b"<m>")].into_iter(), Guard::default());
        assert_eq!(f, [Fragment::Token(3), Fragment::Token(3)]);
    }
}
