//! [`Hub`]: where models come from, where they are kept, and how a name
//! becomes a GGUF file.

use std::io::Read;
use std::path::{Path, PathBuf};

use hf_hub::Cache;
use hf_hub::api::sync::{Api, ApiBuilder, ApiError, ApiRepo};
use lamina_model::convert::{self, ConvertOptions, OutType};

use crate::progress::ConvertBar;
use crate::select::{self, Plan};
use crate::verify::{self, Algo};
use crate::{HubError, HubModel};

/// The hub's address unless `HF_ENDPOINT` names another.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The most bytes a repo listing may take.
const MAX_LISTING_BYTES: u64 = 16 << 20;
/// The most files a repo listing may name.
const MAX_LISTED_FILES: usize = 100_000;

/// Where models come from and where they are kept, read from the variables
/// Python's `huggingface_hub` reads, so both share one cache.
///
/// ```no_run
/// use lamina_hub::{Hub, HubModel};
///
/// let model = HubModel::parse("hf://bartowski/SmolLM2-135M-Instruct-GGUF:Q8_0")?;
/// let pulled = Hub::from_env().resolve(&model)?;
/// println!("{}", pulled.path.display());
/// # Ok::<(), lamina_hub::HubError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Hub {
    endpoint: String,
    cache: PathBuf,
    token: Option<String>,
    offline: bool,
    progress: bool,
    converted: PathBuf,
    retries: usize,
}

/// A model ready to load.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The GGUF file to load.
    pub path: PathBuf,
    /// The model as it was asked for.
    pub model: HubModel,
    /// The commit its files come from.
    pub commit: String,
    /// The repo's GGUF file, used as it is; `None` for a converted checkpoint.
    pub file: Option<String>,
    /// Bytes this call downloaded (0 when everything was in the cache).
    pub downloaded: u64,
}

