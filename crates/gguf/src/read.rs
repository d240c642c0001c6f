//! Bounds-checked GGUF parsing.
//!
//! The parser trusts nothing: every length, count and offset is checked
//! against the bytes that remain before it is used, and nothing is allocated
//! in proportion to a count until the count has been shown to fit the file.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use crate::error::{Error, Result};
use crate::types::GgmlType;
use crate::value::{ArrayView, Value, ValueType};

/// GGUF magic bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Maximum tensor rank (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest nesting of arrays of arrays accepted.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Largest `general.alignment` accepted: files use 32, and every tensor can
/// be followed by up to this many bytes of padding.
pub const MAX_ALIGNMENT: u64 = 1 << 16;
/// Most entries reserved up front for a count read from a file; vectors and
/// maps grow past it only as entries actually parse, since an in-memory entry
/// is several times its smallest encoding.
const MAX_RESERVE: usize = 1024;

/// A little-endian reader over a byte slice that reports where it failed.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Absolute file offset of `buf[0]`, for error messages.
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], base: u64) -> Self {
        Cursor { buf, pos: 0, base }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(Error::Truncated {
                what: what(),
                offset: self.base + self.pos as u64,
                need: n,
                have: self.remaining() as u64,
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A GGUF string: u64 length then that many bytes.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("{} length", what()))?;
        self.take(len, what)
    }

    /// Checks that `count` items of at least `min_size` bytes each can fit.
    fn check_count(&self, what: &'static str, count: u64, min_size: u64) -> Result<usize> {
        let remaining = self.remaining() as u64;
        match count.checked_mul(min_size) {
            Some(bytes) if bytes <= remaining => Ok(count as usize),
            _ => Err(Error::CountTooLarge {
                what,
                count,
                remaining,
            }),
        }
    }

    /// Decodes one value of a known type.
    pub(crate) fn value_of_type(
        &mut self,
        ty: ValueType,
        key: &str,
        depth: usize,
    ) -> Result<Value<'a>> {
        let what = || format!("value of key {key}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::Bool => Value::Bool(self.array::<1>(&what)?[0] != 0),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::NestingTooDeep {
                        key: key.to_string(),
                        max: MAX_ARRAY_DEPTH,
                    });
                }
                let type_id = self.u32(&|| format!("array type of key {key}"))?;
                let elem_type =
                    ValueType::from_id(type_id).ok_or_else(|| Error::InvalidValueType {
                        key: key.to_string(),
                        type_id,
                    })?;
                let count = self.u64(&|| format!("array length of key {key}"))?;
                let start = self.pos;
                let len = match elem_type.scalar_size() {
                    Some(size) => {
                        let len = self.check_count("array element", count, size as u64)?;
                        self.pos += len * size;
                        len
                    }
                    None => {
                        // Strings take at least 8 bytes, nested arrays 12.
                        let min = if elem_type == ValueType::String {
                            8
                        } else {
                            12
                        };
                        let len = self.check_count("array element", count, min)?;
                        for _ in 0..len {
                            self.value_of_type(elem_type, key, depth + 1)?;
                        }
                        len
                    }
                };
                Value::Array(ArrayView {
                    elem_type,
                    len,
                    bytes: &self.buf[start..self.pos],
                })
            }
        })
    }
}

/// A metadata value as stored in [`Gguf`]: scalars inline, strings and arrays
/// as byte ranges into the file so nothing is copied.
#[derive(Clone, Debug)]
enum StoredValue {
    Scalar(Value<'static>),
    String(Range<usize>),
    Array {
        elem_type: ValueType,
        len: usize,
        bytes: Range<usize>,
    },
}

/// Where a tensor lives and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Dimensions, innermost (row length) first, as ggml orders them.
    pub shape: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Number of rows (product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        self.shape.iter().skip(1).product()
    }

    /// Row length (the first dimension).
    pub fn row_len(&self) -> u64 {
        self.shape.first().copied().unwrap_or(1)
    }
}

