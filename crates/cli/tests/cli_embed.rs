//! `lamina embed` and `lamina tokenize` as a user runs them: the built binary,
//! its output formats, inputs (arguments, `--file`, stdin) and errors.
//!
//! Tests that need a model read it from the models directory
//! (`LAMINA_MODELS`); when it is absent they say so on stderr and pass.

mod common;

use std::path::Path;

use common::{err, lamina, model, ok, testdata, vector};
use serde_json::Value;

const EMBED_MODEL: &str = "embeddinggemma-300m-Q8_0.gguf";
const GEMMA: &str = "gemma-3-270m-Q4_K_M.gguf";

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn embed_json_from_arguments_stdin_and_file() {
    let Some(m) = model(EMBED_MODEL) else { return };
    let m = path_str(&m);
    let texts = [
        "The quick brown fox jumps over the lazy dog.",
        "机器学习",
        "",
    ];
    let from_args = ok(&lamina(
        &["embed", "-m", m, "--json", texts[0], texts[1], texts[2]],
        b"",
    ));
    let lines = json_lines(&from_args);
    assert_eq!(lines.len(), 3);
    for (i, l) in lines.iter().enumerate() {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["index", "n_tokens", "embedding"]);
        assert_eq!(l["index"], i);
        let v = vector(l);
        assert_eq!(v.len(), 768);
        assert!((norm(&v) - 1.0).abs() < 1e-5);
    }
    // BOS + 10 words and the period + EOS; an empty text is BOS + EOS.
    assert_eq!(lines[0]["n_tokens"], 12);
    assert_eq!(lines[2]["n_tokens"], 2);

    // One text per line on stdin (CRLF too), or in a file: the same output.
    let stdin = format!("{}\r\n{}\n{}\n", texts[0], texts[1], texts[2]);
    assert_eq!(
        ok(&lamina(&["embed", "-m", m, "--json"], stdin.as_bytes())),
        from_args
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("texts.txt");
    std::fs::write(&file, &stdin).unwrap();
    let from_file = ok(&lamina(
        &["embed", "-m", m, "--json", "--file", path_str(&file)],
        b"",
    ));
    assert_eq!(from_file, from_args);

    // Plain output: one line of 768 numbers per text, the same values.
    let plain = ok(&lamina(&["embed", "-m", m, texts[0]], b""));
    let vals: Vec<f32> = plain
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(plain.lines().count(), 1);
    assert_eq!(vals.len(), 768);
    for (a, b) in vals.iter().zip(vector(&lines[0])) {
        assert!((a - b).abs() <= 5e-7, "{a} vs {b}");
    }
}

#[test]
fn embed_dim_and_task() {
    let Some(m) = model(EMBED_MODEL) else { return };
    let m = path_str(&m);
    let text = "Which planet is known as the Red Planet?";
    let full = vector(&json_lines(&ok(&lamina(&["embed", "-m", m, "--json", text], b"")))[0]);
    let cut = vector(
        &json_lines(&ok(&lamina(
            &["embed", "-m", m, "--json", "--dim", "256", text],
            b"",
        )))[0],
    );
    assert_eq!(cut.len(), 256);
    let n = norm(&full[..256]);
    for (a, b) in full[..256].iter().zip(&cut) {
        assert!((*a as f64 / n - *b as f64).abs() < 1e-6);
    }
    let bad = err(&lamina(&["embed", "-m", m, "--dim", "1000", text], b""));
    assert!(
        bad.contains("--dim 1000 must be between 1 and 768"),
        "{bad}"
    );

    // --task query is the documented prefix, as a custom prefix or in the text.
    let query = ok(&lamina(
        &["embed", "-m", m, "--json", "--task", "query", text],
        b"",
    ));
    let custom = ok(&lamina(
        &[
            "embed",
            "-m",
            m,
            "--json",
            "--task",
            "task: search result | query: ",
            text,
        ],
        b"",
    ));
    let inline = format!("task: search result | query: {text}");
    let inline = ok(&lamina(&["embed", "-m", m, "--json", &inline], b""));
    assert_eq!(query, custom);
    assert_eq!(query, inline);
    let doc = ok(&lamina(
        &["embed", "-m", m, "--json", "--task", "document", text],
        b"",
    ));
    let doc_inline = format!("title: none | text: {text}");
    assert_eq!(
        doc,
        ok(&lamina(&["embed", "-m", m, "--json", &doc_inline], b""))
    );
    assert_ne!(query, doc);
}

/// Longer than the 2048-token context: an error naming --truncate, or with
/// it the first 2047 tokens and EOS.
#[test]
fn embed_long_text_errors_or_truncates() {
    let Some(m) = model(EMBED_MODEL) else { return };
    let m = path_str(&m);
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(250);
    let e = err(&lamina(&["embed", "-m", m, &long], b""));
    assert!(
        e.contains("exceeds the context of 2048") && e.contains("--truncate"),
        "{e}"
    );
    let out = json_lines(&ok(&lamina(
        &["embed", "-m", m, "--json", "--truncate", &long],
        b"",
    )));
    assert_eq!(out[0]["n_tokens"], 2048);
    assert!((norm(&vector(&out[0])) - 1.0).abs() < 1e-5);
}

