//! `lamina.Generator`: text from a prompt or a conversation, as `lamina
//! generate` and `lamina chat` produce it.
//!
//! Every call runs on a fresh KV cache of the generator's context. Calls on
//! one generator take turns; a stream holds the turn until its generation
//! ends or the stream is dropped. Its engine thread never waits for the
//! reader, so a call made while a stream is still unread waits for that
//! generation to finish instead of for the reader.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use lamina_model::chat::{ChatTemplate, Message};
use lamina_model::generate::{GenerateOptions, Session};
use lamina_model::sampling::{Sampler, SamplerParams};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Load, LoadOptions, Model, ModelError, ThreadPool};
use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{model_error, poisoned, resolve, thread_pool};

/// The context when none is given: the model's, at most this (as the CLI).
const DEFAULT_CTX: usize = 4096;

/// What a generator's calls share (an engine thread holds it while streaming).
struct Shared {
    model: Model,
    tok: Tokenizer,
    template: ChatTemplate,
    n_ctx: usize,
    /// The compute pool, locked for the length of a generation.
    pool: Mutex<Box<dyn ThreadPool + Send>>,
}

/// One generation's request: the prompt's ids, sampling and limits.
struct Job {
    ids: Vec<u32>,
    params: SamplerParams,
    opts: GenerateOptions,
}

impl Shared {
    /// Runs `job`, giving each piece of text to `on_text` (false stops).
    fn run(&self, job: &Job, on_text: &mut dyn FnMut(&str) -> bool) -> PyResult<String> {
        let pool = self.pool.lock().map_err(|_| poisoned())?;
        let mut session =
            Session::new(&self.model, &self.tok, self.n_ctx, KvType::F16).map_err(model_error)?;
        session
            .prefill(&job.ids, pool.as_ref())
            .map_err(model_error)?;
        let mut sampler = Sampler::new(job.params.clone(), self.model.hp.n_vocab);
        let out = session
            .generate(&mut sampler, &job.opts, pool.as_ref(), on_text)
            .map_err(model_error)?;
        Ok(out.text)
    }

    /// A prompt's ids as `lamina generate` makes them (BOS as the
    /// vocabulary says, special-token text parsed).
    fn prompt_ids(&self, prompt: &str) -> PyResult<Vec<u32>> {
        let ids = self
            .tok
            .encode_within(prompt, true, true, self.n_ctx)
            .map_err(model_error)?;
        if ids.is_empty() {
            return Err(PyValueError::new_err(
                "the prompt is empty (and the model adds no BOS token to start from)",
            ));
        }
        Ok(ids)
    }

    /// A conversation's ids through the model's chat template, with the
    /// assistant's turn opened.
    fn chat_ids(&self, messages: &[Message]) -> PyResult<Vec<u32>> {
        let ids = self
            .template
            .render_tokens(&self.tok, messages, true, false)
            .map_err(model_error)?;
        if ids.len() >= self.n_ctx {
            return Err(model_error(ModelError::ContextExceeded {
                n_tokens: ids.len(),
                n_ctx: self.n_ctx,
                at_least: false,
            }));
        }
        Ok(ids)
    }
}

/// A text-generation model: `Generator(model, threads=None, ctx=None)`.
///
/// `model` is a GGUF path or a name in the models directory; `ctx` is the
/// context in tokens (default: the model's, at most 4096).
#[pyclass(frozen, module = "lamina")]
pub struct Generator {
    shared: Arc<Shared>,
    name: String,
}

/// Sampling arguments as Python passes them.
#[allow(clippy::too_many_arguments)]
fn job(
    ids: Vec<u32>,
    max_tokens: Option<usize>,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    seed: Option<u64>,
    stop: Option<Vec<String>>,
) -> PyResult<Job> {
    let check = |name: &str, v: f32, lo: f32, hi: f32| {
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(PyValueError::new_err(format!(
                "{name} is {v}: it must lie between {lo} and {hi}"
            )))
        }
    };
    check("temperature", temperature, 0.0, 100.0)?;
    check("top_p", top_p, 0.0, 1.0)?;
    check("min_p", min_p, 0.0, 1.0)?;
    check("repeat_penalty", repeat_penalty, 1e-6, 100.0)?;
    let seed = seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    Ok(Job {
        ids,
        params: SamplerParams {
            temp: temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            ..SamplerParams::default()
        },
        opts: GenerateOptions {
            max_tokens,
            stop: stop
                .unwrap_or_default()
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
            ignore_eos: false,
        },
    })
}

/// `[{"role": ..., "content": ...}, ...]` as the template takes it.
fn messages(list: &[Bound<'_, PyAny>]) -> PyResult<Vec<Message>> {
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let d = m.cast::<PyDict>().map_err(|_| {
                PyValueError::new_err(format!(
                    "messages[{i}] must be a dict with role and content"
                ))
            })?;
            let field = |k: &str| -> PyResult<String> {
                d.get_item(k)?
                    .ok_or_else(|| PyValueError::new_err(format!("messages[{i}] has no {k:?}")))?
                    .extract::<String>()
                    .map_err(|_| {
                        PyValueError::new_err(format!("messages[{i}].{k} must be a string"))
                    })
            };
            Ok(Message::new(&field("role")?, field("content")?))
        })
        .collect()
}