/// A parsed GGUF file over any byte container: a memory map, a `Vec<u8>` or a slice.
#[derive(Debug)]
pub struct Gguf<D = memmap2::Mmap> {
    data: D,
    /// Whether `data` maps the file itself ([`Gguf::open`]), rather than
    /// holding a copy ([`Gguf::read`], [`Gguf::from_bytes`]).
    file_mapped: bool,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, StoredValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl Gguf<memmap2::Mmap> {
    /// Opens and parses a file, mapping it read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let mut g = Gguf::load(path.as_ref(), crate::mmap::map_read_only)?;
        g.file_mapped = true;
        Ok(g)
    }

    /// Reads and parses a file held in anonymous memory on 2 MiB pages
    /// ([`crate::read_into_memory`]) instead of mapping it.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        Gguf::load(path.as_ref(), crate::mmap::read_into_memory)
    }

    fn load(path: &Path, bring_in: fn(&Path) -> std::io::Result<memmap2::Mmap>) -> Result<Self> {
        let map = bring_in(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Gguf::from_bytes(map)
    }

    /// Rewrites the bytes of a file read into memory ([`Gguf::read`]) in
    /// place: `f` gets the whole file, writable, and what it returns comes
    /// back with the file. `None`, with `f` not called, for a mapped file,
    /// whose pages are the page cache's. Whatever `f` writes, the header
    /// parsed at open stays the one in use: callers rewrite tensor data only.
    /// An error (the memory's protection could not change) consumes the file.
    pub fn rewrite<R>(self, f: impl FnOnce(&mut [u8]) -> R) -> std::io::Result<(Self, Option<R>)> {
        if self.file_mapped {
            return Ok((self, None));
        }
        let Gguf { data, .. } = self;
        let mut data = data.make_mut()?;
        let out = f(&mut data);
        let data = data.make_read_only()?;
        Ok((Gguf { data, ..self }, Some(out)))
    }

    /// Takes `len` bytes at `offset` of a mapped file ([`Gguf::open`]) out of
    /// this process's resident memory (they stay in the page cache and
    /// come back, unchanged, if read again), for data a loader has copied
    /// elsewhere. `Ok(false)` and nothing done for a file held in memory.
    pub fn release(&self, offset: usize, len: usize) -> std::io::Result<bool> {
        if !self.file_mapped {
            return Ok(false);
        }
        crate::mmap::release_file_pages(&self.data, offset, len)?;
        Ok(true)
    }
}

impl<D: AsRef<[u8]>> Gguf<D> {
    /// Parses a GGUF held in memory.
    pub fn from_bytes(data: D) -> Result<Self> {
        let parsed = parse(data.as_ref())?;
        Ok(Gguf {
            data,
            file_mapped: false,
            version: parsed.version,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
            metadata: parsed.metadata,
            key_index: parsed.key_index,
            tensors: parsed.tensors,
            tensor_index: parsed.tensor_index,
        })
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// Number of metadata entries.
    pub fn metadata_len(&self) -> usize {
        self.metadata.len()
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, Value<'_>)> + '_ {
        self.metadata
            .iter()
            .map(|(k, v)| (k.as_str(), self.resolve(v)))
    }

    fn resolve(&self, stored: &StoredValue) -> Value<'_> {
        let bytes = self.data.as_ref();
        match stored {
            StoredValue::Scalar(v) => *v,
            StoredValue::String(r) => Value::String(&bytes[r.clone()]),
            StoredValue::Array {
                elem_type,
                len,
                bytes: r,
            } => Value::Array(ArrayView {
                elem_type: *elem_type,
                len: *len,
                bytes: &bytes[r.clone()],
            }),
        }
    }

    /// The value of a key, if present.
    pub fn get(&self, key: &str) -> Option<Value<'_>> {
        self.key_index
            .get(key)
            .map(|&i| self.resolve(&self.metadata[i].1))
    }

