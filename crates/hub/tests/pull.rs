//! Pulling models from a Hugging Face Hub on loopback
//! ([`lamina_testkit::fake_hub`]): GGUF repos by quantization, checkpoints
//! converted on first use, the cache layout Python tools read, resumed and
//! corrupt downloads, gated repos, offline use and hostile listings.

use std::path::{Path, PathBuf};

use lamina_hub::{Hub, HubError, HubModel};
use lamina_model::convert::{ConvertOptions, OutType, convert};
use lamina_testkit::checkpoint::write_embedder;
use lamina_testkit::fake_hub::FakeHub;

const GGUF_REPO: &str = "test-org/tiny-GGUF";
const CKPT_REPO: &str = "test-org/minilm";

/// A conformance checkpoint (all-MiniLM-L6-v2's config cut down, random
/// weights) and two GGUFs of it: the files the fake hub serves.
struct Files {
    _dir: tempfile::TempDir,
    ckpt: PathBuf,
    f32: PathBuf,
    q8: PathBuf,
}

fn files() -> Files {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = write_embedder("minilm", dir.path()).unwrap();
    let gguf = |name: &str, out_type| {
        let out = dir.path().join(name);
        convert_to(&ckpt, &out, out_type, None);
        out
    };
    let f32 = gguf("tiny-F32.gguf", OutType::F32);
    let q8 = gguf("tiny-Q8_0.gguf", OutType::parse("q8_0").unwrap());
    Files {
        _dir: dir,
        ckpt,
        f32,
        q8,
    }
}

fn convert_to(ckpt: &Path, out: &Path, out_type: OutType, model_id: Option<&str>) {
    let opts = ConvertOptions {
        input: ckpt.to_path_buf(),
        output: out.to_path_buf(),
        out_type,
        dense_modules: true,
        bert_pooler: true,
        model_id: model_id.map(str::to_string),
    };
    convert(&opts, &mut |_| {}).unwrap();
}

/// The checkpoint's files as the repo lists them.
fn ckpt_listing(ckpt: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for sub in ["", "1_Pooling"] {
        for e in std::fs::read_dir(ckpt.join(sub)).unwrap().flatten() {
            if e.path().is_file() {
                let name = e.file_name().to_string_lossy().into_owned();
                let name = if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                };
                out.push((name, e.path()));
            }
        }
    }
    out
}

fn serve(files: &Files) -> FakeHub {
    let hub = FakeHub::start();
    let readme = files.ckpt.join("config.json");
    hub.add_repo(
        GGUF_REPO,
        &[
            ("README.md", readme),
            ("tiny-F32.gguf", files.f32.clone()),
            ("tiny-Q8_0.gguf", files.q8.clone()),
        ],
    );
    let listing = ckpt_listing(&files.ckpt);
    let refs: Vec<(&str, PathBuf)> = listing
        .iter()
        .map(|(n, p)| (n.as_str(), p.clone()))
        .collect();
    hub.add_repo(CKPT_REPO, &refs);
    hub
}

/// A hub client on `fake` with its own cache and converted-models folder.
fn client(fake: &FakeHub, root: &Path) -> Hub {
    Hub::from_env()
        .endpoint(fake.url())
        .cache_dir(root.join("hub"))
        .converted_dir(root.join("models/hf"))
        .token(None)
        .offline(false)
        .progress(false)
        .retries(0)
}

/// Files, a fake hub serving them, an empty cache root and a client of it.
fn setup() -> (Files, FakeHub, tempfile::TempDir, Hub) {
    let files = files();
    let fake = serve(&files);
    let root = tempfile::tempdir().unwrap();
    let hub = client(&fake, root.path());
    (files, fake, root, hub)
}

#[track_caller]
fn same_bytes(a: &Path, b: &Path) {
    assert!(
        std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
        "{} and {} differ",
        a.display(),
        b.display()
    );
}

fn model(spec: &str) -> HubModel {
    HubModel::parse(spec).unwrap()
}

fn downloads_of(fake: &FakeHub, file: &str) -> Vec<Option<String>> {
    fake.seen()
        .into_iter()
        .filter(|s| s.path.ends_with(&format!("/resolve/main/{file}")))
        .filter(|s| s.range.as_deref() != Some("bytes=0-0"))
        .map(|s| s.range)
        .collect()
}

