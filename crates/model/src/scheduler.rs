//! Continuous batching: many generations advanced together. Each
//! [`Scheduler::step`] runs one forward pass over every decoding sequence's
//! next token plus chunks of waiting prompts (oldest first) under a token
//! budget, so each weight is read once for all of them, and a long prompt
//! goes in over several steps instead of stalling the streams already
//! running (chunked prefill).
//!
//! The sequences live in the slots of one [`KvCache`]: `slots` sequences of
//! `n_ctx` positions each, the whole budget allocated up front. A finished
//! sequence frees its slot at once but leaves its keys and values there: a
//! new request takes the free slot whose cached tokens share the longest
//! prefix with its prompt, and where another slot (busy or free) shares a
//! longer one, that slot's rows are copied instead of recomputed. A prompt
//! admitted while another that shares a longer prefix is still going in
//! waits for those rows and copies them. So a system prompt common to many
//! requests is evaluated once, even when they arrive together.
//!
//! Sampling is per sequence, with its own parameters. A sequence's tokens and
//! logits are the same bits alone or in any batch (the kernels are
//! batch-invariant), and a step allocates nothing.

use lamina_kernels::pool::ThreadPool;

use crate::ModelError;
use crate::generate::{Decoder, GenerateOptions, StopReason};
use crate::grammar::Constraint;
use crate::sampling::{Sampler, SamplerParams};
use crate::tokenizer::Tokenizer;
use crate::transformer::{Chunk, KvCache, KvType, Model, Workspace};

/// A prompt waits for another one going in only to save this many tokens.
const WAIT_MIN_TOKENS: usize = 16;

/// A generation to run: its prompt, sampling and limits.
#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub sampler: SamplerParams,
    pub opts: GenerateOptions,
    /// A grammar the generated text must follow.
    pub constraint: Option<Constraint>,
}

/// Token counts of a finished generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values came from the cache.
    pub reused_tokens: usize,
    /// Sampled tokens, a final end-of-generation token included.
    pub completion_tokens: usize,
}

/// What a step reports about a sequence (`seq` is the slot [`Scheduler::admit`] gave).
#[derive(Debug)]
pub enum Event<'a> {
    /// A token was sampled and the generation goes on: the token, the logits
    /// it was sampled from, and the text that became ready (maybe none).
    Token {
        seq: usize,
        id: u32,
        text: &'a str,
        logits: &'a [f32],
    },
    /// The generation ended; `text` is what was still held back. `last` is
    /// the token sampled in this step when it ended the generation (an
    /// end-of-generation token, or the one completing a stop string) with
    /// the logits it was sampled from, so every sampled token is reported.
    Done {
        seq: usize,
        stop: StopReason,
        text: &'a str,
        usage: Usage,
        last: Option<(u32, &'a [f32])>,
    },
    /// The forward pass failed; the sequence is dropped.
    Failed { seq: usize, error: &'a ModelError },
}

/// Why [`Scheduler::admit`] did not take a request.
#[derive(Debug)]
pub enum Refusal {
    /// Every slot is busy: try again after a step (boxed: a request is
    /// large, and refusals are rare).
    Full(Box<Request>),
    /// The request can never run (empty, too long, unknown tokens).
    Invalid(ModelError),
}

/// How a [`Scheduler`] is sized.
#[derive(Clone, Copy, Debug)]
pub struct SchedulerOptions {
    /// Sequences generated at once.
    pub slots: usize,
    /// Positions per sequence (the KV budget is `slots × n_ctx`).
    pub n_ctx: usize,
    pub kv: KvType,
    /// Most tokens one forward pass takes (at least `slots`).
    pub budget: usize,
}

/// One slot: the tokens its cache rows hold, and the generation using it.
#[derive(Debug)]
struct Slot {
    tokens: Vec<u32>,
    /// When it was last admitted to (prompt order, and least recently used).
    admitted: u64,
    dec: Decoder,
    run: Option<Run>,
}

#[derive(Debug)]
struct Run {
    prompt: Vec<u32>,
    reused: usize,
    sampler: Sampler,
    opts: GenerateOptions,
    /// The sampled token to feed next (`None` while the prompt goes in).
    next: Option<u32>,
    /// A slot whose prompt, still going in, shares this many first tokens
    /// with this one: this prompt waits for them and copies them.
    wait: Option<(usize, usize)>,
}

/// Generations sharing one model, one KV cache and one forward pass per step.
pub struct Scheduler<'m> {
    model: &'m Model,
    tok: &'m Tokenizer,
    cache: KvCache,
    ws: Workspace,
    budget: usize,
    slots: Vec<Slot>,
    clock: u64,
    // Per-step buffers, sized once.
    batch: Vec<u32>,
    chunks: Vec<Chunk>,
    order: Vec<usize>,
    logits: Vec<f32>,
}

