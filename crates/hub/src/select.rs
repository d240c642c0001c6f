//! Which of a repo's files make the model: one GGUF chosen by its
//! quantization, or the files `lamina convert` reads from a checkpoint.

use std::path::{Component, Path};

use crate::{HubError, HubModel};

/// The quantization picked when none is asked for, as llama.cpp picks it.
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// What to fetch for a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// One GGUF file, used as it is.
    Gguf(String),
    /// A safetensors checkpoint's files, converted after download.
    Checkpoint(Vec<String>),
}

/// Refuses a listed file name that is not a plain relative path, since the
/// cache places each file at the snapshot folder joined with its name.
pub(crate) fn check_name(repo: &str, name: &str) -> Result<(), HubError> {
    let bad = |why: &str| HubError::BadListing {
        repo: repo.to_string(),
        why: format!("file name {name:?} {why}"),
    };
    if name.is_empty() || name.len() > 1024 {
        return Err(bad("is empty or longer than 1024 bytes"));
    }
    if name.contains('\\') || name.chars().any(char::is_control) {
        return Err(bad("holds a backslash or a control character"));
    }
    let plain = Path::new(name)
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if !plain || name.ends_with('/') || name.contains("//") {
        return Err(bad("is not a plain relative path"));
    }
    Ok(())
}

/// Decides what to fetch from a repo holding `files`.
pub(crate) fn plan(model: &HubModel, files: &[String]) -> Result<Plan, HubError> {
    let ggufs: Vec<&String> = files.iter().filter(|f| is_model_gguf(f)).collect();
    if !ggufs.is_empty() {
        return choose_gguf(model, &ggufs).map(Plan::Gguf);
    }
    let has = |want: &dyn Fn(&str) -> bool| files.iter().any(|f| want(f));
    if has(&|f| f == "config.json") && has(&|f| !f.contains('/') && f.ends_with(".safetensors")) {
        let wanted = files
            .iter()
            .filter(|f| checkpoint_file(f))
            .cloned()
            .collect();
        return Ok(Plan::Checkpoint(wanted));
    }
    Err(HubError::NoModelFiles {
        repo: model.repo().to_string(),
    })
}

/// A GGUF that holds a model (vision projectors are GGUFs too).
fn is_model_gguf(name: &str) -> bool {
    let base = file_name(name).to_ascii_lowercase();
    base.ends_with(".gguf") && !base.contains("mmproj")
}

fn file_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// The quantization a GGUF's name ends with, upper-cased:
/// `Llama-3.2-1B-Instruct-Q4_K_M.gguf` and `qwen2.5-0.5b-instruct-q4_k_m.gguf`
/// are both `Q4_K_M`, `SmolLM2-135M.Q8_0.gguf` is `Q8_0`.
pub(crate) fn quant_of(name: &str) -> String {
    let stem = file_name(name);
    let stem = stem
        .get(..stem.len().saturating_sub(".gguf".len()))
        .unwrap_or(stem);
    let stem = split_part(stem).map_or(stem, |(whole, _)| whole);
    stem.rsplit(['-', '.'])
        .next()
        .unwrap_or(stem)
        .to_ascii_uppercase()
}

/// `(stem, part)` when a stem ends with llama.cpp's split suffix
/// `-00001-of-00003`.
fn split_part(stem: &str) -> Option<(&str, &str)> {
    let (head, tail) = stem.rsplit_once("-of-")?;
    let (whole, part) = head.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    (digits(part) && digits(tail)).then_some((whole, part))
}

fn choose_gguf(model: &HubModel, ggufs: &[&String]) -> Result<String, HubError> {
    let repo = model.repo().to_string();
    let want = model.quant().unwrap_or(DEFAULT_QUANT);
    let mut matching: Vec<&String> = ggufs
        .iter()
        .copied()
        .filter(|f| quant_of(f).eq_ignore_ascii_case(want))
        .collect();
    matching.sort();
    let chosen = match (matching.first(), model.quant()) {
        (Some(f), _) => (*f).clone(),
        (None, None) if ggufs.len() == 1 => ggufs[0].clone(),
        (None, quant) => {
            let mut available: Vec<String> = ggufs.iter().map(|f| quant_of(f)).collect();
            available.sort();
            available.dedup();
            return Err(match quant {
                Some(q) => HubError::NoSuchQuant {
                    repo,
                    quant: q.to_string(),
                    available,
                },
                None => HubError::ChooseQuant { repo, available },
            });
        }
    };
    let stem = file_name(&chosen).trim_end_matches(".gguf");
    if split_part(stem).is_some() {
        return Err(HubError::SplitGguf { repo, file: chosen });
    }
    Ok(chosen)
}

