//! Whole-model decoding: every tensor of both test models dequantizes, the
//! values are finite and plausibly scaled, and decoding is fast.

mod common;

use lamina_gguf::{GgmlType, Gguf};
use lamina_quant::{QuantBlock, blocks::BlockQ8_0, cast_blocks, dequantize_tensor};
use std::collections::BTreeMap;
use std::time::Instant;

fn decode_all(name: &str) -> (BTreeMap<&'static str, usize>, u64, f64) {
    let file = Gguf::open(common::model(name)).unwrap();
    let mut by_type = BTreeMap::new();
    let mut n = 0u64;
    let start = Instant::now();
    for info in file.tensors() {
        let data = file.tensor_data(info);
        let values = dequantize_tensor(info, data).unwrap();
        assert_eq!(values.len() as u64, info.n_elements());
        let bad = values.iter().position(|v| !v.is_finite());
        assert_eq!(bad, None, "{name}: {} has a non-finite value", info.name);
        // Quantized weights stay well inside +-1e3; gemma's F32 norms reach ~1.2e3.
        let amax = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        let limit = if info.ggml_type.is_quantized() {
            1e3
        } else {
            1e4
        };
        assert!(amax > 0.0 && amax < limit, "{}: absmax {amax}", info.name);
        *by_type.entry(info.ggml_type.name()).or_insert(0) += 1;
        n += info.n_elements();
    }
    (by_type, n, start.elapsed().as_secs_f64())
}

#[test]
fn gemma_decodes_completely() {
    let (by_type, n, secs) = decode_all("gemma-3-270m-Q4_K_M.gguf");
    eprintln!(
        "gemma-3-270m: {n} values in {secs:.2} s ({:.0} M/s)",
        n as f64 / secs / 1e6
    );
    let types: Vec<_> = by_type.keys().copied().collect();
    assert_eq!(types, ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"]);
    assert!(n > 250_000_000, "{n}");
    // Generous: the crate is built at opt-level 3 even in test builds, and
    // decodes several hundred million values a second on one core.
    assert!(secs < 20.0, "decoding took {secs:.1} s");
}

#[test]
fn smollm_decodes_completely() {
    let (by_type, n, _) = decode_all("SmolLM2-135M-Instruct-Q4_1.gguf");
    let types: Vec<_> = by_type.keys().copied().collect();
    assert_eq!(types, ["F32", "Q4_1", "Q8_0"]);
    assert!(n > 130_000_000, "{n}");
}

/// The token embedding borrowed straight from the mmap as blocks.
#[test]
fn tensor_bytes_cast_in_place() {
    let file = Gguf::open(common::model("SmolLM2-135M-Instruct-Q4_1.gguf")).unwrap();
    let (info, data) = file.tensor_by_name("token_embd.weight").unwrap();
    assert_eq!(info.ggml_type, GgmlType::Q8_0);
    let blocks: &[BlockQ8_0] = cast_blocks(data).unwrap();
    assert_eq!(
        blocks.len() as u64 * BlockQ8_0::BLOCK_SIZE as u64,
        info.n_elements()
    );
    assert_eq!(blocks.as_ptr() as *const u8, data.as_ptr());
    let row: Vec<f32> = {
        let mut out = vec![0f32; 576];
        BlockQ8_0::dequantize(&blocks[..18], &mut out);
        out
    };
    assert!(row.iter().any(|&v| v != 0.0));
}
