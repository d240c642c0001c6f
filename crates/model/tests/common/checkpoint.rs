//! The family conformance checkpoints of `testdata/families/`, rebuilt
//! bit for bit: the Rust twin of `testdata/families/make_checkpoints.py`.
//!
//! Each family's `weights.json` lists its tensors in order with a scale and
//! an offset; the values come from one xorshift64 stream seeded per family,
//! `u = ((x >> 40) as f32 * 2^-24) * 2 - 1` (exact in f32) and then
//! `u * scale + offset` (each rounded to f32, never fused), so Python and
//! Rust produce the same bits. Every tensor's SHA-256 is in the manifest.

use std::path::{Path, PathBuf};

use lamina_gguf::{Gguf, Value, ValueType};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

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

pub fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

fn type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::U8 => "UINT8",
        ValueType::I8 => "INT8",
        ValueType::U16 => "UINT16",
        ValueType::I16 => "INT16",
        ValueType::U32 => "UINT32",
        ValueType::I32 => "INT32",
        ValueType::F32 => "FLOAT32",
        ValueType::Bool => "BOOL",
        ValueType::String => "STRING",
        ValueType::Array => "ARRAY",
        ValueType::U64 => "UINT64",
        ValueType::I64 => "INT64",
        ValueType::F64 => "FLOAT64",
    }
}

/// The summary testdata/convert/make_gold.py writes: every metadata key in
/// file order (arrays as length + SHA-256 of their payload) and every
/// tensor's name, type, shape and SHA-256.
pub fn summarise(path: &Path) -> Json {
    let g = Gguf::open(path).unwrap();
    let mut meta = Vec::new();
    for (key, v) in g.metadata() {
        let mut e = json!({"key": key, "type": type_name(v.value_type())});
        match v {
            Value::Array(a) => {
                let payload: Vec<u8> = match a.raw_scalars() {
                    Some(raw) => raw.to_vec(),
                    None => a
                        .strings()
                        .expect("string array")
                        .flat_map(|s| {
                            (s.len() as u64)
                                .to_le_bytes()
                                .into_iter()
                                .chain(s.iter().copied())
                        })
                        .collect(),
                };
                e["elem_type"] = json!(type_name(a.elem_type()));
                e["len"] = json!(a.len());
                e["sha256"] = json!(hex(&payload));
            }
            Value::String(s) => e["value"] = json!(String::from_utf8_lossy(s).into_owned()),
            Value::Bool(b) => e["value"] = json!(b),
            Value::F32(f) => e["value"] = json!(f64::from(f)),
            Value::F64(f) => e["value"] = json!(f),
            other => e["value"] = json!(other.as_integer().unwrap() as i64),
        }
        meta.push(e);
    }
    let tensors: Vec<Json> = g
        .tensors()
        .iter()
        .map(|t| {
            json!({"name": t.name, "type": t.ggml_type.name(), "shape": t.shape,
                   "sha256": hex(g.tensor_data(t))})
        })
        .collect();
    json!({"metadata": meta, "tensors": tensors})
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
