//! `lamina pull` and `-m hf://ORG/REPO[:QUANT]` against a Hugging Face Hub
//! on loopback ([`lamina_testkit::fake_hub`]).

mod common;

use std::path::{Path, PathBuf};

use common::{checkpoint_gguf, err, lamina_env, ok, vector};
use lamina_testkit::fake_hub::FakeHub;
use serde_json::Value;

/// The environment of a user whose hub is `fake` and whose caches are in
/// `root`.
fn env<'a>(fake: &'a FakeHub, root: &'a Path, offline: bool) -> Vec<(&'static str, String)> {
    vec![
        ("HF_ENDPOINT", fake.url().to_string()),
        ("HF_HOME", root.join("hf").display().to_string()),
        ("HF_HUB_CACHE", String::new()),
        ("HF_TOKEN", String::new()),
        ("HUGGING_FACE_HUB_TOKEN", String::new()),
        ("HF_HUB_OFFLINE", if offline { "1" } else { "" }.to_string()),
        ("LAMINA_MODELS", root.join("models").display().to_string()),
    ]
}

fn run(args: &[&str], env: &[(&'static str, String)]) -> std::process::Output {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    lamina_env(args, b"", &env)
}

fn embedding(stdout: &str) -> Vec<f32> {
    vector(&serde_json::from_str(stdout.lines().next().unwrap()).unwrap())
}

/// A fake hub serving the minilm conformance checkpoint as a GGUF repo
/// (its `lamina convert` output) and as a safetensors repo.
fn hub(dir: &Path) -> (FakeHub, PathBuf) {
    let gguf = checkpoint_gguf("minilm", dir);
    let fake = FakeHub::start();
    fake.add_repo("test-org/tiny-GGUF", &[("tiny-F32.gguf", gguf.clone())]);
    let ckpt = dir.join("minilm");
    let mut files = vec![(
        "1_Pooling/config.json".to_string(),
        ckpt.join("1_Pooling/config.json"),
    )];
    for e in std::fs::read_dir(&ckpt).unwrap().flatten() {
        if e.path().is_file() {
            files.push((e.file_name().to_string_lossy().into_owned(), e.path()));
        }
    }
    let files: Vec<(&str, PathBuf)> = files.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    fake.add_repo("test-org/minilm", &files);
    (fake, gguf)
}

#[test]
fn pull_then_embed_by_hub_name_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, gguf) = hub(dir.path());
    let root = tempfile::tempdir().unwrap();

    let out = ok(&run(
        &["pull", "test-org/tiny-GGUF", "--json"],
        &env(&fake, root.path(), false),
    ));
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["repo"], "test-org/tiny-GGUF");
    assert_eq!(v["file"], "tiny-F32.gguf");
    assert_eq!(v["converted"], false);
    assert_eq!(
        v["downloaded_bytes"],
        std::fs::metadata(&gguf).unwrap().len()
    );
    let path = PathBuf::from(v["path"].as_str().unwrap());
    assert!(
        path.starts_with(
            root.path()
                .join("hf/hub/models--test-org--tiny-GGUF/snapshots")
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&gguf).unwrap());

    // The plain form prints the path alone on stdout.
    let plain = ok(&run(
        &["pull", "hf://test-org/tiny-GGUF"],
        &env(&fake, root.path(), false),
    ));
    assert_eq!(plain.trim(), path.display().to_string());

    let local = embedding(&ok(&run(
        &[
            "embed",
            "-m",
            gguf.to_str().unwrap(),
            "--json",
            "a pulled model",
        ],
        &[],
    )));
    let by_name = embedding(&ok(&run(
        &[
            "embed",
            "-m",
            "hf://test-org/tiny-GGUF",
            "--json",
            "a pulled model",
        ],
        &env(&fake, root.path(), true),
    )));
    assert_eq!(by_name, local);
}

#[test]
fn a_checkpoint_by_hub_name_is_converted_on_first_use() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, gguf) = hub(dir.path());
    let root = tempfile::tempdir().unwrap();
    let text = "converted on first use";
    let local = embedding(&ok(&run(
        &["embed", "-m", gguf.to_str().unwrap(), "--json", text],
        &[],
    )));
    let env = env(&fake, root.path(), false);
    let first = embedding(&ok(&run(
        &["embed", "-m", "hf://test-org/minilm:F32", "--json", text],
        &env,
    )));
    assert_eq!(first, local);
    let converted: Vec<_> = std::fs::read_dir(root.path().join("models/hf/test-org--minilm"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(converted.len(), 1, "one commit folder");
    let out = ok(&run(&["pull", "test-org/minilm:F32", "--json"], &env));
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["converted"].clone(), v["downloaded_bytes"].clone()),
        (true.into(), 0.into())
    );
}

#[test]
fn pull_errors_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, _) = hub(dir.path());
    let root = tempfile::tempdir().unwrap();
    let online = env(&fake, root.path(), false);

    let e = err(&run(&["pull", "no-slash"], &online));
    assert!(e.contains("ORG/REPO"), "{e}");
    let e = err(&run(&["pull", "test-org/absent"], &online));
    assert!(e.contains("HF_TOKEN"), "{e}");
    let e = err(&run(&["pull", "test-org/tiny-GGUF:Q4_0"], &online));
    assert!(e.contains("has no Q4_0 GGUF file; it has: F32"), "{e}");
    let e = err(&run(
        &["embed", "-m", "hf://test-org/tiny-GGUF", "x"],
        &env(&fake, root.path(), true),
    ));
    assert!(e.contains("HF_HUB_OFFLINE"), "{e}");
    let mut dead = online.clone();
    dead[0].1 = "http://127.0.0.1:9".into();
    let e = err(&run(&["pull", "test-org/tiny-GGUF"], &dead));
    assert!(e.contains("could not reach http://127.0.0.1:9"), "{e}");
    let e = err(&run(&["embed", "-m", "no-such-model", "x"], &online));
    assert!(e.contains("hf://ORG/REPO"), "{e}");
}
