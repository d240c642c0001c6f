//! `lamina` for Python: [`embedder::Embedder`] and
//! [`generator::Generator`] over the engine's own crates, so their numbers
//! are the CLI's.
//!
//! The GIL is released while the engine computes. Each object runs one
//! call at a time behind its own lock, so one object can be shared between
//! Python threads. Engine errors become Python exceptions with the engine's
//! message: `ValueError` for bad input, `FileNotFoundError` for a model
//! that is not there, `RuntimeError` otherwise.

#![forbid(unsafe_code)]

mod embedder;
mod generator;

use std::path::{Path, PathBuf};

use lamina_model::{ModelError, Rayon, SpinPool, ThreadPool};
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The compute pool of one object, as the CLI makes it: `threads` workers
/// (default every core) of the spinning pool, or rayon's global pool with
/// `LAMINA_POOL=rayon`.
fn thread_pool(threads: Option<usize>) -> PyResult<Box<dyn ThreadPool + Send>> {
    let n = match threads {
        Some(0) => return Err(PyValueError::new_err("threads must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    // A second call in one process keeps the first size.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
    match std::env::var("LAMINA_POOL").as_deref() {
        Ok("rayon") => Ok(Box::new(Rayon)),
        Ok("spin") | Ok("") | Err(_) => Ok(Box::new(SpinPool::new(n))),
        Ok(other) => Err(PyValueError::new_err(format!(
            "LAMINA_POOL={other:?}: use spin (the default) or rayon"
        ))),
    }
}

/// A model argument: an existing path, or a file name (with or without
/// `.gguf`) in the models directory ($LAMINA_MODELS, else
/// ~/.cache/lamina/models), as the CLI resolves it.
fn resolve(model: &str) -> PyResult<PathBuf> {
    if Path::new(model).exists() {
        return Ok(PathBuf::from(model));
    }
    let dir = lamina_model::load::models_dir();
    lamina_model::load::find_model(model).ok_or_else(|| {
        PyFileNotFoundError::new_err(format!(
            "model {model:?} not found: it is neither a file nor a name in {}",
            dir.display()
        ))
    })
}

/// An engine error as the Python exception that fits it.
fn model_error(e: ModelError) -> PyErr {
    match e {
        ModelError::Input(_)
        | ModelError::BadDim { .. }
        | ModelError::BadToken { .. }
        | ModelError::ContextExceeded { .. }
        | ModelError::Grammar(_) => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// A lock poisoned by a panic in an earlier call.
fn poisoned() -> PyErr {
    PyRuntimeError::new_err("an earlier call failed inside the engine; create the object again")
}

#[pymodule]
fn lamina(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<embedder::Embedder>()?;
    m.add_class::<generator::Generator>()?;
    m.add_class::<generator::TextStream>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