impl Hub {
    /// Settings from the environment:
    /// - `HF_ENDPOINT`: the hub's address (default `https://huggingface.co`);
    /// - `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`:
    ///   the cache;
    /// - `HF_TOKEN`, else the token file `huggingface-cli login` writes: the
    ///   token for private and gated repos;
    /// - `HF_HUB_OFFLINE=1`: use the cache only;
    /// - `$LAMINA_MODELS/hf`: where converted checkpoints go.
    pub fn from_env() -> Hub {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/huggingface")
        });
        let cache = var("HF_HUB_CACHE").map_or_else(|| hf_home.join("hub"), PathBuf::from);
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let file = std::fs::read_to_string(hf_home.join("token")).ok()?;
                Some(file.trim().to_string()).filter(|t| !t.is_empty())
            });
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        Hub {
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
            cache,
            token,
            offline,
            progress: true,
            converted: lamina_model::load::models_dir().join("hf"),
            retries: 3,
        }
        .endpoint_trimmed()
    }

    fn endpoint_trimmed(mut self) -> Hub {
        while self.endpoint.ends_with('/') {
            self.endpoint.pop();
        }
        self
    }

    /// Uses the hub (or mirror) at `url`.
    pub fn endpoint(mut self, url: impl Into<String>) -> Hub {
        self.endpoint = url.into();
        self.endpoint_trimmed()
    }

    /// Keeps downloads in `dir`, laid out as the Hugging Face cache.
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Hub {
        self.cache = dir.into();
        self
    }

    /// Sends `token` with every request (`None`: none).
    pub fn token(mut self, token: Option<String>) -> Hub {
        self.token = token;
        self
    }

    /// Uses the cache only, never the network.
    pub fn offline(mut self, offline: bool) -> Hub {
        self.offline = offline;
        self
    }

    /// Draws progress bars on standard error (when it is a terminal).
    pub fn progress(mut self, progress: bool) -> Hub {
        self.progress = progress;
        self
    }

    /// Writes checkpoints converted to GGUF under `dir`.
    pub fn converted_dir(mut self, dir: impl Into<PathBuf>) -> Hub {
        self.converted = dir.into();
        self
    }

    /// Retries a broken download this many times, each resuming where the
    /// last stopped (default 3).
    pub fn retries(mut self, retries: usize) -> Hub {
        self.retries = retries;
        self
    }

    /// The cache folder.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// The model from the cache when it is there, else [`Hub::pull`]: once
    /// pulled, a model loads without the network.
    pub fn resolve(&self, model: &HubModel) -> Result<Pulled, HubError> {
        match self.cached(model)? {
            Some(pulled) => Ok(pulled),
            None => self.pull(model),
        }
    }

    /// Asks the hub for the repo's newest files and downloads (and, for a
    /// checkpoint, converts) what the cache lacks. Offline, the cached
    /// model or [`HubError::NotCached`].
    pub fn pull(&self, model: &HubModel) -> Result<Pulled, HubError> {
        if self.offline {
            return self.cached(model)?.ok_or_else(|| HubError::NotCached {
                model: model.to_string(),
                cache: self.cache.clone(),
            });
        }
        let api = self.api(model)?;
        let repo = api.model(model.repo().to_string());
        let (commit, files) = self.listing(&repo, model)?;
        let snapshot = self.repo_dir(model).join("snapshots").join(&commit);
        match select::plan(model, &files)? {
            Plan::Gguf(file) => {
                let downloaded = self.fetch(&repo, model, &snapshot, &file)?;
                Ok(Pulled {
                    path: snapshot.join(&file),
                    model: model.clone(),
                    commit,
                    file: Some(file),
                    downloaded,
                })
            }
            Plan::Checkpoint(files) => {
                let (out_type, type_name) = checkpoint_type(model)?;
                let mut downloaded = 0;
                for file in &files {
                    downloaded += self.fetch(&repo, model, &snapshot, file)?;
                }
                let out = self.converted_path(model, &commit, &type_name);
                if !out.is_file() {
                    self.convert(model, &snapshot, &out, out_type)?;
                }
                Ok(Pulled {
                    path: out,
                    model: model.clone(),
                    commit,
                    file: None,
                    downloaded,
                })
            }
        }
    }

    /// The model as the cache holds it at `refs/main`, converting a cached
    /// checkpoint when offline; `None` when the network is needed.
    fn cached(&self, model: &HubModel) -> Result<Option<Pulled>, HubError> {
        let dir = self.repo_dir(model);
        let Ok(commit) = std::fs::read_to_string(dir.join("refs").join("main")) else {
            return Ok(None);
        };
        let commit = commit.trim().to_string();
        if Algo::of(&commit) != Some(Algo::GitSha1) {
            return Ok(None);
        }
        let snapshot = dir.join("snapshots").join(&commit);
        let files = list_files(&snapshot);
        let pulled = |path, file| Pulled {
            path,
            model: model.clone(),
            commit: commit.clone(),
            file,
            downloaded: 0,
        };
        match select::plan(model, &files) {
            Ok(Plan::Gguf(file)) => Ok(Some(pulled(snapshot.join(&file), Some(file)))),
            Ok(Plan::Checkpoint(_)) => {
                let (out_type, type_name) = checkpoint_type(model)?;
                let out = self.converted_path(model, &commit, &type_name);
                if !out.is_file() {
                    if !self.offline {
                        return Ok(None);
                    }
                    self.convert(model, &snapshot, &out, out_type)?;
                }
                Ok(Some(pulled(out, None)))
            }
            Err(_) => Ok(None),
        }
    }

    fn repo_dir(&self, model: &HubModel) -> PathBuf {
        self.cache.join(model.cache_folder())
    }

    /// `<converted>/<org>--<name>/<commit>/<name>-<TYPE>.gguf`.
    fn converted_path(&self, model: &HubModel, commit: &str, type_name: &str) -> PathBuf {
        let name = model.repo().rsplit('/').next().unwrap_or(model.repo());
        self.converted
            .join(model.repo().replace('/', "--"))
            .join(commit)
            .join(format!("{name}-{type_name}.gguf"))
    }

    fn api(&self, model: &HubModel) -> Result<Api, HubError> {
        ApiBuilder::from_cache(Cache::new(self.cache.clone()))
            .with_endpoint(self.endpoint.clone())
            .with_token(self.token.clone())
            .with_progress(self.progress)
            .with_retries(self.retries)
            .with_user_agent("lamina", env!("CARGO_PKG_VERSION"))
            .build()
            .map_err(|e| self.api_error(e, model, &self.endpoint))
    }

    /// The repo's commit and file names, each checked before it names a
    /// path.
    fn listing(&self, repo: &ApiRepo, model: &HubModel) -> Result<(String, Vec<String>), HubError> {
        let what = format!("the file list of {}", model.repo());
        let response = repo
            .info_request()
            .call()
            .map_err(|e| self.request_error(e, model, &what))?;
        let mut body = Vec::new();
        response
            .into_reader()
            .take(MAX_LISTING_BYTES + 1)
            .read_to_end(&mut body)
            .map_err(|e| self.network(&what, e.to_string()))?;
        let bad = |why: String| HubError::BadListing {
            repo: model.repo().to_string(),
            why,
        };
        if body.len() as u64 > MAX_LISTING_BYTES {
            return Err(bad(format!(
                "the listing is over {MAX_LISTING_BYTES} bytes"
            )));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| bad(format!("the listing is not JSON: {e}")))?;
        let commit = v["sha"].as_str().unwrap_or_default().to_ascii_lowercase();
        if Algo::of(&commit) != Some(Algo::GitSha1) {
            return Err(bad(format!("its commit {commit:?} is not a git hash")));
        }
        let siblings = v["siblings"]
            .as_array()
            .ok_or_else(|| bad("the listing has no \"siblings\"".into()))?;
        if siblings.len() > MAX_LISTED_FILES {
            return Err(bad(format!("it lists over {MAX_LISTED_FILES} files")));
        }
        let mut files = Vec::with_capacity(siblings.len());
        for s in siblings {
            let name = s["rfilename"]
                .as_str()
                .ok_or_else(|| bad("a file has no \"rfilename\"".into()))?;
            select::check_name(model.repo(), name)?;
            files.push(name.to_string());
        }
        Ok((commit, files))
    }

    /// Downloads `file` unless the snapshot has it, checks its checksum and
    /// returns the bytes downloaded. A corrupt download is deleted.
    fn fetch(
        &self,
        repo: &ApiRepo,
        model: &HubModel,
        snapshot: &Path,
        file: &str,
    ) -> Result<u64, HubError> {
        if snapshot.join(file).is_file() {
            return Ok(0);
        }
        let what = format!("{file} of {}", model.repo());
        let pointer = repo
            .download(file)
            .map_err(|e| self.api_error(e, model, &what))?;
        let blob = std::fs::canonicalize(&pointer).map_err(HubError::io(&pointer))?;
        if let Err(e) = verify::check(model.repo(), file, &blob) {
            let _ = std::fs::remove_file(&blob);
            let _ = std::fs::remove_file(&pointer);
            return Err(e);
        }
        if pointer != snapshot.join(file) {
            return Err(HubError::BadListing {
                repo: model.repo().to_string(),
                why: format!(
                    "{file} came from another commit than the listing's; the repo changed \
                     while pulling, so pull again"
                ),
            });
        }
        Ok(std::fs::metadata(&blob).map_err(HubError::io(&blob))?.len())
    }

    fn convert(
        &self,
        model: &HubModel,
        snapshot: &Path,
        out: &Path,
        out_type: OutType,
    ) -> Result<(), HubError> {
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent).map_err(HubError::io(parent))?;
        }
        let opts = ConvertOptions {
            input: snapshot.to_path_buf(),
            output: out.to_path_buf(),
            out_type,
            dense_modules: true,
            bert_pooler: true,
            model_id: Some(model.repo().to_string()),
        };
        let bar = ConvertBar::new(self.progress);
        let result = convert::convert(&opts, &mut |p| bar.report(p));
        bar.finish();
        result.map(|_| ()).map_err(|source| HubError::Convert {
            repo: model.repo().to_string(),
            source,
        })
    }

    fn network(&self, what: &str, msg: String) -> HubError {
        HubError::Network {
            what: what.to_string(),
            endpoint: self.endpoint.clone(),
            msg,
        }
    }

    fn request_error(&self, e: ureq::Error, model: &HubModel, what: &str) -> HubError {
        match e {
            ureq::Error::Status(401 | 403, _) => HubError::Unauthorized {
                repo: model.repo().to_string(),
                token: self.token.is_some(),
            },
            ureq::Error::Status(404, _) => HubError::NotFound {
                what: what.to_string(),
                endpoint: self.endpoint.clone(),
            },
            ureq::Error::Status(code, r) => {
                self.network(what, format!("HTTP {code} {}", r.status_text()))
            }
            ureq::Error::Transport(t) => self.network(what, t.to_string()),
        }
    }

    fn api_error(&self, e: ApiError, model: &HubModel, what: &str) -> HubError {
        match e {
            ApiError::RequestError(e) => self.request_error(*e, model, what),
            ApiError::TooManyRetries(inner) => self.api_error(*inner, model, what),
            ApiError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => self
                .network(
                    what,
                    format!("the download broke off ({io}); pulling again resumes it"),
                ),
            // Writing the cache failed (a full disk, a read-only folder).
            ApiError::IoError(source) => HubError::Io {
                path: self.cache.clone(),
                source,
            },
            other => self.network(what, other.to_string()),
        }
    }
}

/// What a checkpoint is converted to: its `:QUANT` as a `lamina convert`
/// type, f16 when none is asked for (the Python converter's default).
fn checkpoint_type(model: &HubModel) -> Result<(OutType, String), HubError> {
    let name = model.quant().unwrap_or("F16");
    let out_type = OutType::parse(name).map_err(|e| HubError::BadType {
        repo: model.repo().to_string(),
        msg: e.to_string(),
    })?;
    Ok((out_type, name.to_ascii_uppercase()))
}

/// The files under a snapshot folder, as `/`-separated relative names
/// (two levels deep, as repos that hold models are).
fn list_files(snapshot: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let Ok(top) = std::fs::read_dir(snapshot) else {
        return files;
    };
    for entry in top.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if path.is_dir() {
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                if inner.path().is_file() {
                    files.push(format!("{name}/{}", inner.file_name().to_string_lossy()));
                }
            }
        } else if path.is_file() {
            files.push(name);
        }
    }
    files.sort();
    files
}
