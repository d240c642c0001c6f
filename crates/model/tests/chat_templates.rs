//! Real chat templates of the supported families (`testdata/chat/templates/`,
//! from llama.cpp's `models/templates/`) rendered as llama.cpp's own Jinja
//! engine and chat layer render them (gold in `testdata/chat/gold/`, made by
//! `testdata/chat/make_gold.sh` with the clock fixed at 2025-03-14 09:30 UTC).

mod common;

use common::{chat_dir, gold_template, read_json};
use lamina_model::chat::Message;
use serde_json::Value;

fn messages(case: &Value) -> Vec<Message> {
    case["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect()
}

/// Renders every case of `cases.json` with one template and compares with
/// llama.cpp's rendering; returns the number of cases.
fn check(name: &str) -> usize {
    let dir = chat_dir();
    let gold = read_json(dir.join(format!("gold/{name}.json")));
    let cases = read_json(dir.join("cases.json"));
    let cases = cases.as_array().expect("cases");
    let want = gold["cases"].as_array().expect("gold cases");
    assert_eq!(
        cases.len(),
        want.len(),
        "{name}: gold is stale, rerun make_gold.sh"
    );
    let t = gold_template(name, &gold);
    let mut diffs = Vec::new();
    for (case, want) in cases.iter().zip(want) {
        assert_eq!(case["name"], want["name"], "{name}: gold is stale");
        let add_gen = case["add_generation_prompt"].as_bool().unwrap();
        let got = t.render(&messages(case), add_gen);
        let expected = want["prompt"]
            .as_str()
            .expect("llama.cpp rendered this case");
        match got {
            Ok(got) if got == expected => {}
            Ok(got) => diffs.push(format!(
                "{}:\n  llama.cpp {expected:?}\n  lamina    {got:?}",
                case["name"]
            )),
            Err(e) => diffs.push(format!("{}: {e}", case["name"])),
        }
    }
    assert!(diffs.is_empty(), "{name}:\n{}", diffs.join("\n"));
    cases.len()
}

#[test]
fn qwen2_5() {
    assert_eq!(check("Qwen-Qwen2.5-7B-Instruct"), 9);
}

#[test]
fn qwen3() {
    check("Qwen-Qwen3-0.6B");
}

#[test]
fn llama3_1() {
    check("meta-llama-Llama-3.1-8B-Instruct");
}

#[test]
fn llama3_2() {
    check("meta-llama-Llama-3.2-3B-Instruct");
}

#[test]
fn phi3_5() {
    check("microsoft-Phi-3.5-mini-instruct");
}

/// Gemma 2's template raises on a system message; llama.cpp merges it into
/// the first user message instead, and so must we.
#[test]
fn gemma2() {
    check("google-gemma-2-2b-it");
}

#[test]
fn granite3_3() {
    check("ibm-granite-granite-3.3-2B-Instruct");
}

#[test]
fn mistral_nemo() {
    check("mistralai-Mistral-Nemo-Instruct-2407");
}

/// Every template under `templates/` has gold and a test above.
#[test]
fn every_template_is_checked() {
    let mut names: Vec<String> = std::fs::read_dir(chat_dir().join("templates"))
        .expect("templates dir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jinja"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 8, "{names:?}");
    for n in names {
        assert!(
            chat_dir()
                .join("gold")
                .join(n.replace(".jinja", ".json"))
                .is_file(),
            "{n}"
        );
    }
}
