//! Writer → reader round trips, including property tests over random metadata and tensors.

use lamina_gguf::{GgmlType, Gguf, GgufBuilder, OwnedValue, Value, ValueType};
use proptest::prelude::*;

fn write(builder: GgufBuilder, data: &[Vec<u8>]) -> Vec<u8> {
    let mut w = builder.write_header(Vec::new()).unwrap();
    for d in data {
        w.write_tensor(d).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn typed_getters_name_the_key_and_type() {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", OwnedValue::string("llama"))
        .unwrap();
    b.set("llama.block_count", OwnedValue::string("thirty"))
        .unwrap();
    b.set("llama.context_length", OwnedValue::U32(2048))
        .unwrap();
    b.set("llama.rope.freq_base", OwnedValue::F32(1e4)).unwrap();
    let bytes = write(b, &[]);
    let g = Gguf::from_bytes(bytes).unwrap();
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.get_u32("llama.context_length").unwrap(), 2048);
    assert_eq!(g.get_uint("llama.context_length").unwrap(), 2048);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 1e4);
    assert_eq!(
        g.get_u32("llama.block_count").unwrap_err().to_string(),
        "key llama.block_count: expected u32, found string"
    );
    assert_eq!(
        g.get_u32("gemma3.context_length").unwrap_err().to_string(),
        "missing key gemma3.context_length"
    );
}

#[test]
fn tensors_are_aligned_and_borrowed() {
    let mut b = GgufBuilder::new();
    b.set("general.alignment", OwnedValue::U32(64)).unwrap();
    b.add_tensor("a", GgmlType::F32, &[3]).unwrap();
    b.add_tensor("b", GgmlType::Q8_0, &[32, 2]).unwrap();
    let a: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let q = vec![7u8; 68];
    let bytes = write(b, &[a.clone(), q.clone()]);
    let g = Gguf::from_bytes(&bytes[..]).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    let (ta, da) = g.tensor_by_name("a").unwrap();
    assert_eq!((ta.n_bytes, ta.offset), (12, 0));
    assert_eq!(da, &a[..]);
    let (tb, db) = g.tensor_by_name("b").unwrap();
    assert_eq!(
        (tb.offset, tb.n_bytes, tb.n_rows(), tb.row_len()),
        (64, 68, 2, 32)
    );
    assert_eq!(db, &q[..]);
    // Zero-copy: the slice points into the buffer we parsed.
    assert!(std::ptr::eq(
        db.as_ptr(),
        bytes[(g.data_offset() + 64) as usize..].as_ptr()
    ));
    assert!(g.tensor_by_name("c").is_err());
}

#[test]
fn writer_rejects_wrong_sizes_and_missing_tensors() {
    let mut b = GgufBuilder::new();
    b.add_tensor("a", GgmlType::F16, &[4]).unwrap();
    assert!(b.add_tensor("a", GgmlType::F16, &[4]).is_err());
    assert!(b.add_tensor("q", GgmlType::Q4_K, &[100]).is_err());
    let mut w = b.clone().write_header(Vec::new()).unwrap();
    assert!(w.write_tensor(&[0; 7]).is_err());
    let w = b.write_header(Vec::new()).unwrap();
    assert!(w.finish().is_err());
}

#[test]
fn chunked_writes_equal_whole_writes() {
    let mut b = GgufBuilder::new();
    b.add_tensor("x", GgmlType::F32, &[10, 3]).unwrap();
    b.add_tensor("y", GgmlType::I8, &[5]).unwrap();
    let x: Vec<u8> = (0..120u8).collect();
    let y = vec![9u8; 5];
    let whole = write(b.clone(), &[x.clone(), y.clone()]);
    let mut w = b.write_header(Vec::new()).unwrap();
    for chunk in x.chunks(7) {
        w.write_chunk(chunk).unwrap();
    }
    w.write_chunk(&y).unwrap();
    assert_eq!(w.finish().unwrap(), whole);
}

#[test]
fn nested_arrays_round_trip() {
    let inner = |v: &[i32]| OwnedValue::i32_array(v.iter().copied());
    let value = OwnedValue::Array(
        ValueType::Array,
        vec![inner(&[1, 2]), inner(&[]), inner(&[3])],
    );
    let mut b = GgufBuilder::new();
    b.set("x.nested", value.clone()).unwrap();
    let bytes = write(b, &[]);
    let g = Gguf::from_bytes(bytes).unwrap();
    let got = g.get("x.nested").unwrap();
    assert!(value.matches(&got));
    let Value::Array(outer) = got else {
        panic!("not an array")
    };
    let lens: Vec<usize> = outer
        .iter()
        .map(|v| match v {
            Value::Array(a) => a.len(),
            _ => usize::MAX,
        })
        .collect();
    assert_eq!(lens, [2, 0, 1]);
}

fn scalar_value() -> impl Strategy<Value = OwnedValue> {
    prop_oneof![
        any::<u8>().prop_map(OwnedValue::U8),
        any::<i8>().prop_map(OwnedValue::I8),
        any::<u16>().prop_map(OwnedValue::U16),
        any::<i16>().prop_map(OwnedValue::I16),
        any::<u32>().prop_map(OwnedValue::U32),
        any::<i32>().prop_map(OwnedValue::I32),
        any::<f32>().prop_map(OwnedValue::F32),
        any::<bool>().prop_map(OwnedValue::Bool),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(OwnedValue::String),
        any::<u64>().prop_map(OwnedValue::U64),
        any::<i64>().prop_map(OwnedValue::I64),
        any::<f64>().prop_map(OwnedValue::F64),
    ]
}