    /// Whether a key is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.key_index.contains_key(key)
    }

    fn require(&self, key: &str) -> Result<Value<'_>> {
        self.get(key)
            .ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    fn wrong_type(key: &str, expected: &'static str, found: &Value<'_>) -> Error {
        Error::WrongType {
            key: key.to_string(),
            expected,
            found: found.type_description(),
        }
    }

    /// A string value; wrong types and invalid UTF-8 are errors naming the key.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(bytes) => std::str::from_utf8(bytes).map_err(|_| Error::InvalidUtf8 {
                what: format!("value of key {key}"),
                offset: 0,
            }),
            other => Err(Self::wrong_type(key, "string", &other)),
        }
    }

    /// A u32 value (strict: only type u32 is accepted).
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        match self.require(key)? {
            Value::U32(v) => Ok(v),
            other => Err(Self::wrong_type(key, "u32", &other)),
        }
    }

    /// An f32 value (strict).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        match self.require(key)? {
            Value::F32(v) => Ok(v),
            other => Err(Self::wrong_type(key, "f32", &other)),
        }
    }

    /// A bool value (strict).
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(v) => Ok(v),
            other => Err(Self::wrong_type(key, "bool", &other)),
        }
    }

    /// Any non-negative integer type, converted to u64.
    pub fn get_uint(&self, key: &str) -> Result<u64> {
        let value = self.require(key)?;
        value
            .as_integer()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| Self::wrong_type(key, "unsigned integer", &value))
    }

    /// Any numeric type, converted to f32.
    pub fn get_float(&self, key: &str) -> Result<f32> {
        let value = self.require(key)?;
        value
            .as_f64()
            .map(|v| v as f32)
            .ok_or_else(|| Self::wrong_type(key, "number", &value))
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Result<ArrayView<'_>> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(Self::wrong_type(key, "array", &other)),
        }
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// A tensor's info by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor, borrowed from the file (never copied).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.data.as_ref()[start..start + info.n_bytes as usize]
    }

    /// A tensor's info and bytes by name.
    pub fn tensor_by_name(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        Ok((info, self.tensor_data(info)))
    }
}

struct Parsed {
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, StoredValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

fn utf8(bytes: &[u8], what: impl FnOnce() -> String, offset: u64) -> Result<String> {
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|e| Error::InvalidUtf8 {
            what: what(),
            offset: offset + e.valid_up_to() as u64,
        })
}

