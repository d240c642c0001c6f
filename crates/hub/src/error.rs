//! What can go wrong between a model's name and its file, each error saying
//! what to do about it.

use std::path::PathBuf;

/// An error finding, downloading, checking or converting a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The model argument is not `ORG/REPO[:QUANT]`.
    #[error(
        "{spec:?} is not a hub model: {why} (write ORG/REPO or ORG/REPO:QUANT, e.g. hf://bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M)"
    )]
    BadSpec { spec: String, why: &'static str },
    /// Neither a file nor a name in the models directory.
    #[error("model {arg:?} not found: it is neither a file nor a name in {} (give a path, a file name there, or hf://ORG/REPO[:QUANT]; in a lamina checkout, `cargo xtask models` fetches the project's own models)", dir.display())]
    NoSuchModel { arg: String, dir: PathBuf },
    /// The hub answered 401 or 403, as it does for a private or gated repo
    /// and, without a token, for one that does not exist.
    #[error("{repo} was refused: {}", if *token { "the token given (HF_TOKEN) has no access to it; check the name, accept the model's terms on the hub, or use another token" } else { "it does not exist, or it is private or gated; check the name, or set HF_TOKEN to a token with access (https://huggingface.co/settings/tokens)" })]
    Unauthorized { repo: String, token: bool },
    /// The hub answered 404.
    #[error("{what} was not found on {endpoint} (check the name's spelling and case)")]
    NotFound { what: String, endpoint: String },
    /// The hub could not be reached or answered with an error.
    #[error(
        "could not reach {endpoint} for {what}: {msg} (set HF_ENDPOINT for a mirror; models pulled before work with HF_HUB_OFFLINE=1)"
    )]
    Network {
        what: String,
        endpoint: String,
        msg: String,
    },
    /// `HF_HUB_OFFLINE` is set and the model is not in the cache.
    #[error("{model} is not in the cache at {} and HF_HUB_OFFLINE is set (pull it once online: lamina pull {model})", cache.display())]
    NotCached { model: String, cache: PathBuf },
    /// The listing or a header holds something a cache path cannot be made of.
    #[error("the hub's answer for {repo} is unusable: {why}")]
    BadListing { repo: String, why: String },
    /// The repo has GGUF files but none of the asked quantization.
    #[error("{repo} has no {quant} GGUF file; it has: {}", available.join(", "))]
    NoSuchQuant {
        repo: String,
        quant: String,
        available: Vec<String>,
    },
    /// The repo has several GGUF files and no `:QUANT` was given.
    #[error("{repo} has no Q4_K_M GGUF file, the default; pick one of its quantizations with {repo}:QUANT: {}", available.join(", "))]
    ChooseQuant {
        repo: String,
        available: Vec<String>,
    },
    /// The chosen file is one part of a split GGUF.
    #[error(
        "{file} in {repo} is one part of a split GGUF, which lamina does not read yet (merge the parts with llama-gguf-split --merge, or pick a smaller quantization)"
    )]
    SplitGguf { repo: String, file: String },
    /// Neither GGUF files nor a safetensors checkpoint.
    #[error(
        "{repo} holds neither GGUF files nor a safetensors checkpoint (config.json and *.safetensors)"
    )]
    NoModelFiles { repo: String },
    /// The downloaded bytes do not hash to the hub's checksum.
    #[error(
        "{file} from {repo} is corrupt: its {algo} is {got}, the hub says {want}; the download was deleted, so pulling again starts afresh"
    )]
    Checksum {
        repo: String,
        file: String,
        algo: &'static str,
        want: String,
        got: String,
    },
    /// A checkpoint's `:QUANT` is not a type `lamina convert` writes.
    #[error("{repo} is a safetensors checkpoint, which is converted on first use: {msg}")]
    BadType { repo: String, msg: String },
    /// Converting a safetensors checkpoint failed.
    #[error("converting {repo} to GGUF: {source}")]
    Convert {
        repo: String,
        #[source]
        source: lamina_model::convert::Error,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> HubError {
        let path = path.into();
        move |source| HubError::Io { path, source }
    }
}