fn any_value() -> impl Strategy<Value = OwnedValue> {
    prop_oneof![
        4 => scalar_value(),
        1 => proptest::collection::vec(any::<f32>(), 0..50).prop_map(OwnedValue::f32_array),
        1 => proptest::collection::vec("[a-z<>▁ ]{0,8}", 0..50).prop_map(OwnedValue::string_array),
        1 => proptest::collection::vec(proptest::collection::vec(any::<i32>(), 0..5), 0..4)
            .prop_map(|v| OwnedValue::Array(ValueType::Array, v.into_iter().map(OwnedValue::i32_array).collect())),
    ]
}

const TENSOR_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::IQ2_XS,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn write_then_read_gives_equal_metadata_and_bytes(
        metadata in proptest::collection::vec(("[a-z.]{1,24}", any_value()), 0..12),
        tensors in proptest::collection::vec((0..TENSOR_TYPES.len(), 1u64..3, 1u64..4, any::<u8>()), 0..6),
        align_pow in 0u32..7,
    ) {
        let mut b = GgufBuilder::new();
        b.set("general.alignment", OwnedValue::U32(1 << align_pow)).unwrap();
        let mut expected_meta: Vec<(String, OwnedValue)> = vec![("general.alignment".into(), OwnedValue::U32(1 << align_pow))];
        for (k, v) in metadata {
            if k == "general.alignment" { continue; }
            b.set(k.clone(), v.clone()).unwrap();
            match expected_meta.iter_mut().find(|(ek, _)| *ek == k) {
                Some(e) => e.1 = v,
                None => expected_meta.push((k, v)),
            }
        }
        let mut data = Vec::new();
        for (i, (ti, blocks, rows, fill)) in tensors.into_iter().enumerate() {
            let ty = TENSOR_TYPES[ti];
            let shape = [ty.block_size() as u64 * blocks, rows];
            let spec = b.add_tensor(format!("t{i}"), ty, &shape).unwrap();
            data.push((spec.name.clone(), shape, ty, vec![fill; spec.n_bytes as usize]));
        }
        let bytes = write(b, &data.iter().map(|d| d.3.clone()).collect::<Vec<_>>());
        let g = Gguf::from_bytes(&bytes[..]).unwrap();
        prop_assert_eq!(g.metadata_len(), expected_meta.len());
        for ((k, v), (gk, gv)) in expected_meta.iter().zip(g.metadata()) {
            prop_assert_eq!(k.as_str(), gk);
            prop_assert!(v.matches(&gv), "{k}: {v:?} != {gv:?}");
        }
        prop_assert_eq!(g.tensors().len(), data.len());
        for (name, shape, ty, bytes) in &data {
            let (info, got) = g.tensor_by_name(name).unwrap();
            prop_assert_eq!(&info.shape[..], &shape[..]);
            prop_assert_eq!(info.ggml_type, *ty);
            prop_assert_eq!(got, &bytes[..]);
        }
        // Writing the parsed file back gives the same bytes.
        let rewritten = write(g.to_builder().unwrap(), &g.tensors().iter().map(|t| g.tensor_data(t).to_vec()).collect::<Vec<_>>());
        prop_assert_eq!(rewritten, bytes);
    }

    #[test]
    fn random_corruption_never_panics(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut b = GgufBuilder::new();
        b.set("general.architecture", OwnedValue::string("llama")).unwrap();
        b.set("tokenizer.ggml.tokens", OwnedValue::string_array(["a", "b", "c"])).unwrap();
        b.add_tensor("w", GgmlType::Q8_0, &[32, 2]).unwrap();
        let mut bytes = write(b, &[vec![1; 68]]);
        for (idx, byte) in flips {
            let i = idx.index(bytes.len());
            bytes[i] = byte;
        }
        // Any result is fine; reaching here without a panic is the property.
        if let Ok(g) = Gguf::from_bytes(&bytes[..]) {
            for t in g.tensors() {
                let _ = g.tensor_data(t);
            }
            for (_, v) in g.metadata() {
                if let Value::Array(a) = v { let _ = a.iter().count(); }
            }
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", OwnedValue::string("llama"))
        .unwrap();
    b.set("a.list", OwnedValue::string_array(["x", "yy", "zzz"]))
        .unwrap();
    b.add_tensor("w", GgmlType::Q4_0, &[32, 2]).unwrap();
    let bytes = write(b, &[vec![3; 36]]);
    let g = Gguf::from_bytes(&bytes[..]).unwrap();
    // Only the padding after the last tensor may be missing.
    let data_end = (g.data_offset() + 36) as usize;
    for len in 0..data_end {
        assert!(
            Gguf::from_bytes(&bytes[..len]).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
    for len in data_end..=bytes.len() {
        assert!(
            Gguf::from_bytes(&bytes[..len]).is_ok(),
            "prefix of {len} bytes refused"
        );
    }
}

#[test]
fn a_file_read_into_memory_parses_as_the_mapped_one() {
    let mut b = GgufBuilder::new();
    b.set("general.architecture", OwnedValue::string("llama"))
        .unwrap();
    b.add_tensor("t", GgmlType::F32, &[4]).unwrap();
    let bytes = write(b, &[vec![9u8; 16]]);
    let dir = std::env::temp_dir().join(format!("lamina-gguf-read-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let read = Gguf::read(&path).unwrap();
    let mapped = Gguf::open(&path).unwrap();
    assert_eq!(read.tensor_by_name("t").unwrap().1, &[9u8; 16][..]);
    assert_eq!(read.as_bytes(), mapped.as_bytes());
    // An empty file is the same error either way; a missing one names the path.
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        Gguf::read(&path).unwrap_err().to_string(),
        Gguf::open(&path).unwrap_err().to_string()
    );
    let err = Gguf::read(dir.join("missing.gguf"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing.gguf"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
