//! Query-document pairs framed the way the model's own Hugging Face
//! post-processor frames them (cross-encoders score such pairs).

use super::{Kind, Tokenizer};

/// How a pair is laid out: `start`, the first text's tokens, `middle`, the
/// second text's tokens, `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairTemplate {
    pub start: Vec<u32>,
    pub middle: Vec<u32>,
    pub end: Vec<u32>,
    /// Whether the tokens from the second text on have token type 1
    /// (BERT); otherwise every token has type 0.
    pub b_type_one: bool,
}

impl Tokenizer {
    /// The pair layout: BERT's TemplateProcessing `[CLS] A [SEP] B [SEP]`
    /// (B and its `[SEP]` of type 1) for WordPiece, RoBERTa's `<s> A </s>
    /// </s> B </s>` for Unigram, and llama-server's rerank format (`BOS A
    /// EOS SEP B EOS`, each where the file adds it) otherwise.
    pub fn pair_template(&self) -> PairTemplate {
        let sp = &self.special;
        match self.kind {
            Kind::Wpm(_) => PairTemplate {
                start: sp.bos.into_iter().collect(),
                middle: sp.sep.into_iter().collect(),
                end: sp.sep.into_iter().collect(),
                b_type_one: true,
            },
            Kind::Ugm(_) => PairTemplate {
                start: sp.bos.into_iter().collect(),
                middle: [sp.eos, sp.eos].into_iter().flatten().collect(),
                end: sp.eos.into_iter().collect(),
                b_type_one: false,
            },
            _ => {
                let eos = sp.eos.or(sp.sep).filter(|_| self.add_eos);
                PairTemplate {
                    start: sp.bos.filter(|_| self.add_bos).into_iter().collect(),
                    middle: [eos, sp.sep.filter(|_| self.add_sep)]
                        .into_iter()
                        .flatten()
                        .collect(),
                    end: eos.into_iter().collect(),
                    b_type_one: false,
                }
            }
        }
    }

    /// A pair's ids (special tokens in the texts parsed, as Hugging Face
    /// does) and where token type 1 starts: after the first `[SEP]` for
    /// BERT, the length of the ids where every token has type 0.
    pub fn encode_pair(&self, a: &str, b: &str) -> (Vec<u32>, usize) {
        let t = self.pair_template();
        let a = self.encode(a, false, true);
        let b = self.encode(b, false, true);
        let mut ids = Vec::with_capacity(t.start.len() + a.len() + t.middle.len() + b.len() + 1);
        ids.extend(t.start);
        ids.extend(a);
        ids.extend(t.middle);
        let b_from = ids.len();
        ids.extend(b);
        ids.extend(t.end);
        let segment_b = if t.b_type_one { b_from } else { ids.len() };
        (ids, segment_b)
    }
}
