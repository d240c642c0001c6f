//! ggml tensor type ids and their block geometry.
//!
//! Every id that ggml has ever assigned (and still assigns) is known here, so
//! that a reader can size any tensor, including types the engine does not
//! compute. Ids 4, 5 and 31..=33, 36..=38 were removed from ggml and are
//! refused as unknown.

use std::fmt;

macro_rules! ggml_types {
    ($( $variant:ident = $id:literal, $name:literal, $block:literal, $size:literal; )*) => {
        /// A ggml tensor element type, as stored in a GGUF tensor info.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        #[repr(u32)]
        pub enum GgmlType {
            $( $variant = $id, )*
        }

        impl GgmlType {
            /// Every known type, in id order.
            pub const ALL: &'static [GgmlType] = &[$( GgmlType::$variant, )*];

            /// The type for a ggml type id, or `None` for an id ggml does not assign.
            pub fn from_id(id: u32) -> Option<Self> {
                match id {
                    $( $id => Some(GgmlType::$variant), )*
                    _ => None,
                }
            }

            /// The name ggml prints for this type (`Q4_K`, `F16`, ...).
            pub fn name(self) -> &'static str {
                match self { $( GgmlType::$variant => $name, )* }
            }

            /// Number of elements in one block.
            pub fn block_size(self) -> usize {
                match self { $( GgmlType::$variant => $block, )* }
            }

            /// Number of bytes one block occupies.
            pub fn type_size(self) -> usize {
                match self { $( GgmlType::$variant => $size, )* }
            }

            /// The type with this (case-insensitive) name.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|t| t.name().eq_ignore_ascii_case(name))
            }
        }
    };
}

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 18;
    Q4_1 = 3, "Q4_1", 32, 20;
    Q5_0 = 6, "Q5_0", 32, 22;
    Q5_1 = 7, "Q5_1", 32, 24;
    Q8_0 = 8, "Q8_0", 32, 34;
    Q8_1 = 9, "Q8_1", 32, 36;
    Q2_K = 10, "Q2_K", 256, 84;
    Q3_K = 11, "Q3_K", 256, 110;
    Q4_K = 12, "Q4_K", 256, 144;
    Q5_K = 13, "Q5_K", 256, 176;
    Q6_K = 14, "Q6_K", 256, 210;
    Q8_K = 15, "Q8_K", 256, 292;
    IQ2_XXS = 16, "IQ2_XXS", 256, 66;
    IQ2_XS = 17, "IQ2_XS", 256, 74;
    IQ3_XXS = 18, "IQ3_XXS", 256, 98;
    IQ1_S = 19, "IQ1_S", 256, 50;
    IQ4_NL = 20, "IQ4_NL", 32, 18;
    IQ3_S = 21, "IQ3_S", 256, 110;
    IQ2_S = 22, "IQ2_S", 256, 82;
    IQ4_XS = 23, "IQ4_XS", 256, 136;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", 256, 56;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", 256, 54;
    TQ2_0 = 35, "TQ2_0", 256, 66;
    MXFP4 = 39, "MXFP4", 32, 17;
}

impl GgmlType {
    /// Whether this is a block-quantized type (as opposed to a plain scalar type).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes needed for `n_elements` elements, or `None` when `n_elements` is
    /// not a whole number of blocks or the size overflows.
    pub fn row_bytes(self, n_elements: u64) -> Option<u64> {
        let block = self.block_size() as u64;
        if !n_elements.is_multiple_of(block) {
            return None;
        }
        (n_elements / block).checked_mul(self.type_size() as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_removed_ids_are_unknown() {
        for &t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t as u32), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, u32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "id {id}");
        }
    }

    #[test]
    fn block_geometry_matches_ggml() {
        assert_eq!(GgmlType::Q4_K.row_bytes(256), Some(144));
        assert_eq!(GgmlType::Q6_K.row_bytes(512), Some(420));
        assert_eq!(GgmlType::Q8_0.row_bytes(640), Some(680));
        assert_eq!(GgmlType::Q4_K.row_bytes(640), None);
        assert_eq!(GgmlType::F32.row_bytes(3), Some(12));
    }
}
