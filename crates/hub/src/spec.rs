//! `ORG/REPO[:QUANT]`: how a model on the Hugging Face Hub is named.

use std::fmt;

use crate::HubError;

/// The prefix that marks a model argument as a hub name.
pub const SCHEME: &str = "hf://";

/// A model on the Hugging Face Hub: a repo, and which quantization of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubModel {
    repo: String,
    quant: Option<String>,
}

impl HubModel {
    /// Parses `ORG/REPO` or `ORG/REPO:QUANT`, with or without `hf://`.
    pub fn parse(spec: &str) -> Result<HubModel, HubError> {
        let bad = |why| HubError::BadSpec {
            spec: spec.to_string(),
            why,
        };
        let s = spec.strip_prefix(SCHEME).unwrap_or(spec);
        let (repo, quant) = match s.split_once(':') {
            Some((repo, quant)) => (repo, Some(quant)),
            None => (s, None),
        };
        let Some((org, name)) = repo.split_once('/') else {
            return Err(bad("it has no '/' between owner and name"));
        };
        for part in [org, name] {
            check_repo_part(part).map_err(bad)?;
        }
        if let Some(q) = quant {
            if q.is_empty() || q.len() > 32 {
                return Err(bad("the quantization after ':' must be 1 to 32 characters"));
            }
            if !q.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(bad("a quantization holds only letters, digits and '_'"));
            }
        }
        Ok(HubModel {
            repo: repo.to_string(),
            quant: quant.map(str::to_string),
        })
    }

    /// `Some` when `arg` starts with `hf://`: a model argument that names a
    /// hub model rather than a file.
    pub fn from_uri(arg: &str) -> Option<Result<HubModel, HubError>> {
        arg.starts_with(SCHEME).then(|| HubModel::parse(arg))
    }

    /// `ORG/REPO`.
    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The quantization asked for, as written.
    pub fn quant(&self) -> Option<&str> {
        self.quant.as_deref()
    }

    /// The repo's folder in the Hugging Face cache.
    pub(crate) fn cache_folder(&self) -> String {
        format!("models--{}", self.repo.replace('/', "--"))
    }
}

impl fmt::Display for HubModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.quant {
            Some(q) => write!(f, "{}:{q}", self.repo),
            None => f.write_str(&self.repo),
        }
    }
}

/// The hub's rule for owner and repo names, which also keeps them safe as
/// cache folder names.
fn check_repo_part(part: &str) -> Result<(), &'static str> {
    if part.is_empty() || part.len() > 96 {
        return Err("owner and name must be 1 to 96 characters");
    }
    if !part
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("owner and name hold only letters, digits, '-', '_' and '.'");
    }
    if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
        return Err("owner and name cannot start or end with '-' or '.'");
    }
    if part.contains("--") || part.contains("..") {
        return Err("owner and name cannot hold '--' or '..'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repo_and_quant() {
        let m = HubModel::parse("hf://bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M").unwrap();
        assert_eq!(m.repo(), "bartowski/Llama-3.2-1B-Instruct-GGUF");
        assert_eq!(m.quant(), Some("Q4_K_M"));
        assert_eq!(m.to_string(), "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M");
        assert_eq!(
            m.cache_folder(),
            "models--bartowski--Llama-3.2-1B-Instruct-GGUF"
        );
        let m = HubModel::parse("sentence-transformers/all-MiniLM-L6-v2").unwrap();
        assert_eq!(m.quant(), None);
        assert!(HubModel::from_uri("models/x.gguf").is_none());
    }

    #[test]
    fn refuses_names_that_escape_the_cache() {
        for bad in [
            "noslash",
            "a/b/c",
            "../etc:Q4",
            "org/..",
            "org/.hidden",
            "org/a--b",
            "/abs",
            "org/name:",
            "org/name:Q4/../x",
            "org/na me",
            "org/name:Q4:K",
        ] {
            assert!(HubModel::parse(bad).is_err(), "{bad}");
        }
    }
}
