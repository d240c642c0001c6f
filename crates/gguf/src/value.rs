//! Metadata values: borrowed views into a parsed file, and owned values for writing.

use std::fmt;

/// The type tag of a GGUF metadata value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The value type for a GGUF type id.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Size in bytes of a fixed-size scalar of this type; `None` for strings and arrays.
    pub fn scalar_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// Lower-case name used in messages and JSON (`u32`, `string`, `array`...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value borrowed from a parsed file.
///
/// Strings are raw bytes: GGUF says they are UTF-8, but token pieces of some
/// vocabularies are not, so validation is left to [`Value::as_str`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(&'a [u8]),
    Array(ArrayView<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    /// The type tag of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A short description of the type for error messages (`array of string`).
    pub fn type_description(&self) -> String {
        match self {
            Value::Array(a) => format!("array of {}", a.elem_type()),
            v => v.value_type().name().to_string(),
        }
    }

    /// The string, if this is a valid UTF-8 string value.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::String(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// Any integer value widened to i128 (lossless for every integer type).
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any numeric value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_integer().map(|v| v as f64),
        }
    }

    /// Copy into an owned value, for rewriting a file whose metadata is
    /// trusted: an owned array element takes 32 bytes however small its
    /// encoding, so a file's arrays are better copied with
    /// [`Value::try_to_owned_value`].
    pub fn to_owned_value(&self) -> OwnedValue {
        match *self {
            Value::U8(v) => OwnedValue::U8(v),
            Value::I8(v) => OwnedValue::I8(v),
            Value::U16(v) => OwnedValue::U16(v),
            Value::I16(v) => OwnedValue::I16(v),
            Value::U32(v) => OwnedValue::U32(v),
            Value::I32(v) => OwnedValue::I32(v),
            Value::F32(v) => OwnedValue::F32(v),
            Value::Bool(v) => OwnedValue::Bool(v),
            Value::String(b) => OwnedValue::String(b.to_vec()),
            Value::Array(a) => OwnedValue::Array(
                a.elem_type(),
                a.iter().map(|v| v.to_owned_value()).collect(),
            ),
            Value::U64(v) => OwnedValue::U64(v),
            Value::I64(v) => OwnedValue::I64(v),
            Value::F64(v) => OwnedValue::F64(v),
        }
    }
}

/// Most array elements (at every nesting level, all keys together) that
/// [`Value::try_to_owned_value`] copies out of one file: at 32 bytes each a
/// gigabyte, and far above what real files hold (a 262k-token vocabulary
/// with its scores, types and merges is under two million).
pub const MAX_COPIED_ELEMENTS: usize = 1 << 25;

impl Value<'_> {
    /// [`Value::to_owned_value`], charging every array element to `budget`
    /// (start it at [`MAX_COPIED_ELEMENTS`] for a file) and refusing, before
    /// allocating, an array that would pass it.
    pub fn try_to_owned_value(&self, key: &str, budget: &mut usize) -> crate::Result<OwnedValue> {
        let Value::Array(a) = self else {
            return Ok(self.to_owned_value());
        };
        if a.len() > *budget {
            return Err(crate::Error::TooLargeToCopy {
                key: key.to_string(),
                elements: a.len() as u64,
                max: MAX_COPIED_ELEMENTS,
            });
        }
        *budget -= a.len();
        let items = a
            .iter()
            .map(|v| v.try_to_owned_value(key, budget))
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(OwnedValue::Array(a.elem_type(), items))
    }
}

/// An array value: its element type, length and the (already validated) bytes
/// of its elements. Elements are decoded on access, so a 262k-entry vocabulary
/// costs nothing until it is read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArrayView<'a> {
    pub(crate) elem_type: ValueType,
    pub(crate) len: usize,
    pub(crate) bytes: &'a [u8],
}

impl<'a> ArrayView<'a> {
    /// Element type.
    pub fn elem_type(&self) -> ValueType {
        self.elem_type
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Iterate over the elements.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            elem_type: self.elem_type,
            remaining: self.len,
            bytes: self.bytes,
        }
    }

    /// The raw little-endian bytes of a fixed-size numeric array, `None` for
    /// string and array elements.
    pub fn raw_scalars(&self) -> Option<&'a [u8]> {
        self.elem_type.scalar_size().map(|_| self.bytes)
    }

    /// The elements as strings (raw bytes), or `None` if this is not a string array.
    pub fn strings(&self) -> Option<impl Iterator<Item = &'a [u8]> + 'a> {
        (self.elem_type == ValueType::String).then(|| {
            self.iter().map(|v| match v {
                Value::String(s) => s,
                _ => &[][..],
            })
        })
    }

    /// The elements converted to f32, if they are all numeric.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        self.iter().map(|v| v.as_f64().map(|x| x as f32)).collect()
    }

    /// The elements converted to i64, if they are all integers that fit.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        self.iter()
            .map(|v| v.as_integer().and_then(|x| i64::try_from(x).ok()))
            .collect()
    }
}

