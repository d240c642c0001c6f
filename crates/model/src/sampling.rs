//! Choosing the next token from logits, as llama.cpp's default sampler
//! chain does: penalties → top-k → top-p → min-p → temperature → a seeded
//! draw from the remaining distribution (`--temp 0` or below: the most
//! likely token after the penalties).
//!
//! A [`Sampler`] owns every buffer it needs, sized from the vocabulary when
//! it is made, so choosing a token allocates nothing.
//!
//! Broken logits never panic: NaN counts as `-inf`; when the best
//! remaining logit is infinite (`+inf`, or `-inf` because nothing finite is
//! left) the choice is the first candidate holding it, which is the lowest
//! such id; an empty vocabulary gives token 0. Temperature scales finite
//! logits only, and a NaN temperature is greedy.

use crate::grammar::Constraint;
use std::collections::VecDeque;
use toktrie::SimpleVob;

/// Sampling settings; the defaults are llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// Temperature; `<= 0` (or NaN) is greedy.
    pub temp: f32,
    /// Keep the `k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `p`; 1 disables.
    pub top_p: f32,
    /// Drop tokens less likely than `p` × the most likely; 0 disables.
    pub min_p: f32,
    /// Divide (positive logits) or multiply (negative) the logits of recent
    /// tokens by this; 1 disables.
    pub repeat_penalty: f32,
    /// Subtract `count × this` from a recent token's logit.
    pub frequency_penalty: f32,
    /// Subtract this from the logit of any recent token.
    pub presence_penalty: f32,
    /// How many of the latest tokens (prompt included) the penalties see; 0 disables them.
    pub penalty_last_n: usize,
    /// Seed of the random draw: the same seed gives the same choices.
    pub seed: u64,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerParams {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        SamplerParams {
            temp: 0.0,
            ..SamplerParams::default()
        }
    }

    fn greedy_temp(&self) -> bool {
        self.temp.is_nan() || self.temp <= 0.0
    }

    fn penalties_active(&self) -> bool {
        self.penalty_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.frequency_penalty != 0.0
                || self.presence_penalty != 0.0)
    }
}

/// xoshiro256** seeded through SplitMix64: small, fast and the same on
/// every platform.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[derive(Clone, Copy, Debug)]
struct Cand {
    logit: f32,
    id: u32,
}

/// Descending logit, then ascending id (a total order, so runs are repeatable).
fn by_logit_desc(a: &Cand, b: &Cand) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// When top-k keeps everything, top-p first tries this many best candidates.
const TOP_P_FIRST: usize = 256;

/// Picks tokens; remembers the recent ones for the penalties.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplerParams,
    rng: Rng,
    n_vocab: usize,
    cand: Vec<Cand>,
    /// The last `penalty_last_n` accepted tokens.
    recent: VecDeque<u32>,
    /// Scratch: `recent` sorted, to count each token once.
    counted: Vec<u32>,
    /// A grammar the sampled tokens must follow.
    constraint: Option<Constraint>,
}

impl Sampler {
    /// A sampler for a vocabulary of `n_vocab` tokens.
    pub fn new(params: SamplerParams, n_vocab: usize) -> Sampler {
        let n_recent = if params.penalties_active() {
            params.penalty_last_n
        } else {
            0
        };
        Sampler {
            rng: Rng::new(params.seed),
            params,
            n_vocab,
            cand: Vec::with_capacity(n_vocab),
            recent: VecDeque::with_capacity(n_recent),
            counted: Vec::with_capacity(n_recent),
            constraint: None,
        }
    }

    /// Samples only tokens that `constraint` allows from here on; each
    /// [`accept`](Sampler::accept)ed token advances it.
    pub fn constrain(&mut self, constraint: Constraint) {
        self.constraint = Some(constraint);
    }

    /// The grammar this sampler follows, if any.
    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Forgets the recent tokens and restarts the random sequence from the seed.
    pub fn reset(&mut self) {
        self.recent.clear();
        self.rng = Rng::new(self.params.seed);
        if let Some(c) = &mut self.constraint {
            c.reset();
        }
    }

