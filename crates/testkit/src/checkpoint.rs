//! Conformance checkpoints rebuilt bit for bit from their manifests: the
//! Rust twin of `testdata/families/make_checkpoints.py` and
//! `testdata/embedders/make_checkpoints.py`.
//!
//! A checkpoint's `weights.json` lists its tensors in order with a scale and
//! an offset; the values come from one xorshift64 stream seeded per
//! checkpoint, `u = ((x >> 40) as f32 * 2^-24) * 2 - 1` (exact in f32) and
//! then `u * scale + offset` (each rounded to f32, never fused), so Python
//! and Rust produce the same bits. Every tensor's SHA-256 is in the
//! manifest. The embedders' manifests also list the other files the
//! checkpoint folder holds (`files`: path in the folder, path under
//! `testdata/embedders/`).

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// The repository's `testdata/`.
pub fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// `testdata/embedders/`.
pub fn embedders_dir() -> PathBuf {
    testdata_dir().join("embedders")
}

/// Lower-case hex of a SHA-256.
pub fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A JSON file, or a panic naming it.
pub fn read_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One tensor of a manifest.
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub scale: f32,
    pub offset: f32,
    pub sha256: String,
}

/// A checkpoint's `weights.json`.
pub struct Manifest {
    pub seed: u64,
    pub tensors: Vec<TensorSpec>,
    /// Other files of the folder: (path in the folder, path under the
    /// manifest's suite directory).
    pub files: Vec<(String, String)>,
}

/// Reads `weights.json` from `dir`.
pub fn manifest(dir: &Path) -> Manifest {
    let v = read_json(&dir.join("weights.json"));
    let tensors = v["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| TensorSpec {
            name: t["name"].as_str().expect("name").to_string(),
            shape: t["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dimension") as usize)
                .collect(),
            // Python rounds the JSON double to f32 the same way.
            scale: t["scale"].as_f64().expect("scale") as f32,
            offset: t["offset"].as_f64().expect("offset") as f32,
            sha256: t["sha256"].as_str().expect("sha256").to_string(),
        })
        .collect();
    let files = v["files"]
        .as_array()
        .map(|fs| {
            fs.iter()
                .map(|f| {
                    (
                        f[0].as_str().expect("file").to_string(),
                        f[1].as_str().expect("file").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Manifest {
        seed: v["seed"].as_u64().expect("seed"),
        tensors,
        files,
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

/// The tensors of `m` in manifest order; an error names the first whose
/// bytes differ from the Python generator's.
pub fn tensors(label: &str, m: &Manifest) -> Result<Vec<Tensor>, String> {
    let mut rng = Xorshift(m.seed);
    let mut out = Vec::with_capacity(m.tensors.len());
    for t in &m.tensors {
        let n: usize = t.shape.iter().product();
        let mut bytes = Vec::with_capacity(n * 4);
        for _ in 0..n {
            let v = rng.next_u() * t.scale + t.offset;
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let got = hex(&bytes);
        if got != t.sha256 {
            return Err(format!(
                "{label}: tensor {} has SHA-256 {got}, the Python generator's is {}",
                t.name, t.sha256
            ));
        }
        out.push((t.name.clone(), t.shape.clone(), bytes));
    }
    Ok(out)
}

/// Writes `tensors` as F32 safetensors in the layout the Python generators
/// write: compact JSON header in manifest order, space-padded to 8 bytes,
/// then the data back to back.
pub fn write_safetensors(path: &Path, tensors: &[Tensor]) -> Result<(), String> {
    let mut header = String::from("{");
    let mut off = 0usize;
    for (name, shape, bytes) in tensors {
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
    for (_, _, bytes) in tensors {
        file.extend_from_slice(bytes);
    }
    std::fs::write(path, file).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `parent/NAME/` for the embedder checkpoint `testdata/embedders/NAME`
/// (the manifest's files, then model.safetensors) and returns it. The folder
/// is named after the checkpoint because converters derive `general.name`
/// from it, as the gold's conversion did.
pub fn write_embedder(name: &str, parent: &Path) -> Result<PathBuf, String> {
    let src = embedders_dir().join(name);
    let m = manifest(&src);
    let dir = parent.join(name);
    for (to, from) in &m.files {
        let (from, to) = (embedders_dir().join(from), dir.join(to));
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        std::fs::copy(&from, &to).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_safetensors(&dir.join("model.safetensors"), &tensors(name, &m)?)?;
    Ok(dir)
}
