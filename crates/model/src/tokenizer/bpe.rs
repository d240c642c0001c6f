//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): llama.cpp's
//! `llm_tokenizer_bpe_session`. Each pre-tokenized word is GPT-2
//! byte-encoded, then adjacent symbols are merged lowest merge rank first
//! (ties: leftmost).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::table::{MergeTable, StrTable};
use super::unicode::{BYTE_TO_CPT, push_utf8, utf8_len};

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    n: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

#[derive(PartialEq, Eq)]
struct Bigram {
    left: usize,
    right: usize,
    rank: u32,
    size: usize,
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// BinaryHeap pops the greatest: lowest rank, then smallest left.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Reusable buffers of one encode call.
#[derive(Default)]
pub(crate) struct Session {
    word: Vec<u8>,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

pub(crate) struct Bpe<'a> {
    pub tokens: &'a StrTable,
    pub merges: &'a MergeTable,
    pub ignore_merges: bool,
    /// Token of each single-byte string, for symbols that are not tokens.
    pub byte_token: &'a [Option<u32>; 256],
}

impl Bpe<'_> {
    /// Encode one pre-tokenized word (codepoints), appending to `out`.
    pub fn word(&self, s: &mut Session, cpts: &[u32], out: &mut Vec<u32>) {
        // GPT-2 byte encoding: every UTF-8 byte becomes one codepoint.
        s.word.clear();
        let mut utf8 = Vec::with_capacity(4);
        for &c in cpts {
            utf8.clear();
            push_utf8(&mut utf8, c);
            for &b in &utf8 {
                push_utf8(&mut s.word, BYTE_TO_CPT[usize::from(b)]);
            }
        }
        let word = &s.word[..];
        if word.is_empty() {
            return;
        }
        if self.ignore_merges
            && let Some(id) = self.tokens.find(word)
        {
            out.push(id);
            return;
        }

        s.symbols.clear();
        s.queue.clear();
        let mut offs = 0;
        while offs < word.len() {
            let n = utf8_len(word[offs]).min(word.len() - offs);
            let idx = s.symbols.len();
            offs += n;
            s.symbols.push(Symbol {
                start: offs - n,
                n,
                prev: if idx == 0 { NONE } else { idx - 1 },
                next: if offs == word.len() { NONE } else { idx + 1 },
            });
        }
        let add =
            |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
                if left == NONE || right == NONE {
                    return;
                }
                let (l, r) = (symbols[left], symbols[right]);
                let lt = &word[l.start..l.start + l.n];
                let rt = &word[r.start..r.start + r.n];
                if let Some(rank) = self.merges.rank(lt, rt) {
                    queue.push(Bigram {
                        left,
                        right,
                        rank,
                        size: l.n + r.n,
                    });
                }
            };
        for i in 1..s.symbols.len() {
            add(&s.symbols, &mut s.queue, i - 1, i);
        }
        while let Some(b) = s.queue.pop() {
            let (l, r) = (s.symbols[b.left], s.symbols[b.right]);
            // llama.cpp compares left+right with the queued text; symbols
            // only grow, so equal sizes mean both sides are unchanged.
            if l.n == 0 || r.n == 0 || l.n + r.n != b.size {
                continue;
            }
            s.symbols[b.left].n += r.n;
            s.symbols[b.right].n = 0;
            s.symbols[b.left].next = r.next;
            if r.next != NONE {
                s.symbols[r.next].prev = b.left;
            }
            add(&s.symbols, &mut s.queue, l.prev, b.left);
            add(&s.symbols, &mut s.queue, b.left, r.next);
        }

        for sym in s.symbols.iter().filter(|sym| sym.n > 0) {
            let piece = &word[sym.start..sym.start + sym.n];
            match self.tokens.find(piece) {
                Some(id) => out.push(id),
                None => {
                    // Single bytes of the encoded text that are tokens; the
                    // rest is dropped, as llama.cpp does.
                    out.extend(
                        piece
                            .iter()
                            .filter_map(|&b| self.byte_token[usize::from(b)]),
                    );
                }
            }
        }
    }
}
