//! `lamina generate --file` as a user runs it: one prompt a line in, one
//! JSON line per prompt out, in the file's order, each the same as that
//! prompt generated alone with `-p`.
//!
//! Reads SmolLM2-135M-Instruct Q8_0 from the models directory; without it
//! the tests say so on stderr and pass.

mod common;

use common::{err, lamina, model, ok};
use serde_json::Value;

const MODEL: &str = "SmolLM2-135M-Instruct-Q8_0.gguf";

#[test]
fn a_file_of_prompts_gives_each_prompt_its_own_answer_in_order() {
    let Some(m) = model(MODEL) else { return };
    let m = m.to_str().unwrap();
    let prompts = [
        "The capital of France is",
        "Once upon a time",
        "The capital of France is",
        "1 2 3 4 5",
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompts.txt");
    // A blank line between prompts is skipped; the line numbers stay the file's.
    let text = format!(
        "{}\n{}\n\n{}\r\n{}",
        prompts[0], prompts[1], prompts[2], prompts[3]
    );
    std::fs::write(&file, text).unwrap();
    let flags = ["-n", "12", "--temp", "0", "--ignore-eos", "-t", "2"];
    let mut args = vec![
        "generate",
        "-m",
        m,
        "--file",
        file.to_str().unwrap(),
        "--parallel",
        "3",
    ];
    args.extend(flags);
    let out = ok(&lamina(&args, b""));
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{out}");
    for (l, (line_no, prompt)) in lines.iter().zip([(1, 0), (2, 1), (4, 2), (5, 3)]) {
        assert_eq!(l["line"], line_no, "{l}");
        assert_eq!(l["stop"], "length");
        assert_eq!(l["completion_tokens"], 12);
        let mut args = vec!["generate", "-m", m, "-p", prompts[prompt], "--json"];
        args.extend(flags);
        let alone: Value = serde_json::from_str(ok(&lamina(&args, b"")).trim()).unwrap();
        assert_eq!(
            l["ids"], alone["ids"],
            "line {line_no}: batched and alone differ"
        );
        assert_eq!(l["text"], alone["text"], "line {line_no}");
        assert_eq!(
            l["prompt_tokens"],
            alone["prompt_ids"].as_array().unwrap().len()
        );
    }
}

/// `-f` stays llama.cpp's: the whole file is one prompt.
#[test]
fn dash_f_reads_one_prompt_from_a_file() {
    let Some(m) = model(MODEL) else { return };
    let m = m.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompt.txt");
    let text = "The capital of France is\nThe capital of Spain is";
    std::fs::write(&file, text).unwrap();
    let flags = ["-n", "4", "--temp", "0", "--json", "-t", "2"];
    let mut args = vec!["generate", "-m", m, "-f", file.to_str().unwrap()];
    args.extend(flags);
    let from_file: Value = serde_json::from_str(ok(&lamina(&args, b"")).trim()).unwrap();
    let mut args = vec!["generate", "-m", m, "-p", text];
    args.extend(flags);
    let from_arg: Value = serde_json::from_str(ok(&lamina(&args, b"")).trim()).unwrap();
    assert_eq!(from_file["prompt_ids"], from_arg["prompt_ids"]);
    assert_eq!(from_file["ids"], from_arg["ids"]);
}

#[test]
fn bad_prompt_files_are_refused_clearly() {
    let Some(m) = model(MODEL) else { return };
    let m = m.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let blank = dir.path().join("blank.txt");
    std::fs::write(&blank, "\n  \n").unwrap();
    let e = err(&lamina(
        &["generate", "-m", m, "--file", blank.to_str().unwrap()],
        b"",
    ));
    assert!(e.contains("holds no prompts"), "{e}");
    let e = err(&lamina(
        &["generate", "-m", m, "--file", "/no/such/prompts.txt"],
        b"",
    ));
    assert!(e.contains("/no/such/prompts.txt"), "{e}");
    // A prompt longer than the context gets an error line; the others run.
    let long = dir.path().join("long.txt");
    let words = "word ".repeat(200);
    std::fs::write(&long, format!("Hello\n{words}\n")).unwrap();
    let out = lamina(
        &[
            "generate",
            "-m",
            m,
            "--file",
            long.to_str().unwrap(),
            "-c",
            "64",
            "-n",
            "4",
            "--temp",
            "0",
        ],
        b"",
    );
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["completion_tokens"], 4);
    assert!(
        lines[1]["error"].as_str().unwrap().contains("context"),
        "{}",
        lines[1]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 of 2 prompts failed"), "{stderr}");
}

/// llama.cpp's `--cache-type-k/-v q8_0` generate from a q8_0 cache, as
/// `--kv-type q8_0` does; keys and values of two types are refused.
#[test]
fn a_q8_0_kv_cache_is_chosen_with_llama_cpp_s_flags() {
    let Some(m) = model(MODEL) else { return };
    let m = m.to_str().unwrap();
    let run = |kv: &[&str]| -> Value {
        let mut args = vec![
            "generate",
            "-m",
            m,
            "-p",
            "The capital of France is",
            "-n",
            "16",
            "--temp",
            "0",
            "--ignore-eos",
            "--json",
            "-t",
            "2",
        ];
        args.extend_from_slice(kv);
        serde_json::from_str(ok(&lamina(&args, b"")).trim()).unwrap()
    };
    let q8 = run(&["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]);
    assert_eq!(q8["ids"].as_array().unwrap().len(), 16);
    assert_eq!(q8["ids"], run(&["--ctk", "q8_0", "--ctv", "q8_0"])["ids"]);
    assert_eq!(q8["ids"], run(&["--kv-type", "q8_0"])["ids"]);
    assert_eq!(run(&[])["ids"], run(&["--cache-type-k", "f16"])["ids"]);
    // Keys and values of different types, as llama.cpp allows them.
    for mixed in [["q8_0", "f16"], ["f16", "q8_0"], ["f32", "f16"]] {
        let out = run(&["--ctk", mixed[0], "--ctv", mixed[1]]);
        assert_eq!(out["ids"].as_array().unwrap().len(), 16, "{mixed:?}");
    }
}