    /// Records a generated token: for the penalties, and to move the
    /// grammar past it (prompt tokens go through [`Sampler::set_history`]).
    pub fn accept(&mut self, token: u32) {
        if let Some(c) = &mut self.constraint {
            c.advance(token);
        }
        if self.recent.capacity() == 0 || self.params.penalty_last_n == 0 {
            return;
        }
        if self.recent.len() == self.params.penalty_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// Refills the penalty window with the end of `tokens` (the sequence so far).
    pub fn set_history(&mut self, tokens: &[u32]) {
        self.recent.clear();
        if self.recent.capacity() == 0 {
            return;
        }
        let n = self.params.penalty_last_n;
        self.recent
            .extend(tokens[tokens.len().saturating_sub(n)..].iter().copied());
    }

    /// Chooses the next token from `logits` (`n_vocab` values). Does not
    /// [`accept`](Sampler::accept) it.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        assert_eq!(logits.len(), self.n_vocab, "logits of the wrong vocabulary");
        let mask = match &mut self.constraint {
            None => None,
            Some(c) => match c.allowed() {
                Some(mask) => Some(mask),
                // The grammar engine failed: end the text.
                None => return c.end(),
            },
        };
        if mask.is_none() && self.params.greedy_temp() && !self.params.penalties_active() {
            // Greedy: the most likely token, the first on ties, without
            // building the candidates (none are left).
            self.cand.clear();
            let best = argmax(logits);
            // All -inf or NaN: every token ties at -inf, so the lowest id.
            let finite_or_inf = logits.get(best).is_some_and(|&x| x > f32::NEG_INFINITY);
            return if finite_or_inf { best as u32 } else { 0 };
        }
        self.cand.clear();
        self.cand
            .extend(logits.iter().enumerate().map(|(i, &logit)| Cand {
                logit: not_nan(logit),
                id: i as u32,
            }));
        if let Some(mask) = &mask {
            // Before any other step, so penalties and top-k see only
            // allowed tokens.
            mask.iter_unset_entries(|i| {
                if let Some(c) = self.cand.get_mut(i) {
                    c.logit = f32::NEG_INFINITY;
                }
            });
        }
        if self.params.penalties_active() {
            self.apply_penalties();
        }
        let id = if self.params.greedy_temp() {
            // The most likely token; the first on ties.
            let mut best = 0;
            for (i, c) in self.cand.iter().enumerate() {
                if c.logit > self.cand[best].logit {
                    best = i;
                }
            }
            self.cand[best].id
        } else {
            let sorted = self.top_k_top_p();
            self.min_p(sorted);
            let inv = 1.0 / self.params.temp;
            self.cand
                .iter_mut()
                .filter(|c| c.logit.is_finite())
                .for_each(|c| c.logit = not_nan(c.logit * inv));
            self.draw()
        };
        match &mask {
            // Every allowed token at −∞ ties with the rest: take the first
            // allowed one rather than leave the grammar.
            Some(mask) if !mask.is_allowed(id) => first_allowed(mask),
            _ => id,
        }
    }

    fn apply_penalties(&mut self) {
        let p = &self.params;
        self.counted.clear();
        self.counted.extend(self.recent.iter().copied());
        self.counted.sort_unstable();
        let mut i = 0;
        while i < self.counted.len() {
            let id = self.counted[i];
            let mut n = 1;
            while i + n < self.counted.len() && self.counted[i + n] == id {
                n += 1;
            }
            i += n;
            // Candidates are still in id order here.
            let Some(c) = self.cand.get_mut(id as usize) else {
                continue;
            };
            if c.logit <= 0.0 {
                c.logit *= p.repeat_penalty;
            } else {
                c.logit /= p.repeat_penalty;
            }
            c.logit = not_nan(c.logit - (n as f32 * p.frequency_penalty + p.presence_penalty));
        }
    }

    /// Top-k then top-p. Returns whether the candidates are now sorted,
    /// most likely first (they are unless both were disabled).
    fn top_k_top_p(&mut self) -> bool {
        let (top_k, top_p) = (self.params.top_k, self.params.top_p);
        let mut sorted = false;
        if top_k > 0 && top_k < self.cand.len() {
            self.cand.select_nth_unstable_by(top_k - 1, by_logit_desc);
            self.cand.truncate(top_k);
            self.cand.sort_unstable_by(by_logit_desc);
            sorted = true;
        }
        if top_p >= 1.0 {
            return sorted;
        }
        // Probabilities over the candidates that remain. Unsorted (top-k
        // disabled), only the best few are sorted first, the rest when needed.
        let max = max_logit(&self.cand);
        let sum: f32 = self.cand.iter().map(|c| (c.logit - max).exp()).sum();
        let len = self.cand.len();
        let mut ready = len;
        if !sorted {
            ready = TOP_P_FIRST.min(len);
            if ready < len {
                self.cand.select_nth_unstable_by(ready - 1, by_logit_desc);
            }
            self.cand[..ready].sort_unstable_by(by_logit_desc);
        }
        let mut cum = 0.0f32;
        let mut i = 0;
        while i < len {
            if i == ready {
                self.cand[ready..].sort_unstable_by(by_logit_desc);
                ready = len;
            }
            cum += (self.cand[i].logit - max).exp() / sum;
            i += 1;
            if cum >= top_p {
                break;
            }
        }
        self.cand.truncate(i);
        true
    }

