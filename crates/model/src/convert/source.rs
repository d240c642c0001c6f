//! The checkpoint's safetensors files, memory-mapped, and the tensors in them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lamina_gguf::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::arch::Model;
use super::{ConvertOptions, Error, Result, floats, io_err};

/// Where a tensor lives: which mapped file, which header entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorRef {
    pub file: usize,
    pub name: String,
}

/// One source tensor's description.
#[derive(Clone, Debug)]
pub struct SourceTensor {
    /// The name the converter sees (after the Python filters' renames).
    pub name: String,
    pub at: TensorRef,
    pub shape: Vec<usize>,
}

struct MappedFile {
    path: PathBuf,
    map: Mmap,
    /// Tensor name → (dtype, shape, byte range in `map`).
    tensors: BTreeMap<String, (Dtype, Vec<usize>, usize, usize)>,
}

/// All mapped safetensors files and the model's tensors in the order the
/// Python converter visits them: extra (Dense) tensors first, then each part
/// file in name order, each file's tensors in name order.
pub struct Sources {
    files: Vec<MappedFile>,
    /// Dense-module tensors (already renamed `dense_2.weight` etc.).
    pub extra: Vec<SourceTensor>,
    pub model: Vec<SourceTensor>,
}

/// A borrowed view of one tensor's elements.
pub struct View<'a> {
    dtype: Dtype,
    data: &'a [u8],
    shape: &'a [usize],
}

impl View<'_> {
    /// Elements per row (product of all dimensions but the first).
    pub fn row_len(&self) -> usize {
        self.shape.iter().skip(1).product()
    }

    pub fn is_f16(&self) -> bool {
        self.dtype == Dtype::F16
    }

    /// Appends row `r` as f32 to `out`.
    pub fn read_row(&self, r: usize, out: &mut Vec<f32>) -> Result<()> {
        let n = self.row_len();
        let size = self.dtype.bitsize() / 8;
        let start = r * n * size;
        let bytes = self
            .data
            .get(start..start + n * size)
            .ok_or_else(|| Error::Tensor(format!("row {r} is outside the tensor data")))?;
        match self.dtype {
            Dtype::F32 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ),
            Dtype::F16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| floats::f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))),
            ),
            Dtype::BF16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|b| floats::bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))),
            ),
            d => {
                return Err(Error::Tensor(format!(
                    "tensor dtype {d:?} is not supported (F32, F16 and BF16 are)"
                )));
            }
        }
        Ok(())
    }
}

fn map_file(path: &Path) -> Result<MappedFile> {
    let map = lamina_gguf::map_read_only(path).map_err(io_err(path))?;
    let bad = |e: safetensors::SafeTensorError| {
        Error::Tensor(format!(
            "{}: not a valid safetensors file: {e}",
            path.display()
        ))
    };
    let st = SafeTensors::deserialize(&map).map_err(bad)?;
    let (header_len, _) = SafeTensors::read_metadata(&map).map_err(bad)?;
    let base = 8 + header_len;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        let dtype = view.dtype();
        // The view's data is a sub-slice of the map: recover its offset.
        let start = view.data().as_ptr() as usize - map.as_ptr() as usize;
        debug_assert!(start >= base);
        let end = start + view.data().len();
        tensors.insert(name, (dtype, view.shape().to_vec(), start, end));
    }
    drop(st);
    Ok(MappedFile {
        path: path.to_path_buf(),
        map,
        tensors,
    })
}

/// Only float tensors are converted; others (BERT's integer `position_ids`)
/// may be present as long as the architecture drops them.
fn check_dtype(path: &Path, name: &str, dtype: Dtype) -> Result<()> {
    if matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
        return Ok(());
    }
    Err(Error::Tensor(format!(
        "{}: tensor {name} has dtype {dtype:?}; lamina convert reads F32, F16 and BF16 \
         checkpoints (dequantize or re-save the model first)",
        path.display()
    )))
}

impl Sources {
    pub fn open(dir: &Path, model: &Model, opts: &ConvertOptions) -> Result<Self> {
        let mut parts: Vec<String> = Vec::new();
        let index = dir.join("model.safetensors.index.json");
        if index.is_file() {
            let v = super::arch::read_json(&index)?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| {
                    Error::Config(format!("{}: no \"weight_map\" object", index.display()))
                })?;
            for f in map.values() {
                if let Some(f) = f.as_str()
                    && !parts.iter().any(|p| p == f)
                {
                    parts.push(f.to_string());
                }
            }
            parts.sort();
        } else {
            for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
                let entry = entry.map_err(io_err(dir))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with("model") && name.ends_with(".safetensors") {
                    parts.push(name);
                }
            }
            parts.sort();
        }
        if parts.is_empty() {
            return Err(Error::Tensor(format!(
                "no model*.safetensors files in {}: lamina convert needs the safetensors \
                 checkpoint (PyTorch .bin files are not supported)",
                dir.display()
            )));
        }
        let mut files = Vec::new();
        let mut model_tensors = Vec::new();
        for part in &parts {
            let path = dir.join(part);
            if !path.is_file() {
                return Err(Error::Tensor(format!(
                    "{} is listed in model.safetensors.index.json but missing",
                    path.display()
                )));
            }
            let f = map_file(&path)?;
            for (name, (dtype, shape, _, _)) in &f.tensors {
                if let Some(renamed) = model.filter_name(name) {
                    check_dtype(&path, name, *dtype)?;
                    model_tensors.push(SourceTensor {
                        name: renamed,
                        at: TensorRef {
                            file: files.len(),
                            name: name.clone(),
                        },
                        shape: shape.clone(),
                    });
                }
            }
            files.push(f);
        }
        let mut extra = Vec::new();
        if opts.dense_modules {
            for (module_path, prefix) in &model.dense_modules {
                let path = dir.join(module_path).join("model.safetensors");
                let f = map_file(&path)?;
                for (name, (dtype, shape, _, _)) in &f.tensors {
                    if !name.ends_with(".weight") {
                        continue;
                    }
                    check_dtype(&path, name, *dtype)?;
                    extra.push(SourceTensor {
                        name: name.replace("linear", prefix),
                        at: TensorRef {
                            file: files.len(),
                            name: name.clone(),
                        },
                        shape: shape.clone(),
                    });
                }
                files.push(f);
            }
        }
        Ok(Sources {
            files,
            extra,
            model: model_tensors,
        })
    }

    pub fn get(&self, r: &TensorRef) -> View<'_> {
        let f = &self.files[r.file];
        let (dtype, shape, start, end) = &f.tensors[&r.name];
        View {
            dtype: *dtype,
            data: &f.map[*start..*end],
            shape,
        }
    }

    #[allow(dead_code)]
    pub fn path(&self, r: &TensorRef) -> &Path {
        &self.files[r.file].path
    }
}
