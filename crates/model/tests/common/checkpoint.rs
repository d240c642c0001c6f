//! The family conformance checkpoints of `testdata/families/`, rebuilt
//! bit for bit: the Rust twin of `testdata/families/make_checkpoints.py`.
//!
//! Each family's `weights.json` lists its tensors in order with a scale and
//! an offset; the values come from one xorshift64 stream seeded per family,
//! `u = ((x >> 40) as f32 * 2^-24) * 2 - 1` (exact in f32) and then
//! `u * scale + offset` (each rounded to f32, never fused), so Python and
//! Rust produce the same bits. Every tensor's SHA-256 is in the manifest.

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

pub use super::summary::{hex, summarise};

/// `testdata/families/`.
pub fn families_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/families")
}

/// One tensor of a manifest.
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub scale: f32,
    pub offset: f32,
    pub sha256: String,
}

/// A family's `weights.json`.
pub struct Manifest {
    pub seed: u64,
    pub tensors: Vec<TensorSpec>,
}

pub fn read_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn manifest(family: &str) -> Manifest {
    let v = read_json(&families_dir().join(family).join("weights.json"));
    let tensors = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| TensorSpec {
            name: t["name"].as_str().unwrap().to_string(),
            shape: t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect(),
            // Python rounds the JSON double to f32 the same way.
            scale: t["scale"].as_f64().unwrap() as f32,
            offset: t["offset"].as_f64().unwrap() as f32,
            sha256: t["sha256"].as_str().unwrap().to_string(),
        })
        .collect();
    Manifest {
        seed: v["seed"].as_u64().unwrap(),
        tensors,
    }
}

/// The generator's raw draws in [-1, 1).
pub struct Xorshift(pub u64);

impl Xorshift {
    pub fn next_u(&mut self) -> f32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        ((x >> 40) as f32 * (1.0 / 16_777_216.0)) * 2.0 - 1.0
    }
}

/// One generated tensor: name, shape and little-endian f32 bytes.
pub type Tensor = (String, Vec<usize>, Vec<u8>);

/// The tensors of `family` in manifest order; an error names the first
/// whose bytes differ from the Python generator's.
pub fn tensors(family: &str) -> Result<Vec<Tensor>, String> {
    let m = manifest(family);
    let mut rng = Xorshift(m.seed);
    let mut out = Vec::with_capacity(m.tensors.len());
    for t in m.tensors {
        let n: usize = t.shape.iter().product();
        let mut bytes = Vec::with_capacity(n * 4);
        for _ in 0..n {
            let v = rng.next_u() * t.scale + t.offset;
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let got = hex(&bytes);
        if got != t.sha256 {
            return Err(format!(
                "{family}: tensor {} has SHA-256 {got}, the Python generator's is {}",
                t.name, t.sha256
            ));
        }
        out.push((t.name, t.shape, bytes));
    }
    Ok(out)
}

/// Writes `parent/FAMILY/` (config.json, tokenizer files, model.safetensors)
/// and returns it. The folder is named after the family because the
/// converter derives `general.name` from it, as the gold's conversion did.
pub fn write_checkpoint(family: &str, parent: &Path) -> Result<PathBuf, String> {
    let src = families_dir().join(family);
    let dir = parent.join(family);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (from, name) in [
        (src.join("config.json"), "config.json"),
        (src.join("tokenizer_config.json"), "tokenizer_config.json"),
        (
            families_dir().join("tokenizer/tokenizer.model"),
            "tokenizer.model",
        ),
    ] {
        std::fs::copy(&from, dir.join(name)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    let tensors = tensors(family)?;
    // The layout make_checkpoints.py writes: compact JSON header in manifest
    // order, space-padded to 8 bytes, then the data back to back.
    let mut header = String::from("{");
    let mut off = 0usize;
    for (name, shape, bytes) in &tensors {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        header += &format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{off},{}]}},",
            dims.join(","),
            off + bytes.len()
        );
        off += bytes.len();
    }
    header += "\"__metadata__\":{\"format\":\"pt\"}}";
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut file = Vec::with_capacity(8 + header.len() + off);
    file.extend_from_slice(&(header.len() as u64).to_le_bytes());
    file.extend_from_slice(header.as_bytes());
    for (_, _, bytes) in &tensors {
        file.extend_from_slice(bytes);
    }
    let path = dir.join("model.safetensors");
    std::fs::write(&path, file).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(dir)
}

/// The first difference between a summary and the gold's, in words.
pub fn first_difference(ours: &Json, gold: &Json) -> Option<String> {
    let (om, gm) = (
        ours["metadata"].as_array().unwrap(),
        gold["metadata"].as_array().unwrap(),
    );
    for i in 0..om.len().max(gm.len()) {
        match (om.get(i), gm.get(i)) {
            (Some(o), Some(g)) if o == g => {}
            (o, g) => {
                return Some(format!(
                    "metadata entry {i}: ours {}, Python's {}",
                    o.map_or("(none)".into(), Json::to_string),
                    g.map_or("(none)".into(), Json::to_string)
                ));
            }
        }
    }
    let (ot, gt) = (
        ours["tensors"].as_array().unwrap(),
        gold["tensors"].as_array().unwrap(),
    );
    for i in 0..ot.len().max(gt.len()) {
        match (ot.get(i), gt.get(i)) {
            (Some(o), Some(g)) if o == g => {}
            (o, g) => {
                return Some(format!(
                    "tensor {i}: ours {}, Python's {}",
                    o.map_or("(none)".into(), Json::to_string),
                    g.map_or("(none)".into(), Json::to_string)
                ));
            }
        }
    }
    None
}