/// Iterator over the elements of an [`ArrayView`].
#[derive(Clone, Debug)]
pub struct ArrayIter<'a> {
    elem_type: ValueType,
    remaining: usize,
    bytes: &'a [u8],
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.remaining == 0 {
            return None;
        }
        // The bytes were validated when the file was parsed, so decoding
        // cannot fail; a failure would mean a bug, and ends the iteration.
        let mut cursor = crate::read::Cursor::new(self.bytes, 0);
        let value = cursor
            .value_of_type(self.elem_type, "array element", 1)
            .ok()?;
        self.bytes = &self.bytes[cursor.pos()..];
        self.remaining -= 1;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for ArrayIter<'_> {}

/// An owned metadata value, for building files.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(Vec<u8>),
    /// Element type and elements; every element must be of that type.
    Array(ValueType, Vec<OwnedValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl OwnedValue {
    /// The type tag of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            OwnedValue::U8(_) => ValueType::U8,
            OwnedValue::I8(_) => ValueType::I8,
            OwnedValue::U16(_) => ValueType::U16,
            OwnedValue::I16(_) => ValueType::I16,
            OwnedValue::U32(_) => ValueType::U32,
            OwnedValue::I32(_) => ValueType::I32,
            OwnedValue::F32(_) => ValueType::F32,
            OwnedValue::Bool(_) => ValueType::Bool,
            OwnedValue::String(_) => ValueType::String,
            OwnedValue::Array(..) => ValueType::Array,
            OwnedValue::U64(_) => ValueType::U64,
            OwnedValue::I64(_) => ValueType::I64,
            OwnedValue::F64(_) => ValueType::F64,
        }
    }

    /// A string value.
    pub fn string(s: impl Into<String>) -> Self {
        OwnedValue::String(s.into().into_bytes())
    }

    /// An array of strings.
    pub fn string_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Self {
        OwnedValue::Array(
            ValueType::String,
            items
                .into_iter()
                .map(|s| OwnedValue::String(s.as_ref().as_bytes().to_vec()))
                .collect(),
        )
    }

    /// An array of f32.
    pub fn f32_array(items: impl IntoIterator<Item = f32>) -> Self {
        OwnedValue::Array(
            ValueType::F32,
            items.into_iter().map(OwnedValue::F32).collect(),
        )
    }

    /// An array of i32.
    pub fn i32_array(items: impl IntoIterator<Item = i32>) -> Self {
        OwnedValue::Array(
            ValueType::I32,
            items.into_iter().map(OwnedValue::I32).collect(),
        )
    }

    /// Compare with a borrowed value (floats compared bitwise, so NaN == NaN).
    pub fn matches(&self, other: &Value<'_>) -> bool {
        match (self, other) {
            (OwnedValue::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
            (OwnedValue::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
            (OwnedValue::String(a), Value::String(b)) => a.as_slice() == *b,
            (OwnedValue::Array(t, items), Value::Array(view)) => {
                *t == view.elem_type()
                    && items.len() == view.len()
                    && items.iter().zip(view.iter()).all(|(a, b)| a.matches(&b))
            }
            (a, b) => {
                a.value_type() == b.value_type()
                    && a.value_type().scalar_size().is_some()
                    && a.to_value_scalar() == Some(*b)
            }
        }
    }

    fn to_value_scalar(&self) -> Option<Value<'static>> {
        Some(match *self {
            OwnedValue::U8(v) => Value::U8(v),
            OwnedValue::I8(v) => Value::I8(v),
            OwnedValue::U16(v) => Value::U16(v),
            OwnedValue::I16(v) => Value::I16(v),
            OwnedValue::U32(v) => Value::U32(v),
            OwnedValue::I32(v) => Value::I32(v),
            OwnedValue::F32(v) => Value::F32(v),
            OwnedValue::Bool(v) => Value::Bool(v),
            OwnedValue::U64(v) => Value::U64(v),
            OwnedValue::I64(v) => Value::I64(v),
            OwnedValue::F64(v) => Value::F64(v),
            OwnedValue::String(_) | OwnedValue::Array(..) => return None,
        })
    }
}