#[test]
fn a_gguf_repo_gives_the_asked_quantization_in_the_hf_cache_layout() {
    let (files, fake, root, hub) = setup();

    let pulled = hub.pull(&model("hf://test-org/tiny-GGUF:q8_0")).unwrap();
    same_bytes(&pulled.path, &files.q8);
    assert_eq!(pulled.file.as_deref(), Some("tiny-Q8_0.gguf"));
    assert_eq!(
        pulled.downloaded,
        std::fs::metadata(&files.q8).unwrap().len()
    );
    // The layout huggingface_hub reads: refs/main, snapshots/<commit>/<file>
    // linking to blobs/<sha256>.
    let repo_dir = root.path().join("hub/models--test-org--tiny-GGUF");
    let commit = std::fs::read_to_string(repo_dir.join("refs/main")).unwrap();
    assert_eq!(commit, pulled.commit);
    let snap = repo_dir
        .join("snapshots")
        .join(&commit)
        .join("tiny-Q8_0.gguf");
    assert_eq!(snap, pulled.path);
    let blob = std::fs::canonicalize(&snap).unwrap();
    assert_eq!(
        blob.parent().unwrap(),
        std::fs::canonicalize(repo_dir.join("blobs")).unwrap()
    );
    assert_eq!(blob.file_name().unwrap().len(), 64);

    // Pulled again, nothing is downloaded; resolved, the hub is not asked.
    let again = hub.pull(&model("test-org/tiny-GGUF:Q8_0")).unwrap();
    assert_eq!(
        (again.path.as_path(), again.downloaded),
        (pulled.path.as_path(), 0)
    );
    assert_eq!(downloads_of(&fake, "tiny-Q8_0.gguf").len(), 1);
    let asked = fake.seen().len();
    let resolved = hub.resolve(&model("hf://test-org/tiny-GGUF:Q8_0")).unwrap();
    assert_eq!(resolved.path, pulled.path);
    assert_eq!(fake.seen().len(), asked);

    // No Q4_K_M and two files: the user is asked to choose.
    let err = hub.pull(&model("test-org/tiny-GGUF")).unwrap_err();
    assert!(matches!(err, HubError::ChooseQuant { .. }), "{err}");
    assert!(err.to_string().contains("F32, Q8_0"), "{err}");
    let err = hub.pull(&model("test-org/tiny-GGUF:Q4_0")).unwrap_err();
    assert!(matches!(err, HubError::NoSuchQuant { .. }), "{err}");
    let err = hub.pull(&model("test-org/absent")).unwrap_err();
    assert!(
        matches!(err, HubError::Unauthorized { token: false, .. }),
        "{err}"
    );
}

#[test]
fn a_checkpoint_is_converted_once_as_lamina_convert_converts_it() {
    let (files, fake, root, hub) = setup();

    let pulled = hub.pull(&model("hf://test-org/minilm:F32")).unwrap();
    assert_eq!(pulled.file, None);
    assert!(
        pulled
            .path
            .starts_with(root.path().join("models/hf/test-org--minilm"))
    );
    let local = root.path().join("local-F32.gguf");
    convert_to(&files.ckpt, &local, OutType::F32, Some(CKPT_REPO));
    same_bytes(&pulled.path, &local);
    let gguf = lamina_gguf::Gguf::open(&pulled.path).unwrap();
    // Named from the config's _name_or_path, never from the snapshot folder.
    assert_eq!(
        gguf.get_str("general.name").unwrap(),
        "MiniLM L6 H384 Uncased"
    );
    for (key, value) in gguf.metadata() {
        let text = value.as_str().unwrap_or_default();
        assert!(!text.contains(&pulled.commit[..12]), "{key} = {text}");
    }

    // A second type converts the cached files again, downloading nothing.
    let before = fake.seen().len();
    let q8 = hub.resolve(&model("hf://test-org/minilm:Q8_0")).unwrap();
    assert_eq!(q8.downloaded, 0);
    let listings = fake.seen()[before..]
        .iter()
        .filter(|s| s.path.starts_with("/api/"))
        .count();
    assert_eq!(fake.seen().len() - before, listings);
    let local_q8 = root.path().join("local-Q8_0.gguf");
    convert_to(
        &files.ckpt,
        &local_q8,
        OutType::parse("q8_0").unwrap(),
        Some(CKPT_REPO),
    );
    same_bytes(&q8.path, &local_q8);

    let err = hub.pull(&model("test-org/minilm:Q9_X")).unwrap_err();
    assert!(matches!(err, HubError::BadType { .. }), "{err}");
}

#[test]
fn a_broken_download_resumes_where_it_stopped() {
    let files = files();
    let fake = serve(&files);
    let root = tempfile::tempdir().unwrap();
    let len = std::fs::metadata(&files.f32).unwrap().len();

    // Within one pull: the retry asks only for the missing bytes.
    fake.break_next_download("tiny-F32.gguf");
    let pulled = client(&fake, root.path())
        .retries(2)
        .pull(&model("test-org/tiny-GGUF:F32"))
        .unwrap();
    same_bytes(&pulled.path, &files.f32);
    let ranges = downloads_of(&fake, "tiny-F32.gguf");
    assert_eq!(ranges.len(), 2, "{ranges:?}");
    assert_eq!(ranges[0].as_deref(), Some("bytes=0-"));
    assert_eq!(ranges[1], Some(format!("bytes={}-", len / 2)));

    // Across runs: the first fails, leaving a partial file; the next resumes.
    let root = tempfile::tempdir().unwrap();
    let fake = serve(&files);
    fake.break_next_download("tiny-F32.gguf");
    let hub = client(&fake, root.path());
    let err = hub.pull(&model("test-org/tiny-GGUF:F32")).unwrap_err();
    assert!(matches!(err, HubError::Network { .. }), "{err}");
    let pulled = hub.pull(&model("test-org/tiny-GGUF:F32")).unwrap();
    same_bytes(&pulled.path, &files.f32);
    let ranges = downloads_of(&fake, "tiny-F32.gguf");
    assert_eq!(ranges.last().unwrap(), &Some(format!("bytes={}-", len / 2)));
}