impl std::fmt::Debug for Scheduler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("slots", &self.slots.len())
            .field("n_ctx", &self.cache.n_ctx())
            .field("active", &self.active())
            .finish_non_exhaustive()
    }
}

impl<'m> Scheduler<'m> {
    /// A scheduler with its whole KV budget allocated (checked against the
    /// machine's memory first).
    pub fn new(
        model: &'m Model,
        tok: &'m Tokenizer,
        o: SchedulerOptions,
    ) -> Result<Scheduler<'m>, ModelError> {
        if !model.has_lm_head() {
            return Err(ModelError::NoLmHead {
                arch: model.hp.arch_name.clone(),
            });
        }
        if o.slots == 0 || o.n_ctx == 0 {
            return Err(ModelError::Input(
                "a scheduler needs at least one slot of at least one token".into(),
            ));
        }
        model.check_tokenizer(tok)?;
        let budget = o.budget.max(o.slots);
        crate::mem::check_scheduler(&model.hp, o.n_ctx, o.slots, o.kv, budget)?;
        let n_vocab = model.hp.n_vocab;
        Ok(Scheduler {
            model,
            tok,
            cache: KvCache::with_sequences(&model.hp, o.n_ctx, o.slots, o.kv),
            ws: Workspace::new(&model.hp, budget),
            budget,
            slots: (0..o.slots)
                .map(|_| Slot {
                    tokens: Vec::with_capacity(o.n_ctx),
                    admitted: 0,
                    dec: Decoder::default(),
                    run: None,
                })
                .collect(),
            clock: 0,
            batch: Vec::with_capacity(budget),
            chunks: Vec::with_capacity(o.slots),
            order: Vec::with_capacity(o.slots),
            logits: vec![0.0; o.slots * n_vocab],
        })
    }

    /// Sequences being generated.
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.run.is_some()).count()
    }

    /// Whether a request would get a slot now.
    pub fn has_room(&self) -> bool {
        self.slots.iter().any(|s| s.run.is_none())
    }

    pub fn n_slots(&self) -> usize {
        self.slots.len()
    }

    /// Positions per sequence.
    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }

    /// Starts a generation in a free slot and returns the slot.
    pub fn admit(&mut self, req: Request) -> Result<usize, Refusal> {
        let prompt = &req.prompt;
        if prompt.is_empty() {
            return Err(Refusal::Invalid(ModelError::Input(
                "the prompt has no tokens".into(),
            )));
        }
        if prompt.len() > self.n_ctx() {
            return Err(Refusal::Invalid(ModelError::ContextExceeded {
                n_tokens: prompt.len(),
                n_ctx: self.n_ctx(),
                at_least: false,
            }));
        }
        if let Err(e) = self.model.check_tokens(prompt) {
            return Err(Refusal::Invalid(e));
        }
        // The last prompt token always goes through the model, for its logits.
        let common = |tokens: &[u32]| {
            let n = tokens
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            n.min(prompt.len() - 1)
        };
        // The free slot with the longest common prefix, least recently used on ties.
        let Some(s) = (0..self.slots.len())
            .filter(|&i| self.slots[i].run.is_none())
            .max_by_key(|&i| {
                let slot = &self.slots[i];
                (common(&slot.tokens), std::cmp::Reverse(slot.admitted))
            })
        else {
            return Err(Refusal::Full(Box::new(req)));
        };
        let mut reused = common(&self.slots[s].tokens);
        let donor = (0..self.slots.len())
            .map(|i| (common(&self.slots[i].tokens), i))
            .max();
        if let Some((n, from)) = donor
            && n > reused
        {
            self.cache.copy_prefix(from, s, n);
            let slot = &mut self.slots[s];
            slot.tokens.clear();
            slot.tokens.extend_from_slice(&prompt[..n]);
            reused = n;
        }
        self.cache.truncate_seq(s, reused);
        // A prompt going in now that shares a longer prefix (requests that
        // arrive together with one system prompt): wait for it and copy.
        let wait = (0..self.slots.len())
            .filter(|&i| i != s)
            .filter_map(|i| {
                let run = self.slots[i].run.as_ref().filter(|r| r.next.is_none())?;
                Some((common(&run.prompt), i))
            })
            .max()
            .filter(|&(n, _)| n >= reused + WAIT_MIN_TOKENS)
            .map(|(n, i)| (i, n));
        self.clock += 1;
        let n_vocab = self.model.hp.n_vocab;
        let n_ctx = self.n_ctx();
        let slot = &mut self.slots[s];
        slot.tokens.truncate(reused);
        slot.admitted = self.clock;
        let room = n_ctx - prompt.len() + 1;
        let limit = req.opts.max_tokens.unwrap_or(usize::MAX).min(room);
        slot.dec.start(&req.opts, limit);
        let mut sampler = Sampler::new(req.sampler, n_vocab);
        sampler.set_history(&req.prompt);
        if let Some(c) = req.constraint {
            sampler.constrain(c);
        }
        slot.run = Some(Run {
            prompt: req.prompt,
            reused,
            sampler,
            opts: req.opts,
            next: None,
            wait,
        });
        Ok(s)
    }

    /// Stops the generation in slot `seq` without a [`Event::Done`] (its
    /// client went away). What it cached stays for prefix reuse.
    pub fn cancel(&mut self, seq: usize) {
        if let Some(slot) = self.slots.get_mut(seq) {
            slot.run = None;
        }
    }

    /// Drops every generation and everything cached (after a failure that
    /// may have left the cache in any state).
    pub fn clear(&mut self) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            slot.run = None;
            slot.tokens.clear();
            self.cache.truncate_seq(i, 0);
        }
    }

    /// Whether slot `s`'s prompt may go in now: it waits for no other
    /// prompt, or the one it waits for has the shared prefix in its cache
    /// rows (then they are copied) or went away (then it is computed).
    fn shared_prefix_ready(&mut self, s: usize) -> bool {
        let Some((d, n)) = self.slots[s].run.as_ref().and_then(|r| r.wait) else {
            return true;
        };
        let same = |a: &[u32], b: &[u32]| a.len() >= n && b.len() >= n && a[..n] == b[..n];
        let (donor, me) = (&self.slots[d], &self.slots[s]);
        let mine = me.run.as_ref().map_or(&[][..], |r| &r.prompt[..]);
        if same(&donor.tokens, mine) {
            self.cache.copy_prefix(d, s, n);
            let slot = &mut self.slots[s];
            if let Some(run) = slot.run.as_mut() {
                slot.tokens.clear();
                slot.tokens.extend_from_slice(&run.prompt[..n]);
                run.reused = n;
                run.wait = None;
            }
            return true;
        }
        let pending = donor
            .run
            .as_ref()
            .is_some_and(|r| r.next.is_none() && same(&r.prompt, mine));
        if pending {
            return false;
        }
        if let Some(run) = self.slots[s].run.as_mut() {
            run.wait = None;
        }
        true
    }

    /// Runs one forward pass: every decoding sequence's next token, then
    /// prompt chunks, oldest request first, up to the token budget. Reports
    /// each sampled token, each finished generation and each failure to
    /// `on`; an [`Event::Token`] answered with `false` cancels that sequence.
    /// Returns the tokens the pass ran (0: nothing to do).
    pub fn step(&mut self, pool: &dyn ThreadPool, on: &mut dyn FnMut(Event<'_>) -> bool) -> usize {
        self.batch.clear();
        self.chunks.clear();
        for (s, slot) in self.slots.iter().enumerate() {
            if let Some(id) = slot.run.as_ref().and_then(|r| r.next) {
                self.batch.push(id);
                self.chunks.push(Chunk {
                    seq: s,
                    len: 1,
                    logits: true,
                });
            }
        }
        self.order.clear();
        self.order.extend(
            (0..self.slots.len())
                .filter(|&s| self.slots[s].run.as_ref().is_some_and(|r| r.next.is_none())),
        );
        let slots = &self.slots;
        self.order.sort_unstable_by_key(|&s| slots[s].admitted);
        for i in 0..self.order.len() {
            let s = self.order[i];
            let room = self.budget.saturating_sub(self.batch.len());
            if room == 0 {
                break;
            }
            if !self.shared_prefix_ready(s) {
                continue;
            }
            let slot = &self.slots[s];
            let Some(run) = &slot.run else { continue };
            let fed = slot.tokens.len();
            let n = (run.prompt.len() - fed).min(room);
            self.batch.extend_from_slice(&run.prompt[fed..fed + n]);
            self.chunks.push(Chunk {
                seq: s,
                len: n,
                logits: fed + n == run.prompt.len(),
            });
        }
        if self.chunks.is_empty() {
            return 0;
        }
        let n_vocab = self.model.hp.n_vocab;
        let n_out = self.chunks.iter().filter(|c| c.logits).count();
        let logits = &mut self.logits[..n_out * n_vocab];
        let result = self.model.forward_batch(
            &mut self.ws,
            &mut self.cache,
            &self.batch,
            &self.chunks,
            logits,
            pool,
        );
        if let Err(error) = result {
            // The slots keep what they held before the pass.
            for c in &self.chunks {
                self.slots[c.seq].run = None;
                self.cache
                    .truncate_seq(c.seq, self.slots[c.seq].tokens.len());
                on(Event::Failed {
                    seq: c.seq,
                    error: &error,
                });
            }
            return self.batch.len();
        }
        let n_ctx = self.cache.n_ctx();
        let (mut at, mut k) = (0, 0);
        for c in &self.chunks {
            let slot = &mut self.slots[c.seq];
            slot.tokens.extend_from_slice(&self.batch[at..at + c.len]);
            at += c.len;
            if !c.logits {
                continue;
            }
            let row = &self.logits[k * n_vocab..(k + 1) * n_vocab];
            k += 1;
            let Some(run) = slot.run.as_mut() else {
                continue;
            };
            let mut last = None;
            let stop = match slot.dec.step(&mut run.sampler, row, self.tok, &run.opts) {
                Ok((id, text)) => {
                    let go_on = on(Event::Token {
                        seq: c.seq,
                        id,
                        text,
                        logits: row,
                    });
                    if !go_on {
                        Some(StopReason::Cancelled)
                    } else if slot.dec.at_limit(&run.opts) {
                        Some(StopReason::Length)
                    } else if slot.tokens.len() >= n_ctx {
                        Some(StopReason::Context)
                    } else {
                        run.next = Some(id);
                        None
                    }
                }
                Err(stop) => {
                    // An end-of-generation token or a stop string's last token
                    // was sampled here and went out in no `Token` event.
                    if matches!(stop, StopReason::Eos | StopReason::StopString) {
                        last = slot.dec.ids.last().map(|&id| (id, row));
                    }
                    Some(stop)
                }
            };
            if let Some(stop) = stop {
                let usage = Usage {
                    prompt_tokens: run.prompt.len(),
                    reused_tokens: run.reused,
                    completion_tokens: slot.dec.ids.len(),
                };
                let text = slot.dec.finish(stop);
                if stop != StopReason::Cancelled {
                    on(Event::Done {
                        seq: c.seq,
                        stop,
                        text,
                        usage,
                        last,
                    });
                }
                slot.run = None;
            }
        }
        self.batch.len()
    }
}
