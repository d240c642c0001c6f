//! `lamina inspect` and `lamina quantize` on hostile or degenerate files:
//! clean errors (exit 1, `error: ...`), escaped output, and no temporary
//! files left behind, whatever happens to the run.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::{err, lamina, ok};
use lamina_gguf::{GgmlType, GgufBuilder, OwnedValue};

/// Writes a file of F32 tensors (`name`, `shape`) filled with small values.
fn write_gguf(path: &Path, kvs: &[(&str, OwnedValue)], tensors: &[(&str, &[u64])]) {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", OwnedValue::string("llama"))
        .unwrap();
    for (k, v) in kvs {
        b.set(*k, v.clone()).unwrap();
    }
    for (name, shape) in tensors {
        b.add_tensor(*name, GgmlType::F32, shape).unwrap();
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = b.write_header(file).unwrap();
    while let Some(spec) = w.next_tensor() {
        let n = spec.n_bytes as usize / 4;
        let mut data = Vec::with_capacity(n * 4);
        for i in 0..n {
            data.extend_from_slice(&((i % 97) as f32 / 97.0 - 0.5).to_le_bytes());
        }
        w.write_tensor(&data).unwrap();
    }
    w.finish().unwrap().flush().unwrap();
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A 16 GiB sparse file whose header claims as many metadata entries as the
/// size allows: the count passes the size check, and reserving that many
/// in-memory entries once aborted the process.
#[test]
fn inspect_a_huge_claimed_entry_count_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.gguf");
    let mut header = b"GGUF".to_vec();
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&0u64.to_le_bytes());
    header.extend_from_slice(&(((16u64 << 30) - 24) / 13).to_le_bytes());
    let file = std::fs::File::create(&path).unwrap();
    (&file).write_all(&header).unwrap();
    file.set_len(16 << 30).unwrap();
    let e = err(&lamina(&["inspect", s(&path)], b""));
    assert!(
        e.contains("cannot read") && e.contains("duplicate metadata key"),
        "{e}"
    );
    let e = err(&lamina(&["inspect", s(&path), "--json"], b""));
    assert!(e.contains("duplicate metadata key"), "{e}");
}

#[test]
fn a_huge_alignment_is_refused_and_quantize_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("align.gguf");
    // The builder refuses it too, so patch the value in after writing 32.
    write_gguf(&path, &[("general.alignment", OwnedValue::U32(32))], &[]);
    let mut bytes = std::fs::read(&path).unwrap();
    let key = b"general.alignment";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    bytes[at..at + 4].copy_from_slice(&(1u32 << 31).to_le_bytes());
    std::fs::write(&path, bytes).unwrap();

    let e = err(&lamina(&["inspect", s(&path)], b""));
    assert!(
        e.contains(
            "general.alignment must be a power of two no larger than 65536, found 2147483648"
        ),
        "{e}"
    );
    let out = dir.path().join("out.gguf");
    let e = err(&lamina(&["quantize", s(&path), s(&out), "q8_0"], b""));
    assert!(e.contains("general.alignment"), "{e}");
    assert_eq!(listing(dir.path()), ["align.gguf"]);
}

#[test]
fn inspect_escapes_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.gguf");
    write_gguf(
        &path,
        &[
            ("evil.\x1b[2Jkey", OwnedValue::U32(1)),
            (
                "evil.title",
                OwnedValue::string("\x1b]0;pwned\x07 \u{202e}txt"),
            ),
            (
                "evil.list",
                OwnedValue::string_array(["ok", "\x1b[31mred", "back\\slash"]),
            ),
        ],
        &[("t\x1b[1A\rname", &[4])],
    );
    let text = ok(&lamina(&["inspect", s(&path), "--tensors"], b""));
    assert!(!text.contains('\x1b') && !text.contains('\x07') && !text.contains('\r'));
    assert!(!text.contains('\u{202e}'), "{text}");
    assert!(text.contains("evil.\\u{1b}[2Jkey"), "{text}");
    assert!(
        text.contains(r#""\u{1b}]0;pwned\u{7} \u{202e}txt""#),
        "{text}"
    );
    assert!(
        text.contains(r#"["ok", "\u{1b}[31mred", "back\\slash"]"#),
        "{text}"
    );
    assert!(text.contains("t\\u{1b}[1A\\rname"), "{text}");
    let hashes = ok(&lamina(&["inspect", s(&path), "--sha256"], b""));
    assert!(
        hashes.trim_end().ends_with("F32  t\\u{1b}[1A\\rname"),
        "{hashes}"
    );
    // JSON escapes them its own way and keeps the real names.
    let json: serde_json::Value =
        serde_json::from_str(&ok(&lamina(&["inspect", s(&path), "--json"], b""))).unwrap();
    assert_eq!(json["tensors"][0]["name"], "t\x1b[1A\rname");
    assert_eq!(json["metadata"]["evil.\x1b[2Jkey"], 1);
}

#[test]
fn error_messages_escape_names_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.gguf");
    write_gguf(&path, &[], &[("w\x1b[2J", &[4])]);
    // Make the file's one tensor name appear twice: claim two tensors, the
    // second a copy of the first (both at offset 0: a duplicate name is checked first).
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..16].copy_from_slice(&2u64.to_le_bytes());
    let name = b"w\x1b[2J";
    let start = bytes.windows(name.len()).position(|w| w == name).unwrap() - 8;
    let info_len = 8 + name.len() + 4 + 8 + 4 + 8;
    let info = bytes[start..start + info_len].to_vec();
    bytes.splice(start + info_len..start + info_len, info);
    std::fs::write(&path, bytes).unwrap();
    let e = err(&lamina(&["inspect", s(&path)], b""));
    assert!(e.contains("duplicate tensor name w\\u{1b}[2J"), "{e}");
    assert!(!e.contains('\x1b'), "{e}");
}

