//! `lamina` for Python: [`embedder::Embedder`] and
//! [`generator::Generator`] over the engine's own crates, so their numbers
//! are the CLI's.
//!
//! The GIL is released while the engine computes. Each object runs one
//! call at a time behind its own lock, so one object can be shared between
//! Python threads. Engine errors become Python exceptions with the engine's
//! message: `ValueError` for bad input, `FileNotFoundError` for a model
//! that is not there, `PermissionError` for a gated hub repo without a
//! token, `ConnectionError` when the hub cannot be reached, `RuntimeError`
//! otherwise.

#![forbid(unsafe_code)]

mod embedder;
mod generator;

use std::path::PathBuf;

use lamina_hub::HubError;
use lamina_model::{ModelError, Rayon, SpinPool, ThreadPool};
use pyo3::exceptions::{
    PyConnectionError, PyFileNotFoundError, PyPermissionError, PyRuntimeError, PyValueError,
};
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

/// A model argument, as the CLI resolves it ([`lamina_hub::resolve`]): a
/// path, a file name in the models directory ($LAMINA_MODELS, else
/// ~/.cache/lamina/models), or `hf://ORG/REPO[:QUANT]`, pulled from the
/// Hugging Face Hub on first use with the GIL released.
fn resolve(py: Python<'_>, model: &str) -> PyResult<PathBuf> {
    py.detach(|| lamina_hub::resolve(model)).map_err(hub_error)
}

/// A hub or lookup error as the Python exception that fits it.
fn hub_error(e: HubError) -> PyErr {
    let msg = e.to_string();
    match e {
        HubError::NoSuchModel { .. }
        | HubError::NotFound { .. }
        | HubError::NotCached { .. }
        | HubError::NoModelFiles { .. } => PyFileNotFoundError::new_err(msg),
        HubError::BadSpec { .. }
        | HubError::NoSuchQuant { .. }
        | HubError::ChooseQuant { .. }
        | HubError::SplitGguf { .. }
        | HubError::BadType { .. } => PyValueError::new_err(msg),
        HubError::Unauthorized { .. } => PyPermissionError::new_err(msg),
        HubError::Network { .. } => PyConnectionError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
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
