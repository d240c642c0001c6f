//! Helpers shared by the integration tests.
#![allow(dead_code, unused_imports)] // each test file uses its own subset

use std::path::PathBuf;

/// The path of a test model. A missing model fails the test (never skips it).
pub use lamina_testkit::required as model;

/// Decodes a hex string.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("bad hex"))
        .collect()
}

/// Little-endian f32s from hex.
pub fn unhex_f32(s: &str) -> Vec<f32> {
    unhex(s)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Bytes copied into an 8-aligned buffer, so block casts never fail on alignment.
pub struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    pub fn new(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Aligned {
            words,
            len: bytes.len(),
        }
    }

    pub fn zeroed(len: usize) -> Self {
        Aligned {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[..self.len]
    }
}

/// Loads `testdata/quant/gold.json`.
pub fn gold() -> serde_json::Value {
    gold_file("gold.json")
}

/// Loads a JSON file from `testdata/quant/`.
pub fn gold_file(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/quant")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (regenerate with make_gold.py)", path.display()));
    serde_json::from_str(&text).expect("gold.json is not valid JSON")
}