/// A file `lamina convert` may read: configs, weights and tokenizer files
/// at the top, and sentence-transformers' numbered module folders
/// (`1_Pooling/`, `2_Dense/`); not ONNX or OpenVINO exports, nor the
/// PyTorch `.bin` twins of the safetensors.
fn checkpoint_file(name: &str) -> bool {
    let wanted_ext = [".json", ".safetensors", ".txt", ".model"]
        .iter()
        .any(|e| name.ends_with(e));
    match name.split_once('/') {
        None => wanted_ext,
        Some((dir, rest)) => {
            let module = dir
                .split_once('_')
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            module && !rest.contains('/') && wanted_ext
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(spec: &str) -> HubModel {
        HubModel::parse(spec).unwrap()
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn quantization_from_file_names() {
        for (file, q) in [
            ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
            ("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
            ("SmolLM2-135M.Q8_0.gguf", "Q8_0"),
            ("ggml-model-f16.gguf", "F16"),
            ("Q6_K/model-Q6_K-00001-of-00002.gguf", "Q6_K"),
        ] {
            assert_eq!(quant_of(file), q, "{file}");
        }
    }

    #[test]
    fn picks_the_asked_quant_else_q4_k_m_else_the_only_one() {
        let files = names(&[
            "README.md",
            "m-Q8_0.gguf",
            "m-Q4_K_M.gguf",
            "m-Q4_K_S.gguf",
            "mmproj-m-f16.gguf",
        ]);
        let pick = |spec| plan(&model(spec), &files);
        assert_eq!(pick("a/m:q8_0").unwrap(), Plan::Gguf("m-Q8_0.gguf".into()));
        assert_eq!(pick("a/m").unwrap(), Plan::Gguf("m-Q4_K_M.gguf".into()));
        let err = pick("a/m:Q4_K").unwrap_err().to_string();
        assert!(err.contains("Q4_K_M, Q4_K_S, Q8_0"), "{err}");
        let only = names(&["m-F16.gguf", "mmproj.gguf"]);
        assert_eq!(
            plan(&model("a/m"), &only).unwrap(),
            Plan::Gguf("m-F16.gguf".into())
        );
        let two = names(&["m-F16.gguf", "m-Q8_0.gguf"]);
        let err = plan(&model("a/m"), &two).unwrap_err().to_string();
        assert!(err.contains("F16, Q8_0"), "{err}");
        let split = names(&[
            "m-Q4_K_M-00001-of-00002.gguf",
            "m-Q4_K_M-00002-of-00002.gguf",
        ]);
        assert!(matches!(
            plan(&model("a/m"), &split),
            Err(HubError::SplitGguf { .. })
        ));
    }

    #[test]
    fn a_checkpoint_without_its_exports() {
        let files = names(&[
            ".gitattributes",
            "README.md",
            "config.json",
            "model.safetensors",
            "pytorch_model.bin",
            "tokenizer.json",
            "vocab.txt",
            "modules.json",
            "1_Pooling/config.json",
            "onnx/model.onnx",
            "onnx/config.json",
            "openvino/openvino_model.xml",
        ]);
        let Plan::Checkpoint(got) = plan(&model("a/m"), &files).unwrap() else {
            panic!("not a checkpoint");
        };
        assert_eq!(
            got,
            names(&[
                "config.json",
                "model.safetensors",
                "tokenizer.json",
                "vocab.txt",
                "modules.json",
                "1_Pooling/config.json",
            ])
        );
        assert!(matches!(
            plan(&model("a/m"), &names(&["README.md"])),
            Err(HubError::NoModelFiles { .. })
        ));
    }

    #[test]
    fn names_that_leave_the_snapshot_are_refused() {
        for bad in [
            "../x",
            "/etc/passwd",
            "a/../../b",
            "a\\b",
            "",
            "a//b",
            "dir/",
            "./a",
        ] {
            assert!(check_name("a/m", bad).is_err(), "{bad:?}");
        }
        for good in ["model.gguf", "1_Pooling/config.json", "Q4/m.gguf"] {
            check_name("a/m", good).unwrap();
        }
    }
}