fn parse(buf: &[u8]) -> Result<Parsed> {
    let mut cur = Cursor::new(buf, 0);
    let magic: [u8; 4] = cur.array(&|| "magic".into())?;
    if magic != MAGIC {
        return Err(Error::BadMagic(magic));
    }
    let version = cur.u32(&|| "version".into())?;
    match version {
        2 | 3 => {}
        v if v & 0xffff == 0 && v != 0 => return Err(Error::BigEndian(v)),
        v => return Err(Error::UnsupportedVersion(v)),
    }
    let n_tensors = cur.u64(&|| "tensor count".into())?;
    let n_kv = cur.u64(&|| "metadata count".into())?;
    // A key-value pair takes at least 13 bytes, a tensor info at least 32.
    let n_kv = cur.check_count("metadata entry", n_kv, 13)?;
    let n_tensors_checked = cur.check_count("tensor", n_tensors, 32)?;

    let mut metadata = Vec::with_capacity(n_kv.min(MAX_RESERVE));
    let mut key_index = HashMap::with_capacity(n_kv.min(MAX_RESERVE));
    for i in 0..n_kv {
        let key_pos = cur.pos() as u64;
        let key_bytes = cur.string(&|| format!("key of metadata entry {i}"))?;
        let key = utf8(
            key_bytes,
            || format!("key of metadata entry {i}"),
            key_pos + 8,
        )?;
        let type_id = cur.u32(&|| format!("type of key {key}"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| Error::InvalidValueType {
            key: key.clone(),
            type_id,
        })?;
        let value_start = cur.pos();
        let value = cur.value_of_type(ty, &key, 0)?;
        let stored = match value {
            Value::String(s) => {
                let end = cur.pos();
                StoredValue::String(end - s.len()..end)
            }
            Value::Array(a) => StoredValue::Array {
                elem_type: a.elem_type(),
                len: a.len(),
                bytes: cur.pos() - a.bytes.len()..cur.pos(),
            },
            Value::U8(v) => StoredValue::Scalar(Value::U8(v)),
            Value::I8(v) => StoredValue::Scalar(Value::I8(v)),
            Value::U16(v) => StoredValue::Scalar(Value::U16(v)),
            Value::I16(v) => StoredValue::Scalar(Value::I16(v)),
            Value::U32(v) => StoredValue::Scalar(Value::U32(v)),
            Value::I32(v) => StoredValue::Scalar(Value::I32(v)),
            Value::F32(v) => StoredValue::Scalar(Value::F32(v)),
            Value::Bool(v) => StoredValue::Scalar(Value::Bool(v)),
            Value::U64(v) => StoredValue::Scalar(Value::U64(v)),
            Value::I64(v) => StoredValue::Scalar(Value::I64(v)),
            Value::F64(v) => StoredValue::Scalar(Value::F64(v)),
        };
        debug_assert!(value_start <= cur.pos());
        if key_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(Error::DuplicateKey(key));
        }
        metadata.push((key, stored));
    }

    let alignment = match key_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(StoredValue::Scalar(Value::U32(a))) => {
            let a = u64::from(*a);
            if !a.is_power_of_two() || a > MAX_ALIGNMENT {
                return Err(Error::BadAlignment(a));
            }
            a
        }
        Some(StoredValue::Scalar(v)) => return Err(Error::BadAlignmentType(v.value_type().name())),
        Some(StoredValue::String(_)) => return Err(Error::BadAlignmentType("string")),
        Some(StoredValue::Array { .. }) => return Err(Error::BadAlignmentType("array")),
    };

    let mut tensors = Vec::with_capacity(n_tensors_checked.min(MAX_RESERVE));
    let mut tensor_index = HashMap::with_capacity(n_tensors_checked.min(MAX_RESERVE));
    for i in 0..n_tensors_checked {
        let name_pos = cur.pos() as u64;
        let name_bytes = cur.string(&|| format!("name of tensor {i}"))?;
        let name = utf8(name_bytes, || format!("name of tensor {i}"), name_pos + 8)?;
        let n_dims = cur.u32(&|| format!("dimension count of tensor {name}"))?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(Error::BadDimCount {
                tensor: name,
                n_dims,
            });
        }
        let mut shape = Vec::with_capacity(MAX_DIMS);
        for _ in 0..n_dims {
            shape.push(cur.u64(&|| format!("shape of tensor {name}"))?);
        }
        let type_id = cur.u32(&|| format!("type of tensor {name}"))?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| Error::UnknownTensorType {
            tensor: name.clone(),
            type_id,
        })?;
        let offset = cur.u64(&|| format!("offset of tensor {name}"))?;

        let bad_shape = |why| Error::BadShape {
            tensor: name.clone(),
            shape: shape.clone(),
            why,
        };
        // The non-zero dimensions' product must fit, so that every partial
        // product (rows, elements) does even when another dimension is zero.
        let n_elements = shape
            .iter()
            .filter(|&&d| d != 0)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad_shape("element count overflows"))?;
        let n_elements = if shape.contains(&0) { 0 } else { n_elements };
        if !shape[0].is_multiple_of(ggml_type.block_size() as u64) {
            return Err(bad_shape("row length is not a multiple of the block size"));
        }
        let n_bytes = ggml_type
            .row_bytes(n_elements)
            .ok_or_else(|| bad_shape("byte size overflows"))?;
        if offset % alignment != 0 {
            return Err(Error::MisalignedTensor {
                tensor: name,
                offset,
                alignment,
            });
        }
        if tensor_index.insert(name.clone(), tensors.len()).is_some() {
            return Err(Error::DuplicateTensor(name));
        }
        tensors.push(TensorInfo {
            name,
            shape,
            ggml_type,
            offset,
            n_bytes,
        });
    }

    let header_end = cur.pos() as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(Error::Truncated {
            what: "padding before tensor data".into(),
            offset: header_end,
            need: data_offset - header_end,
            have: file_len - header_end,
        });
    }
    let data_len = file_len.saturating_sub(data_offset);
    for t in &tensors {
        let end = t.offset.checked_add(t.n_bytes);
        if end.is_none_or(|end| end > data_len) {
            return Err(Error::TensorOutOfBounds {
                tensor: t.name.clone(),
                start: t.offset,
                end: end.unwrap_or(u64::MAX),
                data_len,
            });
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        if pair[0].offset + pair[0].n_bytes > pair[1].offset {
            return Err(Error::OverlappingTensors {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }

    Ok(Parsed {
        version,
        alignment,
        data_offset,
        metadata,
        key_index,
        tensors,
        tensor_index,
    })
}