#[test]
fn a_corrupt_download_is_refused_and_deleted() {
    let (files, fake, root, hub) = setup();

    fake.set_corrupt("tiny-Q8_0.gguf", true);
    let err = hub.pull(&model("test-org/tiny-GGUF:Q8_0")).unwrap_err();
    let HubError::Checksum { algo, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*algo, "SHA-256");
    assert!(err.to_string().contains("corrupt"), "{err}");
    let blobs = root.path().join("hub/models--test-org--tiny-GGUF/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.iter().all(|n| n.to_string_lossy().ends_with(".lock")),
        "{left:?}"
    );
    assert!(
        hub.clone()
            .offline(true)
            .resolve(&model("test-org/tiny-GGUF:Q8_0"))
            .is_err()
    );

    // A small (git) file is checked by its git SHA-1.
    fake.set_corrupt("tiny-Q8_0.gguf", false);
    fake.set_corrupt("config.json", true);
    let err = hub.pull(&model("test-org/minilm:F32")).unwrap_err();
    assert!(
        matches!(
            err,
            HubError::Checksum {
                algo: "git SHA-1",
                ..
            }
        ),
        "{err}"
    );

    fake.set_corrupt("config.json", false);
    let pulled = hub.pull(&model("test-org/tiny-GGUF:Q8_0")).unwrap();
    same_bytes(&pulled.path, &files.q8);
}

#[test]
fn a_gated_repo_needs_its_token() {
    let files = files();
    let fake = serve(&files);
    fake.gate(GGUF_REPO, "hf_secret");
    let root = tempfile::tempdir().unwrap();
    let m = model("test-org/tiny-GGUF:Q8_0");

    let err = client(&fake, root.path()).pull(&m).unwrap_err();
    assert!(
        matches!(err, HubError::Unauthorized { token: false, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("HF_TOKEN"), "{err}");
    let err = client(&fake, root.path())
        .token(Some("hf_wrong".into()))
        .pull(&m)
        .unwrap_err();
    assert!(
        matches!(err, HubError::Unauthorized { token: true, .. }),
        "{err}"
    );
    let pulled = client(&fake, root.path())
        .token(Some("hf_secret".into()))
        .pull(&m)
        .unwrap();
    same_bytes(&pulled.path, &files.q8);
    let last = fake.seen().pop().unwrap();
    assert_eq!(last.authorization.as_deref(), Some("Bearer hf_secret"));
}

#[test]
fn offline_uses_the_cache_only() {
    let files = files();
    let fake = serve(&files);
    let root = tempfile::tempdir().unwrap();
    let offline = client(&fake, root.path()).offline(true);
    for spec in ["test-org/tiny-GGUF:Q8_0", "test-org/minilm:F32"] {
        let err = offline.pull(&model(spec)).unwrap_err();
        assert!(matches!(err, HubError::NotCached { .. }), "{err}");
    }
    assert!(fake.seen().is_empty());

    let online = client(&fake, root.path());
    let gguf = online.pull(&model("test-org/tiny-GGUF:Q8_0")).unwrap();
    online.pull(&model("test-org/minilm:F32")).unwrap();
    let asked = fake.seen().len();
    // A dead endpoint: everything must come from the cache.
    let dead = offline.clone().endpoint("http://127.0.0.1:9");
    assert_eq!(
        dead.resolve(&model("test-org/tiny-GGUF:Q8_0"))
            .unwrap()
            .path,
        gguf.path
    );
    // A checkpoint's other types are converted from the cached files.
    let f16 = dead.resolve(&model("test-org/minilm")).unwrap();
    assert!(
        f16.path.ends_with("minilm-F16.gguf"),
        "{}",
        f16.path.display()
    );
    assert_eq!(fake.seen().len(), asked);
}

#[test]
fn a_hostile_listing_names_no_path_outside_the_cache() {
    let files = files();
    let fake = FakeHub::start();
    fake.add_repo("evil/repo", &[("../../escaped.gguf", files.q8.clone())]);
    let root = tempfile::tempdir().unwrap();
    let err = client(&fake, root.path())
        .pull(&model("evil/repo"))
        .unwrap_err();
    assert!(matches!(err, HubError::BadListing { .. }), "{err}");
    assert!(!root.path().join("escaped.gguf").exists());
    assert!(downloads_of(&fake, "../../escaped.gguf").is_empty());
}
