//! Text generation: a [`Session`] holds one sequence's KV cache and runs a
//! prompt through the model as batches of up to [`Session::batch`] tokens,
//! then decodes token by token, streaming whole UTF-8 characters and
//! stopping at an end-of-generation token, a stop string, the token limit or
//! the end of the context.
//!
//! The cache outlives a generation: [`Session::prefill`] keeps the longest
//! common prefix of what is cached and the new prompt and evaluates only the
//! rest, so a chat re-sends the whole conversation and pays for the new turn.
//!
//! Once a session is made, decoding a token allocates nothing (the text
//! buffers are reserved for the token limit when a generation starts).

use std::time::{Duration, Instant};

use lamina_kernels::pool::ThreadPool;

use crate::ModelError;
use crate::sampling::Sampler;
use crate::tokenizer::Tokenizer;
use crate::transformer::{KvCache, KvType, Model, Workspace};

/// Prompt tokens per forward pass (llama.cpp's `n_ubatch`).
pub const DEFAULT_BATCH: usize = 512;

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (EOS, EOT, …).
    Eos,
    /// The token limit was reached.
    Length,
    /// The text reached one of the stop strings (cut before it).
    StopString,
    /// The context is full: no room to evaluate another token.
    Context,
    /// The caller's callback asked to stop (e.g. Ctrl-C).
    Cancelled,
}

impl StopReason {
    /// `eos`, `length`, `stop`, `context` or `cancelled` (as `--json` prints it).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::Length => "length",
            StopReason::StopString => "stop",
            StopReason::Context => "context",
            StopReason::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits of one generation.
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    /// At most this many tokens (`None`: until EOS or the context is full).
    pub max_tokens: Option<usize>,
    /// Stop when the text contains one of these (the text is cut before it).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
}

/// What a generation produced.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Every sampled token, the final end-of-generation token included.
    pub ids: Vec<u32>,
    /// The text of the tokens (control tokens and a matched stop string left out).
    pub text: String,
    pub stop: StopReason,
    /// Tokens evaluated by the model while generating, and the time taken
    /// (sampling included).
    pub n_eval: usize,
    pub eval_time: Duration,
}

/// What [`Session::prefill`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prefill {
    /// Prompt tokens already in the cache.
    pub reused: usize,
    /// Prompt tokens run through the model.
    pub evaluated: usize,
    pub time: Duration,
}

/// One sequence being generated: the model, its tokenizer, a KV cache and
/// the buffers of a forward pass.
pub struct Session<'m> {
    model: &'m Model,
    tok: &'m Tokenizer,
    cache: KvCache,
    ws: Workspace,
    batch: usize,
    /// The tokens in the cache, in order.
    tokens: Vec<u32>,
    /// Next-token logits after `tokens` (valid when `has_logits`).
    logits: Vec<f32>,
    has_logits: bool,
    dec: Decoder,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("n_ctx", &self.cache.n_ctx())
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

