//! `lamina.Embedder`: texts to vectors, as `lamina embed` computes them.

use std::sync::Mutex;

use lamina_model::embed::{EmbedOptions, Embedder as Engine};
use lamina_model::{Load, LoadOptions, ThreadPool};
use numpy::IntoPyArray;
use numpy::ndarray::Array2;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{model_error, poisoned, resolve, thread_pool};

struct Inner {
    engine: Engine,
    pool: Box<dyn ThreadPool + Send>,
}

/// An embedding model: `Embedder(model, threads=None)`.
///
/// `model` is a GGUF path or a name in the models directory. `encode`
/// follows sentence-transformers' `encode` where the names overlap.
#[pyclass(frozen, module = "lamina")]
pub struct Embedder {
    inner: Mutex<Inner>,
    dim: usize,
    name: String,
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model, threads = None))]
    fn new(py: Python<'_>, model: &str, threads: Option<usize>) -> PyResult<Embedder> {
        let path = resolve(py, model)?;
        let pool = thread_pool(threads)?;
        let engine = py.detach(|| {
            let model = LoadOptions::new().load(Load::Map).open(&path)?;
            Engine::new(model)
        });
        let engine = engine.map_err(model_error)?;
        if engine.is_reranker() {
            return Err(PyValueError::new_err(format!(
                "{} is a reranker (a cross-encoder), not an embedding model",
                path.display()
            )));
        }
        Ok(Embedder {
            dim: engine.dim(),
            name: path.display().to_string(),
            inner: Mutex::new(Inner { engine, pool }),
        })
    }

    /// Width of the vectors (before `dim` truncation).
    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    /// The model's task prompts (`query`, `document`, ...) by name.
    #[getter]
    fn tasks(&self) -> PyResult<Vec<(String, String)>> {
        let inner = self.inner.lock().map_err(|_| poisoned())?;
        Ok(inner
            .engine
            .tasks()
            .iter()
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect())
    }

    /// Vectors of `texts` as a float32 array: of shape (n, d) for a list
    /// of strings, (d,) for one string, as sentence-transformers returns. `task` (or `prompt_name`) prepends the
    /// model's prompt of that name, or the text given if the model has
    /// none of that name. `dim` truncates (Matryoshka) and renormalises.
    /// `normalize` scales each vector to length 1 (off: the pooled vectors
    /// as they are). `batch_size` is the most
    /// texts per forward pass; `truncate` cuts texts longer than the
    /// context instead of refusing them.
    #[pyo3(signature = (texts, task = None, dim = None, batch_size = 32, normalize = true, truncate = false, prompt_name = None))]
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: TextsArg,
        task: Option<String>,
        dim: Option<usize>,
        batch_size: usize,
        normalize: bool,
        truncate: bool,
        prompt_name: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        let task = match (task, prompt_name) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "give either task or prompt_name, not both",
                ));
            }
            (t, p) => t.or(p),
        };
        let TextsArg { texts, single } = texts;
        let rows = py.detach(|| -> PyResult<Vec<f32>> {
            let mut inner = self.inner.lock().map_err(|_| poisoned())?;
            let Inner { engine, pool } = &mut *inner;
            let prefix = match &task {
                None => String::new(),
                Some(name) => engine.task_prefix(name).unwrap_or(name).to_string(),
            };
            let opts = EmbedOptions {
                prefix,
                dim,
                truncate,
                normalize,
                ..EmbedOptions::default()
            };
            let width = dim.unwrap_or(engine.dim());
            let mut out = Vec::with_capacity(texts.len() * width);
            for chunk in texts.chunks(batch_size) {
                let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
                let vecs = engine
                    .embed(&refs, &opts, pool.as_ref())
                    .map_err(model_error)?;
                for e in vecs {
                    out.extend(e.vector);
                }
            }
            Ok(out)
        })?;
        let n = texts.len();
        let width = rows.len().checked_div(n).unwrap_or(dim.unwrap_or(self.dim));
        if single {
            return Ok(rows.into_pyarray(py).into_any());
        }
        let array = Array2::from_shape_vec((n, width), rows)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py).into_any())
    }

    /// The token ids of `text` as the model sees it (special tokens included).
    fn tokenize(&self, py: Python<'_>, text: &str) -> PyResult<Vec<u32>> {
        py.detach(|| {
            let inner = self.inner.lock().map_err(|_| poisoned())?;
            let opts = EmbedOptions {
                truncate: true,
                ..EmbedOptions::default()
            };
            inner.engine.tokenize(text, &opts).map_err(model_error)
        })
    }

    fn __repr__(&self) -> String {
        format!("Embedder({:?}, dim={})", self.name, self.dim)
    }
}

/// `texts`: one string or a sequence of strings.
pub struct TextsArg {
    texts: Vec<String>,
    single: bool,
}

impl<'a, 'py> FromPyObject<'a, 'py> for TextsArg {
    type Error = PyErr;

    fn extract(ob: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<TextsArg> {
        if let Ok(s) = ob.extract::<String>() {
            return Ok(TextsArg {
                texts: vec![s],
                single: true,
            });
        }
        ob.extract::<Vec<String>>()
            .map(|texts| TextsArg {
                texts,
                single: false,
            })
            .map_err(|_| PyValueError::new_err("texts must be a string or a list of strings"))
    }
}