#[pymethods]
impl Generator {
    #[new]
    #[pyo3(signature = (model, threads = None, ctx = None))]
    fn new(
        py: Python<'_>,
        model: &str,
        threads: Option<usize>,
        ctx: Option<usize>,
    ) -> PyResult<Generator> {
        let path = resolve(py, model)?;
        let pool = thread_pool(threads)?;
        if ctx == Some(0) {
            return Err(PyValueError::new_err("ctx must be at least 1"));
        }
        let shared = py.detach(|| -> Result<Shared, ModelError> {
            let model = LoadOptions::new().load(Load::Map).open(&path)?;
            let tok = Tokenizer::from_gguf(&model.file)?;
            let template = ChatTemplate::for_model(&model.file, model.hp.family, &tok)?;
            let n_ctx = ctx.unwrap_or(model.hp.n_ctx_train.min(DEFAULT_CTX));
            Ok(Shared {
                model,
                tok,
                template,
                n_ctx,
                pool: Mutex::new(pool),
            })
        });
        let shared = shared.map_err(model_error)?;
        if !shared.model.has_lm_head() {
            return Err(PyValueError::new_err(format!(
                "{} is an embedding model ({}): use lamina.Embedder",
                path.display(),
                shared.model.hp.arch_name
            )));
        }
        Ok(Generator {
            shared: Arc::new(shared),
            name: path.display().to_string(),
        })
    }

    /// The context in tokens.
    #[getter]
    fn n_ctx(&self) -> usize {
        self.shared.n_ctx
    }

    /// The continuation of `prompt`. Sampling defaults are llama.cpp's
    /// (temperature 0 is greedy); `seed` defaults to a fresh one; `stop`
    /// strings end the text before them; `max_tokens` None runs to the end
    /// of generation or of the context.
    #[pyo3(signature = (prompt, max_tokens = None, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, seed = None, stop = None))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: &str,
        max_tokens: Option<usize>,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
    ) -> PyResult<String> {
        py.detach(|| {
            let ids = self.shared.prompt_ids(prompt)?;
            let job = job(
                ids,
                max_tokens,
                temperature,
                top_k,
                top_p,
                min_p,
                repeat_penalty,
                seed,
                stop,
            )?;
            self.shared.run(&job, &mut |_| true)
        })
    }

    /// Like `generate`, but an iterator over the pieces of text as they
    /// are made (whole UTF-8 characters).
    #[pyo3(signature = (prompt, max_tokens = None, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, seed = None, stop = None))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        py: Python<'_>,
        prompt: &str,
        max_tokens: Option<usize>,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
    ) -> PyResult<TextStream> {
        let ids = py.detach(|| self.shared.prompt_ids(prompt))?;
        let job = job(
            ids,
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
        )?;
        Ok(TextStream::start(self.shared.clone(), job))
    }

    /// The assistant's reply to `messages` (a list of `{"role", "content"}`
    /// dicts), rendered with the model's chat template. Takes the sampling
    /// arguments of `generate`; `stream=True` returns an iterator instead.
    #[pyo3(signature = (messages, max_tokens = None, temperature = 0.8, top_k = 40, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0, seed = None, stop = None, stream = false))]
    #[allow(clippy::too_many_arguments)]
    fn chat(
        &self,
        py: Python<'_>,
        messages: Vec<Bound<'_, PyAny>>,
        max_tokens: Option<usize>,
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        seed: Option<u64>,
        stop: Option<Vec<String>>,
        stream: bool,
    ) -> PyResult<Py<PyAny>> {
        let msgs = self::messages(&messages)?;
        let ids = py.detach(|| self.shared.chat_ids(&msgs))?;
        let job = job(
            ids,
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            seed,
            stop,
        )?;
        if stream {
            let s = TextStream::start(self.shared.clone(), job);
            return Ok(Py::new(py, s)?.into_any());
        }
        let text = py.detach(|| self.shared.run(&job, &mut |_| true))?;
        Ok(text.into_pyobject(py)?.into_any().unbind())
    }

    /// The token ids of `text` (BOS as the model adds it, special-token
    /// text parsed), as `generate` sees a prompt.
    fn tokenize(&self, py: Python<'_>, text: &str) -> Vec<u32> {
        py.detach(|| self.shared.tok.encode(text, true, true))
    }

    /// The text of token ids (special tokens written out).
    fn detokenize(&self, ids: Vec<u32>) -> PyResult<String> {
        let n = self.shared.tok.n_vocab();
        let mut bytes = Vec::new();
        for id in ids {
            if id as usize >= n {
                return Err(model_error(ModelError::BadToken { id, n_vocab: n }));
            }
            bytes.extend(self.shared.tok.token_to_piece(id, true));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn __repr__(&self) -> String {
        format!("Generator({:?}, n_ctx={})", self.name, self.shared.n_ctx)
    }
}

/// What an engine thread sends a stream.
enum Piece {
    Text(String),
    Error(PyErr),
}

/// The pieces of one generation, as an iterator. Dropping it stops the
/// generation at its next token.
#[pyclass(frozen, module = "lamina")]
pub struct TextStream {
    rx: Mutex<Receiver<Piece>>,
}

impl TextStream {
    fn start(shared: Arc<Shared>, job: Job) -> TextStream {
        // Unbounded: a generation's text is bounded by its context.
        let (tx, rx) = channel::<Piece>();
        std::thread::spawn(move || {
            let send = |tx: &Sender<Piece>, p: Piece| tx.send(p).is_ok();
            let result = shared.run(&job, &mut |piece| {
                piece.is_empty() || send(&tx, Piece::Text(piece.to_string()))
            });
            if let Err(e) = result {
                send(&tx, Piece::Error(e));
            }
        });
        TextStream { rx: Mutex::new(rx) }
    }
}

#[pymethods]
impl TextStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<String> {
        let next = py.detach(|| {
            let rx = self.rx.lock().map_err(|_| poisoned())?;
            Ok::<_, PyErr>(rx.recv().ok())
        })?;
        match next {
            Some(Piece::Text(t)) => Ok(t),
            Some(Piece::Error(e)) => Err(e),
            None => Err(PyStopIteration::new_err(())),
        }
    }
}