impl<'m> Session<'m> {
    /// A session with room for `n_ctx` tokens (the cache is allocated now).
    pub fn new(
        model: &'m Model,
        tok: &'m Tokenizer,
        n_ctx: usize,
        kv: KvType,
    ) -> Result<Session<'m>, ModelError> {
        Session::with_batch(model, tok, n_ctx, kv, DEFAULT_BATCH)
    }

    /// [`Session::new`] with prompt batches of `batch` tokens.
    pub fn with_batch(
        model: &'m Model,
        tok: &'m Tokenizer,
        n_ctx: usize,
        kv: KvType,
        batch: usize,
    ) -> Result<Session<'m>, ModelError> {
        if !model.has_lm_head() {
            return Err(ModelError::NoLmHead {
                arch: model.hp.arch_name.clone(),
            });
        }
        if n_ctx == 0 || batch == 0 {
            return Err(ModelError::Input(
                "the context and the batch must hold at least one token".into(),
            ));
        }
        model.check_tokenizer(tok)?;
        let batch = batch.min(n_ctx);
        crate::mem::check_session(&model.hp, n_ctx, kv, batch)?;
        Ok(Session {
            model,
            tok,
            cache: KvCache::new(&model.hp, n_ctx, kv),
            ws: Workspace::new(&model.hp, batch),
            batch,
            tokens: Vec::with_capacity(n_ctx),
            logits: vec![0.0; model.hp.n_vocab],
            has_logits: false,
            dec: Decoder::default(),
        })
    }

    pub fn model(&self) -> &'m Model {
        self.model
    }
    pub fn tokenizer(&self) -> &'m Tokenizer {
        self.tok
    }
    /// Capacity in tokens.
    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }
    /// Prompt tokens per forward pass.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The tokens in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }
    /// Next-token logits after [`Session::tokens`], if they were computed.
    pub fn logits(&self) -> Option<&[f32]> {
        self.has_logits.then_some(&self.logits[..])
    }
    /// Forgets the cached sequence.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    fn truncate(&mut self, n: usize) {
        if n < self.tokens.len() {
            self.tokens.truncate(n);
            self.cache.truncate(n);
            self.has_logits = false;
        }
    }

    /// Makes the cache hold exactly `prompt`: keeps the longest common prefix
    /// with what is cached and runs the rest through the model (the last
    /// token at least, for its logits).
    pub fn prefill(
        &mut self,
        prompt: &[u32],
        pool: &dyn ThreadPool,
    ) -> Result<Prefill, ModelError> {
        let start = Instant::now();
        if prompt.is_empty() {
            return Err(ModelError::Input("the prompt has no tokens".into()));
        }
        if prompt.len() > self.n_ctx() {
            return Err(ModelError::ContextExceeded {
                n_tokens: prompt.len(),
                n_ctx: self.n_ctx(),
                at_least: false,
            });
        }
        let mut common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        if common == prompt.len() && !(self.has_logits && self.tokens.len() == prompt.len()) {
            common -= 1;
        }
        self.truncate(common);
        self.eval(&prompt[common..], pool)?;
        Ok(Prefill {
            reused: common,
            evaluated: prompt.len() - common,
            time: start.elapsed(),
        })
    }

    /// Appends `tokens` to the sequence, running them through the model in
    /// batches; the logits are then those after the last.
    pub fn eval(&mut self, tokens: &[u32], pool: &dyn ThreadPool) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Ok(());
        }
        let n = self.tokens.len() + tokens.len();
        if n > self.n_ctx() {
            return Err(ModelError::ContextExceeded {
                n_tokens: n,
                n_ctx: self.n_ctx(),
                at_least: false,
            });
        }
        for chunk in tokens.chunks(self.batch) {
            self.has_logits = false;
            let result = self.model.forward_cached(
                &mut self.ws,
                &mut self.cache,
                chunk,
                false,
                &mut self.logits,
                pool,
            );
            if let Err(e) = result {
                // The cache may hold part of the chunk: drop it.
                self.cache.truncate(self.tokens.len());
                return Err(e);
            }
            self.tokens.extend_from_slice(chunk);
            self.has_logits = true;
        }
        Ok(())
    }

    /// Generates after the cached sequence (call [`Session::prefill`] first),
    /// passing each new piece of text to `on_text` as soon as it is whole
    /// (held back while it could still become a stop string). `on_text` is
    /// called once per token, possibly with `""`; returning `false` stops.
    ///
    /// The sampler's penalty window is refilled from the cached sequence.
    pub fn generate(
        &mut self,
        sampler: &mut Sampler,
        opts: &GenerateOptions,
        pool: &dyn ThreadPool,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation, ModelError> {
        if !self.has_logits {
            return Err(ModelError::Input(
                "nothing to continue: prefill a prompt first".into(),
            ));
        }
        let start = Instant::now();
        let room = self.n_ctx() - self.tokens.len() + 1;
        let limit = opts.max_tokens.unwrap_or(usize::MAX).min(room);
        self.dec.start(opts, limit.min(self.n_ctx()));
        sampler.set_history(&self.tokens);
        let mut n_eval = 0;
        let stop = loop {
            let id = match self.dec.step(sampler, &self.logits, self.tok, opts) {
                Ok((id, piece)) => {
                    if !on_text(piece) {
                        break StopReason::Cancelled;
                    }
                    id
                }
                Err(stop) => break stop,
            };
            if self.dec.at_limit(opts) {
                break StopReason::Length;
            }
            if self.tokens.len() >= self.n_ctx() {
                break StopReason::Context;
            }
            self.eval(std::slice::from_ref(&id), pool)?;
            n_eval += 1;
        };
        let rest = self.dec.finish(stop);
        if !rest.is_empty() {
            on_text(rest);
        }
        Ok(Generation {
            ids: std::mem::take(&mut self.dec.ids),
            text: self.dec.text().to_string(),
            stop,
            n_eval,
            eval_time: start.elapsed(),
        })
    }
}

/// The text side of one generation: the sampled ids, their text, and what
/// is held back from the stream (an unfinished character, the start of a
/// possible stop string). [`Session`] and the batch scheduler share it.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    pub(crate) ids: Vec<u32>,
    /// Generated text, and piece bytes still waiting for the rest of a character.
    text: String,
    pending: Vec<u8>,
    /// Bytes of `text` already streamed.
    emitted: usize,
    /// The longest stop string's length.
    max_stop: usize,
}

impl Decoder {
    /// Starts a generation of up to `limit` tokens; the buffers are reserved
    /// now, so the steps allocate nothing.
    pub(crate) fn start(&mut self, opts: &GenerateOptions, limit: usize) {
        self.ids.clear();
        self.ids.reserve(limit);
        self.text.clear();
        self.text.reserve(limit.saturating_mul(32));
        self.pending.clear();
        self.pending.reserve(64);
        self.emitted = 0;
        self.max_stop = opts.stop.iter().map(String::len).max().unwrap_or(0);
    }