    /// Keeps tokens whose probability is at least `min_p` × the best's.
    fn min_p(&mut self, sorted: bool) {
        let p = self.params.min_p;
        if p <= 0.0 || self.cand.is_empty() {
            return;
        }
        if sorted {
            let min_logit = self.cand[0].logit + p.ln();
            let keep = 1 + self.cand[1..]
                .iter()
                .take_while(|c| c.logit >= min_logit)
                .count();
            self.cand.truncate(keep);
        } else {
            let min_logit = max_logit(&self.cand) + p.ln().min(0.0);
            self.cand.retain(|c| c.logit >= min_logit);
        }
    }

    /// A draw from the softmax of the candidates, in their order.
    fn draw(&mut self) -> u32 {
        let r = self.rng.next_f64();
        let max = max_logit(&self.cand);
        if self.cand.len() <= 1 || max.is_infinite() {
            // Nothing to weigh: the first candidate holding the best logit.
            return self
                .cand
                .iter()
                .find(|c| c.logit == max)
                .or(self.cand.first())
                .map_or(0, |c| c.id);
        }
        let sum: f64 = self
            .cand
            .iter()
            .map(|c| f64::from((c.logit - max).exp()))
            .sum();
        let target = sum * r;
        let mut run = 0.0f64;
        for c in &self.cand {
            run += f64::from((c.logit - max).exp());
            if run >= target {
                return c.id;
            }
        }
        self.cand.last().map_or(0, |c| c.id)
    }

    /// The candidates left by the last [`sample`](Sampler::sample) before the
    /// draw, as `(id, logit / temp)`: best first unless top-k and top-p were
    /// both disabled; none after a greedy sample without penalties (for tests
    /// and debugging).
    pub fn candidates(&self) -> impl Iterator<Item = (u32, f32)> + '_ {
        self.cand.iter().map(|c| (c.id, c.logit))
    }
}

/// NaN as `-inf`, so it is never chosen while anything else is possible.
fn not_nan(x: f32) -> f32 {
    if x.is_nan() { f32::NEG_INFINITY } else { x }
}

fn max_logit(c: &[Cand]) -> f32 {
    c.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
}

/// The index of the largest value (the first on ties; NaN never wins); 0 for
/// an empty slice or one of NaNs only. Two passes the compiler vectorises:
/// the largest value in sixteen lanes, then the first chunk holding it (a
/// 262144-entry vocabulary costs tens of microseconds, not a tenth of a
/// millisecond per token).
pub fn argmax(xs: &[f32]) -> usize {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    const CHUNK: usize = 64;
    for (k, c) in xs.chunks(CHUNK).enumerate() {
        if c.iter().fold(false, |hit, &x| hit | (x == max)) {
            return k * CHUNK + c.iter().position(|&x| x == max).unwrap_or(0);
        }
    }
    0
}

