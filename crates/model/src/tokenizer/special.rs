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
}

/// C's `isspace` in the "C" locale, which llama.cpp uses for (l|r)strip.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Indices into `specials` (already in llama.cpp's order) of the tokens
/// that occur somewhere in `text`, in that same order.
pub(crate) fn present(ac: &AhoCorasick, text: &[u8]) -> Vec<usize> {
    let mut seen: Vec<usize> = ac
        .find_overlapping_iter(text)
        .map(|m| m.pattern().as_usize())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen
}

/// Split `text` on the given special tokens, in order.
pub(crate) fn partition<'a>(
    text: &[u8],
    specials: impl Iterator<Item = Special<'a>>,
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
            while start < end {
                let Some(m) = finder.find(&text[start..end]).map(|p| p + start) else {
                    break;
                };
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
        }
    }

    #[test]
    fn longest_first_order_is_respected() {
        let text = b"xabcdx";
        let f = partition(text, [sp(1, b"bcd"), sp(2, b"ab")].into_iter());
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
    fn strips_spaces_around() {
        let text = b"a  <m>  b";
        let s = Special {
            id: 7,
            text: b"<m>",
            lstrip: true,
            rstrip: true,
        };
        let f = partition(text, [s].into_iter());
        assert_eq!(
            f,
            [
                Fragment::Text { start: 0, end: 1 },
                Fragment::Token(7),
                Fragment::Text { start: 8, end: 9 }
            ]
        );
        let f = partition(b"<m><m>", [sp(3, b"<m>")].into_iter());
        assert_eq!(f, [Fragment::Token(3), Fragment::Token(3)]);
    }
}
