//! Bit-for-bit comparison against gguf-py (llama.cpp's Python port), from
//! `testdata/quant/gold.json`, and against the real model files.

mod common;

use common::{Aligned, gold, gold_file, model, unhex, unhex_f32};
use lamina_gguf::Gguf;
use lamina_quant::{GgmlType, dequantize_row, dequantize_tensor, quantize_row};
use std::collections::BTreeSet;

fn ty(name: &str) -> GgmlType {
    GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"))
}

fn first_mismatch(ours: &[f32], theirs: &[f32]) -> Option<(usize, f32, f32)> {
    ours.iter()
        .zip(theirs)
        .enumerate()
        .find(|(_, (a, b))| a.to_bits() != b.to_bits())
        .map(|(i, (a, b))| (i, *a, *b))
}

#[test]
fn dequantization_matches_gguf_py_bit_for_bit() {
    let gold = gold();
    let cases = gold["dequant"].as_array().unwrap();
    let mut types = BTreeSet::new();
    let mut values = 0;
    for case in cases {
        let t = ty(case["type"].as_str().unwrap());
        let bytes = Aligned::new(&unhex(case["bytes"].as_str().unwrap()));
        let want = unhex_f32(case["f32"].as_str().unwrap());
        let mut got = vec![f32::NAN; want.len()];
        dequantize_row(t, bytes.bytes(), &mut got).unwrap();
        if let Some((i, a, b)) = first_mismatch(&got, &want) {
            panic!(
                "{t} {} {}: value {i} is {a:e} ({:#010x}), gguf-py has {b:e} ({:#010x})",
                case["source"],
                case["tensor"],
                a.to_bits(),
                b.to_bits()
            );
        }
        types.insert(t.name());
        values += want.len();
    }
    // Every computed type but Q8_1/Q8_K (activation-only; gguf-py has no codec) is covered.
    let expected: BTreeSet<_> = [
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K",
    ]
    .into_iter()
    .collect();
    assert_eq!(types, expected);
    assert!(values > 10_000, "only {values} gold values");
}

/// Quantizes every case's input and compares bytes; returns the types seen.
fn check_quant_cases(gold: &serde_json::Value, reference: &str) -> BTreeSet<&'static str> {
    let mut types = BTreeSet::new();
    for case in gold["quant"].as_array().unwrap() {
        let t = ty(case["type"].as_str().unwrap());
        let input = unhex_f32(
            gold["inputs"][case["input"].as_str().unwrap()]
                .as_str()
                .unwrap(),
        );
        let want = unhex(case["bytes"].as_str().unwrap());
        let mut got = Aligned::zeroed(t.row_bytes(input.len() as u64).unwrap() as usize);
        quantize_row(t, &input, got.bytes_mut()).unwrap();
        assert_eq!(got.bytes().len(), want.len(), "{t}");
        if let Some(i) = got.bytes().iter().zip(&want).position(|(a, b)| a != b) {
            let block = i / t.type_size();
            panic!(
                "{t} on input {}: byte {i} (block {block}) differs: ours {:02x?}, {reference} {:02x?}",
                case["input"],
                &got.bytes()[block * t.type_size()..(block + 1) * t.type_size()],
                &want[block * t.type_size()..(block + 1) * t.type_size()],
            );
        }
        types.insert(t.name());
    }
    types
}

#[test]
fn quantization_matches_gguf_py_byte_for_byte() {
    let types = check_quant_cases(&gold(), "gguf-py");
    let expected: BTreeSet<_> = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
        .into_iter()
        .collect();
    assert_eq!(types, expected);
}

/// ggml's C `quantize_row_*_ref`, compiled without FMA contraction as
/// ggml-base is (see testdata/quant/README.md), for every block type.
#[test]
fn quantization_matches_ggml_c_reference_byte_for_byte() {
    let gold = gold_file("gold_ref_c.json");
    assert_eq!(gold["inputs"].as_object().unwrap().len(), 4);
    let types = check_quant_cases(&gold, "ggml C");
    let expected: BTreeSet<_> = [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
        "Q8_K",
    ]
    .into_iter()
    .collect();
    assert_eq!(types, expected);
}

/// The gold blocks really are the models' bytes, and decoding the whole
/// tensor through `dequantize_tensor` reproduces gguf-py at those positions.
#[test]
fn gold_blocks_come_from_the_models() {
    let gold = gold();
    let mut checked = 0;
    for case in gold["dequant"].as_array().unwrap() {
        let source = case["source"].as_str().unwrap();
        if source == "random" {
            continue;
        }
        let file = Gguf::open(model(source)).unwrap();
        let name = case["tensor"].as_str().unwrap();
        let (info, data) = file.tensor_by_name(name).unwrap();
        let t = info.ggml_type;
        assert_eq!(t.name(), case["type"].as_str().unwrap());
        let raw = unhex(case["bytes"].as_str().unwrap());
        let start = case["block_offset"].as_u64().unwrap() as usize * t.type_size();
        assert_eq!(&data[start..start + raw.len()], &raw[..], "{source} {name}");

        let all = dequantize_tensor(info, data).unwrap();
        let want = unhex_f32(case["f32"].as_str().unwrap());
        let first = start / t.type_size() * t.block_size();
        assert_eq!(
            first_mismatch(&all[first..first + want.len()], &want),
            None,
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} model cases");
}
