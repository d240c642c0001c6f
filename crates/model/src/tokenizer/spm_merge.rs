//! SentencePiece (`tokenizer.ggml.model = "llama"`): llama.cpp's
//! `llm_tokenizer_spm_session`. Starting from single UTF-8 characters, the
//! adjacent pair whose concatenation is the highest-scoring token is merged
//! first (ties: leftmost); what never becomes a token falls back to byte
//! tokens `<0xXX>`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::table::StrTable;
use super::unicode::utf8_len;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    n: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Highest score first, then smallest left index. Scores compare like
    /// C++ floats (NaN and ±0 are "equal"), never panicking.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenize one (already space-escaped) fragment, appending to `out`.
/// `byte_token[b]` is the token for byte `b` (`<0xXX>`, else the byte
/// itself); bytes without one become `unk` if there is one, else nothing
/// (llama.cpp throws there).
pub(crate) fn tokenize(
    tokens: &StrTable,
    scores: &[f32],
    byte_token: &[Option<u32>; 256],
    unk: Option<u32>,
    text: &[u8],
    out: &mut Vec<u32>,
) {
    if text.is_empty() {
        return;
    }
    let mut symbols = Vec::with_capacity(text.len());
    let mut offs = 0;
    while offs < text.len() {
        let n = utf8_len(text[offs]).min(text.len() - offs);
        let idx = symbols.len();
        offs += n;
        symbols.push(Symbol {
            start: offs - n,
            n,
            prev: if idx == 0 { NONE } else { idx - 1 },
            next: if offs == text.len() { NONE } else { idx + 1 },
        });
    }

    let mut queue = BinaryHeap::with_capacity(symbols.len());
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let l = symbols[left];
            let size = l.n + symbols[right].n;
            let piece = &text[l.start..l.start + size];
            if let Some(id) = tokens.find(piece) {
                queue.push(Bigram {
                    left,
                    right,
                    score: scores[id as usize],
                    size,
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        // Stale: one side was merged since this pair was queued.
        if l.n == 0 || r.n == 0 || l.n + r.n != b.size {
            continue;
        }
        symbols[b.left].n += r.n;
        symbols[b.right].n = 0;
        symbols[b.left].next = r.next;
        if r.next != NONE {
            symbols[r.next].prev = b.left;
        }
        try_add(&symbols, &mut queue, l.prev, b.left);
        try_add(&symbols, &mut queue, b.left, r.next);
    }

    // Every merged symbol is a token by construction, so llama.cpp's
    // `rev_merge` re-segmentation only ever reaches single characters that
    // are not tokens: those go out as bytes.
    let mut i = 0;
    while i != NONE {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.n];
        match tokens.find(piece) {
            Some(id) => out.push(id),
            None => {
                for &byte in piece {
                    if let Some(id) = byte_token[usize::from(byte)].or(unk) {
                        out.push(id);
                    }
                }
            }
        }
        i = s.next;
    }
}
