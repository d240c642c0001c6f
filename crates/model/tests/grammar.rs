//! Constrained decoding on SmolLM2-135M-Instruct: every reply follows its
//! grammar (a JSON Schema, any JSON object, a Lark grammar), greedy and
//! sampled, and grammars the engine refuses are input errors.

mod common;

use lamina_kernels::pool::Rayon;
use lamina_model::generate::{GenerateOptions, Session, StopReason};
use lamina_model::grammar::{Grammar, Grammars};
use lamina_model::sampling::{Sampler, SamplerParams};
use lamina_model::tokenizer::Tokenizer;
use lamina_model::{KvType, Model, ModelError};
use serde_json::{Value, json};

const MODEL: &str = "SmolLM2-135M-Instruct-Q8_0.gguf";

struct Fixture {
    model: Model,
    tok: Tokenizer,
}

fn fixture() -> Option<Fixture> {
    let path = common::gold_model(MODEL)?;
    let model = Model::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file).unwrap();
    Some(Fixture { model, tok })
}

/// The reply to `user` under `grammar`, sampled with `params`.
fn reply(
    f: &Fixture,
    grammars: &Grammars,
    grammar: &Grammar,
    user: &str,
    params: SamplerParams,
) -> (String, StopReason) {
    let prompt = format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n");
    let ids = f.tok.encode(&prompt, false, true);
    let mut session = Session::new(&f.model, &f.tok, 512, KvType::F16).unwrap();
    session.prefill(&ids, &Rayon).unwrap();
    let mut sampler = Sampler::new(params, f.tok.n_vocab());
    sampler.constrain(grammars.constraint(grammar).unwrap());
    let opts = GenerateOptions {
        max_tokens: Some(200),
        ..GenerateOptions::default()
    };
    let out = session
        .generate(&mut sampler, &opts, &Rayon, &mut |_| true)
        .unwrap();
    (out.text, out.stop)
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 3},
            "pet": {"$ref": "#/$defs/Pet"}
        },
        "required": ["name", "age", "hobbies", "pet"],
        "additionalProperties": false,
        "$defs": {
            "Pet": {
                "type": "object",
                "properties": {
                    "kind": {"enum": ["cat", "dog", "fish"]},
                    "legs": {"type": "integer", "minimum": 0, "maximum": 4}
                },
                "required": ["kind", "legs"],
                "additionalProperties": false
            }
        }
    })
}

/// What `person_schema` asks for, checked by hand.
fn assert_person(text: &str) {
    let v: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {text}"));
    let keys: Vec<&str> = o.keys().map(String::as_str).collect();
    assert_eq!(keys, ["name", "age", "hobbies", "pet"], "{text}");
    assert!(
        o["name"].as_str().is_some_and(|s| s.chars().count() <= 40),
        "{text}"
    );
    assert!(
        o["age"].as_i64().is_some_and(|a| (0..=150).contains(&a)),
        "{text}"
    );
    let hobbies = o["hobbies"].as_array().unwrap();
    assert!(hobbies.len() <= 3, "{text}");
    assert!(
        hobbies
            .iter()
            .all(|h| h.as_str().is_some_and(|s| s.chars().count() <= 30))
    );
    let pet = o["pet"].as_object().unwrap();
    assert!(
        ["cat", "dog", "fish"].contains(&pet["kind"].as_str().unwrap()),
        "{text}"
    );
    assert!(
        pet["legs"].as_i64().is_some_and(|l| (0..=4).contains(&l)),
        "{text}"
    );
}

#[test]
fn json_schema_replies_validate_greedy_and_sampled() {
    let Some(f) = fixture() else { return };
    let grammars = Grammars::new(&f.tok).unwrap();
    let grammar = Grammar::JsonSchema(person_schema());
    let users = [
        "Describe a made-up person as JSON.",
        "Who is your favourite detective? Answer in JSON.",
        "Tell me about a farmer.",
    ];
    for user in users {
        let (text, stop) = reply(&f, &grammars, &grammar, user, SamplerParams::greedy());
        assert_eq!(stop, StopReason::Eos, "{text}");
        assert_person(&text);
    }
    for seed in 0..6 {
        let params = SamplerParams {
            temp: 0.8,
            seed,
            ..SamplerParams::default()
        };
        let (text, stop) = reply(&f, &grammars, &grammar, users[seed as usize % 3], params);
        assert_eq!(stop, StopReason::Eos, "seed {seed}: {text}");
        assert_person(&text);
    }
}

/// Greedy only: an object's strings are unbounded, and at a high
/// temperature this small model may not close one within the limit.
#[test]
fn json_object_replies_are_objects() {
    let Some(f) = fixture() else { return };
    let grammars = Grammars::new(&f.tok).unwrap();
    for user in [
        "List three colours.",
        "What is the capital of France?",
        "Write a haiku.",
    ] {
        let (text, stop) = reply(
            &f,
            &grammars,
            &Grammar::JsonObject,
            user,
            SamplerParams::greedy(),
        );
        assert_eq!(stop, StopReason::Eos, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(v.is_object(), "{text}");
    }
}

#[test]
fn lark_grammars_bound_the_reply() {
    let Some(f) = fixture() else { return };
    let grammars = Grammars::new(&f.tok).unwrap();
    let grammar = Grammar::Lark(r#"start: ("yes" | "no") "." "#.into());
    let (text, stop) = reply(
        &f,
        &grammars,
        &grammar,
        "Is the sky green?",
        SamplerParams::greedy(),
    );
    assert_eq!(stop, StopReason::Eos);
    assert!(text == "yes." || text == "no.", "{text:?}");
}

#[test]
fn grammars_the_engine_refuses_are_input_errors() {
    let Some(f) = fixture() else { return };
    let grammars = Grammars::new(&f.tok).unwrap();
    for bad in [
        Grammar::JsonSchema(json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}})),
        Grammar::Lark("start: undefined_rule".into()),
    ] {
        let e = grammars.constraint(&bad).unwrap_err();
        assert!(matches!(e, ModelError::Grammar(_)), "{e:?}");
        assert!(e.is_input());
    }
}