#[test]
fn embed_input_errors() {
    // Input is read before the model is loaded, so these need no real model.
    let any_file = env!("CARGO_MANIFEST_PATH");
    let e = err(&lamina(
        &["embed", "-m", any_file],
        b"fine line\nbad \xff\xfe bytes\n",
    ));
    assert!(e.contains("line 2 of stdin is not valid UTF-8"), "{e}");
    let e = err(&lamina(&["embed", "-m", any_file], b""));
    assert!(e.contains("no text to embed"), "{e}");
    let e = err(&lamina(
        &["embed", "-m", any_file, "--file", "/no/such/file.txt"],
        b"",
    ));
    assert!(e.contains("/no/such/file.txt"), "{e}");
    let e = err(&lamina(&["embed", "-m", any_file, "hi"], b""));
    assert!(e.contains("loading"), "not a GGUF file: {e}");

    let e = err(&lamina(&["embed", "-m", "no-such-model-xyz", "hello"], b""));
    assert!(
        e.contains("no-such-model-xyz")
            && e.contains("not found")
            && e.contains("cargo xtask models"),
        "{e}"
    );
    let e = err(&lamina(
        &["tokenize", "-m", "no-such-model-xyz", "hello"],
        b"",
    ));
    assert!(e.contains("not found"), "{e}");
    let e = err(&lamina(
        &["embed", "-m", any_file, "--threads", "0", "hi"],
        b"",
    ));
    assert!(e.contains("--threads"), "{e}");
}

#[test]
fn tokenize_invalid_utf8_on_stdin_is_an_error() {
    let Some(m) = model(GEMMA) else { return };
    let e = err(&lamina(&["tokenize", "-m", path_str(&m)], b"abc \xc3\x28"));
    assert!(e.contains("UTF-8"), "{e}");
}

/// `lamina tokenize --json` ids equal llama-tokenize's (testdata/tokenizer
/// gold, made on gemma-3-270m-Q4_K_M.gguf) with and without BOS and special
/// tokens.
#[test]
fn tokenize_json_matches_llama_tokenize() {
    let Some(m) = model(GEMMA) else { return };
    let gold: Value = serde_json::from_str(
        &std::fs::read_to_string(testdata("tokenizer", "gold-gemma3.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(gold["model"], GEMMA);
    let cases = gold["cases"].as_array().unwrap();
    let want = [
        "The quick brown fox",
        "def f(x):",
        "👨\u{200d}👩",
        "中文测试",
        "مرحبا",
        "it's we're",
        "<bos>Hello<eos>",
        "<start_of_turn>user",
        "tabs\t\t\tand",
    ];
    let mut n = 0;
    for case in cases {
        let text = case["text"].as_str().unwrap();
        if !want.iter().any(|w| text.starts_with(w)) {
            continue;
        }
        for (setting, flags) in [
            ("bos+special", &[][..]),
            ("nobos+special", &["--no-bos"][..]),
            ("bos+nospecial", &["--no-parse-special"][..]),
        ] {
            let mut args = vec!["tokenize", "-m", path_str(&m), "--json"];
            args.extend_from_slice(flags);
            args.push(text);
            let out: Value = serde_json::from_str(&ok(&lamina(&args, b""))).unwrap();
            assert_eq!(out["ids"], case["ids"][setting], "{text:?} {setting}");
            assert_eq!(
                out["pieces"].as_array().unwrap().len(),
                out["ids"].as_array().unwrap().len()
            );
            n += 1;
        }
    }
    assert_eq!(n, want.len() * 3, "every chosen string is in the gold");
}

/// On the embedding model, `lamina tokenize --file` gives the ids
/// llama-tokenize gave for the embedding gold texts (testdata/embed).
#[test]
fn tokenize_file_matches_embed_gold_ids() {
    let Some(m) = model(EMBED_MODEL) else { return };
    let texts: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("embed", "texts.json")).unwrap())
            .unwrap();
    let gold: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("embed", "gold.json")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, t) in texts.as_array().unwrap().iter().enumerate().step_by(3) {
        let full = format!(
            "{}{}",
            t["prefix"].as_str().unwrap(),
            t["text"].as_str().unwrap()
        );
        let f = dir.path().join(format!("{i}.txt"));
        std::fs::write(&f, full).unwrap();
        let out = ok(&lamina(
            &[
                "tokenize",
                "-m",
                path_str(&m),
                "--json",
                "--file",
                path_str(&f),
            ],
            b"",
        ));
        let out: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(out["ids"], gold["llama_ids"][i], "{}", t["id"]);
    }
}
