//! The GGUF summary testdata/convert/make_gold.py writes, to compare a
//! converted file with the Python converter's key by key and tensor by tensor.

use std::path::Path;

use lamina_gguf::{Gguf, Value, ValueType};
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

pub fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
