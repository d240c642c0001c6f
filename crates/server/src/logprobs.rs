//! Token log-probabilities: the model's log-softmax over the raw logits
//! (before temperature, top-k, top-p and penalties, as OpenAI documents),
//! computed by the generation worker only for requests that ask, and their
//! OpenAI shapes: chat's `{"content": [...]}` and the legacy completions'
//! `{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`.

use lamina_model::tokenizer::Tokenizer;
use serde_json::{Map, Value, json};

/// Most alternatives a chat request may ask for (`top_logprobs`).
pub const MAX_TOP_CHAT: usize = 20;
/// Most alternatives a completions request may ask for (`logprobs`).
pub const MAX_TOP_COMPLETIONS: usize = 5;

/// One token with its log-probability.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// The token's text: its bytes, lossily decoded when they are not whole
    /// UTF-8 characters on their own.
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f64,
}

/// A sampled token and the most likely tokens at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub sampled: Piece,
    /// Most likely first; as many as the request asked for.
    pub top: Vec<Piece>,
}

fn piece(tok: &Tokenizer, id: u32, logprob: f64) -> Piece {
    // Control tokens are spelt out (an end-of-generation token shows as
    // `<|im_end|>`, not as nothing), as llama-server reports them.
    let bytes = tok.token_to_piece(id, true);
    Piece {
        token: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
        logprob,
    }
}

/// The log-probability of `id` and of the `k` most likely tokens under
/// `logits`; ties rank the lower id first. Works in f64 after subtracting
/// the largest logit, so no exponential overflows.
pub fn compute(logits: &[f32], id: u32, k: usize, tok: &Tokenizer) -> TokenLogprobs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .map(|&x| (f64::from(x) - f64::from(max)).exp())
        .sum();
    let lse = f64::from(max) + sum.ln();
    let lp = |i: u32| {
        logits
            .get(i as usize)
            .map_or(f64::NEG_INFINITY, |&x| f64::from(x) - lse)
    };
    let (best, n) = top_k(logits, k);
    TokenLogprobs {
        sampled: piece(tok, id, lp(id)),
        top: best[..n]
            .iter()
            .map(|&(_, i)| piece(tok, i, lp(i)))
            .collect(),
    }
}

/// The `k` (at most [`MAX_TOP_CHAT`]) largest logits and their ids, largest
/// first, kept in a fixed array so a token costs no allocation.
fn top_k(logits: &[f32], k: usize) -> ([(f32, u32); MAX_TOP_CHAT], usize) {
    let k = k.min(MAX_TOP_CHAT).min(logits.len());
    let mut best = [(f32::NEG_INFINITY, u32::MAX); MAX_TOP_CHAT];
    let mut n = 0;
    for (i, &x) in logits.iter().enumerate() {
        // NaN never enters; equal logits keep the lower id first.
        if k == 0 || x.is_nan() || (n == k && x <= best[k - 1].0) {
            continue;
        }
        let mut at = n.min(k - 1);
        best[at] = (x, i as u32);
        while at > 0 && best[at].0 > best[at - 1].0 {
            best.swap(at, at - 1);
            at -= 1;
        }
        n = (n + 1).min(k);
    }
    (best, n)
}

/// A JSON number; a non-finite log-probability (a token the model rules
/// out entirely) is written as OpenAI's floor rather than as `null`.
fn number(x: f64) -> Value {
    json!(if x.is_finite() { x } else { -9999.0 })
}

/// Chat's `logprobs` object for `entries`.
pub fn chat(entries: &[TokenLogprobs]) -> Value {
    let content: Vec<Value> = entries
        .iter()
        .map(|e| {
            let top: Vec<Value> = e
                .top
                .iter()
                .map(|p| json!({"token": p.token, "logprob": number(p.logprob), "bytes": p.bytes}))
                .collect();
            json!({
                "token": e.sampled.token,
                "logprob": number(e.sampled.logprob),
                "bytes": e.sampled.bytes,
                "top_logprobs": top,
            })
        })
        .collect();
    json!({ "content": content })
}

/// The legacy completions' `logprobs` object for `entries`; `offset` is the
/// text offset (in characters) of the first, and moves past them all.
/// Each `top_logprobs` map holds the asked-for alternatives and the sampled
/// token (OpenAI's "up to logprobs + 1").
pub fn completions(entries: &[TokenLogprobs], offset: &mut usize) -> Value {
    let mut tokens = Vec::with_capacity(entries.len());
    let mut token_logprobs = Vec::with_capacity(entries.len());
    let mut top_logprobs = Vec::with_capacity(entries.len());
    let mut text_offset = Vec::with_capacity(entries.len());
    for e in entries {
        tokens.push(Value::from(e.sampled.token.as_str()));
        token_logprobs.push(number(e.sampled.logprob));
        let mut map = Map::new();
        for p in e.top.iter().chain(std::iter::once(&e.sampled)) {
            map.entry(p.token.as_str())
                .or_insert_with(|| number(p.logprob));
        }
        top_logprobs.push(Value::Object(map));
        text_offset.push(*offset);
        // Characters start at every byte that is not a UTF-8 continuation.
        *offset += e
            .sampled
            .bytes
            .iter()
            .filter(|&&b| b & 0xC0 != 0x80)
            .count();
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": text_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_sorted_and_stable() {
        let logits = [0.5, 3.0, -1.0, 3.0, f32::NAN, 2.0, f32::NEG_INFINITY];
        let (best, n) = top_k(&logits, 4);
        assert_eq!(&best[..n], &[(3.0, 1), (3.0, 3), (2.0, 5), (0.5, 0)]);
        assert_eq!(top_k(&logits, 0).1, 0);
        let (best, n) = top_k(&[1.0, 2.0], 20);
        assert_eq!(&best[..n], &[(2.0, 1), (1.0, 0)]);
    }

    #[test]
    fn completions_offsets_count_characters() {
        let p = |t: &str, lp: f64| Piece {
            token: t.into(),
            bytes: t.as_bytes().to_vec(),
            logprob: lp,
        };
        let e = |t: &str| TokenLogprobs {
            sampled: p(t, -0.5),
            top: vec![p("x", -0.1)],
        };
        let mut at = 0;
        let v = completions(&[e("é"), e("ab")], &mut at);
        assert_eq!(v["text_offset"], json!([0, 1]));
        assert_eq!(at, 3);
        assert_eq!(v["top_logprobs"][0], json!({"x": -0.1, "é": -0.5}));
        assert_eq!(number(f64::NEG_INFINITY), json!(-9999.0));
    }
}