    /// Samples the next token from `logits` and returns it with the text that
    /// became ready to stream (maybe none), or why the generation ends here
    /// (the token limit, an end-of-generation token, a stop string).
    pub(crate) fn step(
        &mut self,
        sampler: &mut Sampler,
        logits: &[f32],
        tok: &Tokenizer,
        opts: &GenerateOptions,
    ) -> Result<(u32, &str), StopReason> {
        if self.at_limit(opts) {
            return Err(StopReason::Length);
        }
        let id = sampler.sample(logits);
        sampler.accept(id);
        self.ids.push(id);
        if !opts.ignore_eos && tok.is_eog(id) {
            return Err(StopReason::Eos);
        }
        let before = self.text.len();
        tok.append_piece(id, false, &mut self.pending);
        decode_utf8(&mut self.pending, &mut self.text);
        if let Some(at) = find_stop(&self.text, before, &opts.stop, self.max_stop) {
            self.text.truncate(at);
            return Err(StopReason::StopString);
        }
        let ready = self.text.len() - held_back(&self.text, &opts.stop);
        let from = self.emitted;
        self.emitted = self.emitted.max(ready);
        let piece = if ready > from {
            &self.text[from..ready]
        } else {
            ""
        };
        Ok((id, piece))
    }

    /// Whether the token limit is reached (the last token is not fed back).
    pub(crate) fn at_limit(&self, opts: &GenerateOptions) -> bool {
        opts.max_tokens.is_some_and(|m| self.ids.len() >= m)
    }

    /// Ends the generation: returns the text still held back, to stream
    /// last (none after a stop string or a cancellation).
    pub(crate) fn finish(&mut self, stop: StopReason) -> &str {
        if stop != StopReason::StopString && !self.pending.is_empty() {
            self.text.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
        let from = self.emitted;
        self.emitted = self.text.len();
        if stop == StopReason::Cancelled || from >= self.text.len() {
            return "";
        }
        &self.text[from..]
    }

    /// The text generated so far (a matched stop string cut off).
    pub(crate) fn text(&self) -> &str {
        &self.text
    }
}

/// Moves the complete UTF-8 prefix of `pending` into `text` (bytes that can
/// never start a character become U+FFFD); an unfinished character stays.
fn decode_utf8(pending: &mut Vec<u8>, text: &mut String) {
    let mut pos = 0;
    loop {
        match std::str::from_utf8(&pending[pos..]) {
            Ok(s) => {
                text.push_str(s);
                pos = pending.len();
                break;
            }
            Err(e) => {
                let valid = e.valid_up_to();
                if let Ok(s) = std::str::from_utf8(&pending[pos..pos + valid]) {
                    text.push_str(s);
                }
                pos += valid;
                match e.error_len() {
                    Some(n) => {
                        text.push('\u{FFFD}');
                        pos += n;
                    }
                    None => break,
                }
            }
        }
    }
    pending.drain(..pos);
}

/// The earliest stop string in `text` that ends after byte `new_from`, as
/// its start (earlier text was already searched).
fn find_stop(text: &str, new_from: usize, stops: &[String], max_len: usize) -> Option<usize> {
    let mut from = new_from.saturating_sub(max_len.saturating_sub(1));
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text[from..].find(s.as_str()).map(|i| from + i))
        .min()
}

/// Bytes at the end of `text` that are the start of a stop string (they may
/// yet become one, so they are not streamed yet).
fn held_back(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for n in (hold + 1..s.len().min(text.len() + 1)).rev() {
            let at = text.len() - n;
            if text.is_char_boundary(at) && s.as_bytes().starts_with(&text.as_bytes()[at..]) {
                hold = n;
                break;
            }
        }
    }
    hold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_decoded_whole() {
        let mut pending = Vec::new();
        let mut text = String::new();
        let euro = "€".as_bytes();
        pending.extend_from_slice(&euro[..2]);
        decode_utf8(&mut pending, &mut text);
        assert_eq!((text.as_str(), pending.len()), ("", 2));
        pending.extend_from_slice(&[euro[2], b'a', 0xFF, b'b']);
        decode_utf8(&mut pending, &mut text);
        assert_eq!(text, "€a\u{FFFD}b");
        assert!(pending.is_empty());
    }

    #[test]
    fn stop_strings_are_found_across_pieces_and_held_back() {
        let stops = vec!["\n\nUser:".to_string(), "END".to_string()];
        assert_eq!(find_stop("abc\n\nUs", 5, &stops, 7), None);
        assert_eq!(find_stop("abc\n\nUser: hi", 7, &stops, 7), Some(3));
        assert_eq!(find_stop("xxENDyyEND", 0, &stops, 7), Some(2));
        // Text before `new_from - (longest - 1)` was searched already.
        assert_eq!(find_stop("xxENDyyEND", 9, &stops, 7), Some(7));
        assert_eq!(held_back("abc\n\nUs", &stops), 4);
        assert_eq!(held_back("abcE", &stops), 1);
        assert_eq!(held_back("abc", &stops), 0);
        assert_eq!(held_back("é", &["éa".to_string()]), 2);
    }
}