/// Every `*.tmp` name in `dir` (the staged temporaries end so).
fn temporaries(dir: &Path) -> Vec<String> {
    listing(dir)
        .into_iter()
        .filter(|n| n.ends_with(".tmp") || n.contains(".tmp-"))
        .collect()
}

#[test]
fn a_zero_column_tensor_is_copied_through() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("zero.gguf");
    write_gguf(
        &src,
        &[("llama.block_count", OwnedValue::U32(1))],
        &[
            ("blk.0.ffn_down.weight", &[0, 64]),
            ("blk.0.ffn_up.weight", &[64, 4]),
        ],
    );
    let out = dir.path().join("q.gguf");
    let report: serde_json::Value = serde_json::from_str(&ok(&lamina(
        &["quantize", s(&src), s(&out), "q8_0", "--json"],
        b"",
    )))
    .unwrap();
    assert_eq!(report["tensors"], 2);
    assert_eq!(report["converted"], 1, "{report}");
    let g = lamina_gguf::Gguf::open(&out).unwrap();
    let zero = g.tensor("blk.0.ffn_down.weight").unwrap();
    assert_eq!((zero.ggml_type, zero.n_bytes), (GgmlType::F32, 0));
    assert_eq!(zero.shape, [0, 64]);
    assert_eq!(
        g.tensor("blk.0.ffn_up.weight").unwrap().ggml_type,
        GgmlType::Q8_0
    );
    assert!(temporaries(dir.path()).is_empty());
}

#[test]
fn a_failed_quantize_leaves_nothing_and_follows_no_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.gguf");
    write_gguf(&src, &[], &[("blk.0.attn_q.weight", &[256, 2])]);
    // Make the tensor a type lamina cannot dequantize (IQ2_XXS: 66 bytes
    // per 256 values) so the run fails after creating its temporary.
    let mut bytes = std::fs::read(&src).unwrap();
    let name = b"blk.0.attn_q.weight";
    let ty_at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 4 + 16;
    bytes[ty_at..ty_at + 4].copy_from_slice(&(GgmlType::IQ2_XXS as u32).to_le_bytes());
    std::fs::write(&src, &bytes).unwrap();

    // Symlinks at the names older versions used for the temporary point at
    // a file that must not be touched.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    let out = dir.path().join("out.gguf");
    let mut links: Vec<PathBuf> = vec![dir.path().join("out.gguf.tmp")];
    links.push(
        dir.path()
            .join(format!("out.gguf.tmp-{}", std::process::id() + 1)),
    );
    for l in &links {
        std::os::unix::fs::symlink(&victim, l).unwrap();
    }
    let before = listing(dir.path());

    let e = err(&lamina(&["quantize", s(&src), s(&out), "q4_0"], b""));
    assert!(e.contains("IQ2_XXS"), "{e}");
    assert_eq!(listing(dir.path()), before, "a temporary was left behind");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");

    // A good run beside the symlinks writes only the output.
    let good = dir.path().join("good.gguf");
    write_gguf(&good, &[], &[("blk.0.attn_q.weight", &[256, 2])]);
    ok(&lamina(&["quantize", s(&good), s(&out), "q4_0"], b""));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    let mut want = before.clone();
    want.extend(["good.gguf".to_string(), "out.gguf".to_string()]);
    want.sort();
    assert_eq!(listing(dir.path()), want);
    for l in &links {
        assert!(
            std::fs::symlink_metadata(l)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}

/// Ctrl-C in the middle of a run removes the temporary and exits with 130.
#[test]
fn ctrl_c_removes_the_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("big.gguf");
    // 64 Mi values: long enough to quantize that the signal lands mid-run.
    let shapes: Vec<(String, [u64; 2])> = (0..4)
        .map(|i| (format!("blk.{i}.ffn_up.weight"), [4096, 4096]))
        .collect();
    let tensors: Vec<(&str, &[u64])> = shapes.iter().map(|(n, s)| (n.as_str(), &s[..])).collect();
    write_gguf(&src, &[("llama.block_count", OwnedValue::U32(4))], &tensors);
    let out = dir.path().join("out.gguf");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lamina"))
        .args(["quantize", s(&src), s(&out), "q4_k_m"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while temporaries(dir.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no temporary appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    assert_eq!(listing(dir.path()), ["big.gguf"]);
}