/// The lowest id `mask` allows (0 for an empty mask, which the grammar
/// engine never gives: a finished grammar allows the end of text).
fn first_allowed(mask: &SimpleVob) -> u32 {
    let mut first = None;
    mask.iter_set_entries(|i| {
        first.get_or_insert(i as u32);
    });
    first.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &Sampler) -> Vec<u32> {
        s.candidates().map(|(id, _)| id).collect()
    }

    fn params() -> SamplerParams {
        SamplerParams {
            temp: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplerParams::default()
        }
    }

    /// Logits whose softmax is exactly `probs` (up to rounding).
    fn logits_of(probs: &[f32]) -> Vec<f32> {
        probs.iter().map(|p| p.ln()).collect()
    }

    #[test]
    fn greedy_takes_the_argmax_first_on_ties() {
        let mut s = Sampler::new(SamplerParams::greedy(), 5);
        assert_eq!(s.sample(&[0.0, 3.0, -1.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[0.0, 3.0, -1.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[]), 0);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
        assert_eq!(argmax(&[f32::NAN; 3]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 3]), 0);
        // Past the lanes and chunks: the first of equal maxima wins.
        for n in [15, 16, 17, 63, 64, 65, 1000] {
            for at in [0, n / 3, n - 1] {
                let mut xs: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 * -0.01).collect();
                xs[at] = 5.0;
                xs[n - 1 - (n - 1 - at) / 2] = 5.0;
                assert_eq!(argmax(&xs), at, "n {n}, max at {at}");
            }
        }
    }

    #[test]
    fn top_k_keeps_the_k_best_sorted() {
        let mut s = Sampler::new(
            SamplerParams {
                top_k: 3,
                ..params()
            },
            6,
        );
        s.sample(&[0.1, 0.5, 0.3, 0.9, 0.0, 0.7]);
        assert_eq!(ids(&s), [3, 5, 1]);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // llama.cpp's test-sampling cases over {0.1, 0.2, 0.3, 0.4}.
        for (p, want) in [(0.0, 1), (0.7, 2), (0.8, 3), (1.0, 4)] {
            let mut s = Sampler::new(
                SamplerParams {
                    top_p: p,
                    ..params()
                },
                4,
            );
            s.sample(&logits_of(&[0.1, 0.2, 0.3, 0.4]));
            let mut got = ids(&s);
            got.sort_unstable_by(|a, b| b.cmp(a));
            assert_eq!(got, [3, 2, 1, 0][..want], "top_p {p}");
        }
        // With top-k disabled on a large vocabulary the first pass looks at
        // only the best 256; a flat distribution needs the rest too.
        let n = 1000;
        let mut s = Sampler::new(
            SamplerParams {
                top_p: 0.4995,
                ..params()
            },
            n,
        );
        s.sample(&vec![1.0; n]);
        assert_eq!(ids(&s), (0..500).collect::<Vec<u32>>());
    }

    #[test]
    fn min_p_drops_tokens_far_below_the_best() {
        // llama.cpp's test-sampling values.
        let probs = [0.1, 0.2, 0.3, 0.4];
        for (p, want) in [
            (0.0, 4),
            (0.24, 4),
            (0.26, 3),
            (0.49, 3),
            (0.51, 2),
            (0.76, 1),
        ] {
            let mut s = Sampler::new(
                SamplerParams {
                    min_p: p,
                    ..params()
                },
                4,
            );
            s.sample(&logits_of(&probs));
            assert_eq!(s.candidates().count(), want, "min_p {p}");
        }
    }

    #[test]
    fn temperature_scales_the_kept_logits() {
        let mut s = Sampler::new(
            SamplerParams {
                temp: 0.5,
                ..params()
            },
            3,
        );
        s.sample(&[1.0, 2.0, 3.0]);
        let got: Vec<(u32, f32)> = s.candidates().collect();
        assert_eq!(got, [(0, 2.0), (1, 4.0), (2, 6.0)]);
    }

    #[test]
    fn penalties_follow_llama_cpp() {
        // repeat 2: positive logits halve, negative double; frequency and
        // presence subtract; only the last `penalty_last_n` tokens count.
        let mut s = Sampler::new(
            SamplerParams {
                repeat_penalty: 2.0,
                frequency_penalty: 0.5,
                presence_penalty: 0.25,
                penalty_last_n: 3,
                ..params()
            },
            4,
        );
        for t in [0, 1, 1, 2] {
            s.accept(t); // 0 falls out of the window of 3
        }
        s.sample(&[4.0, 4.0, -1.0, 1.0]);
        let mut got: Vec<(u32, f32)> = s.candidates().collect();
        got.sort_by_key(|c| c.0);
        // 1: 4/2 - 2·0.5 - 0.25; 2: -1·2 - 0.5 - 0.25.
        assert_eq!(got, [(0, 4.0), (1, 0.75), (2, -2.75), (3, 1.0)]);
    }

    #[test]
    fn same_seed_same_draws_and_the_distribution_is_right() {
        let probs = [0.1f32, 0.2, 0.3, 0.4];
        let draw = |seed| {
            let mut s = Sampler::new(SamplerParams { seed, ..params() }, 4);
            (0..4000)
                .map(|_| s.sample(&logits_of(&probs)))
                .collect::<Vec<u32>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
        for (id, &p) in probs.iter().enumerate() {
            let freq = a.iter().filter(|&&x| x == id as u32).count() as f32 / a.len() as f32;
            assert!((freq - p).abs() < 0.03, "token {id}: {freq} vs {p}");
        }
        // reset() restarts the sequence.
        let mut s = Sampler::new(
            SamplerParams {
                seed: 7,
                ..params()
            },
            4,
        );
        let first: Vec<u32> = (0..10).map(|_| s.sample(&logits_of(&probs))).collect();
        s.reset();
        let again: Vec<u32> = (0..10).map(|_| s.sample(&logits_of(&probs))).collect();
        assert_eq!(first, again);
    }

    #[test]
    fn default_chain_never_picks_a_filtered_token() {
        // top-k 40 / top-p 0.95 / min-p 0.05 at temp 0.8 over a peaked vocabulary.
        let n = 5000;
        let mut logits: Vec<f32> = (0..n).map(|i| -((i % 97) as f32) * 0.1).collect();
        logits[1234] = 10.0;
        logits[4321] = 9.0;
        let mut s = Sampler::new(SamplerParams::default(), n);
        for _ in 0..200 {
            let t = s.sample(&logits);
            assert!(t == 1234 || t == 4321, "picked {t}");
        }
    }
}
