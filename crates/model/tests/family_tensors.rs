//! The tensor layouts families differ by, on tiny files written here: fused
//! Q/K/V and gate/up compute what separate ones do, biases are added, and
//! features a family does not implement are refused by name.

use std::io::Write;
use std::path::Path;

use lamina_gguf::{GgmlType, GgufBuilder, OwnedValue};
use lamina_kernels::pool::Serial;
use lamina_model::{KvCache, KvType, Model, Workspace};

const D: usize = 8;
const FF: usize = 16;
const VOCAB: usize = 6;
const HEADS: usize = 2;
const KV_HEADS: usize = 1;
const KVD: usize = D / HEADS * KV_HEADS;

/// A deterministic value for element `i` of tensor number `t`.
fn value(t: usize, i: usize) -> f32 {
    let x = (t * 7919 + i * 104_729) % 1000;
    (x as f32 / 500.0 - 1.0) * 0.5
}

/// One tensor: name, GGUF shape (columns first) and values.
struct Tensor {
    name: String,
    shape: Vec<u64>,
    data: Vec<f32>,
}

fn tensor(name: &str, shape: &[usize], t: usize) -> Tensor {
    let n = shape.iter().product();
    Tensor {
        name: name.into(),
        shape: shape.iter().map(|&s| s as u64).collect(),
        data: (0..n).map(|i| value(t, i)).collect(),
    }
}

/// Concatenates the rows of `parts` into one tensor named `name`.
fn fused(name: &str, parts: &[&Tensor]) -> Tensor {
    let cols = parts[0].shape[0];
    let rows: u64 = parts.iter().map(|p| *p.shape.get(1).unwrap_or(&1)).sum();
    let shape = if parts[0].shape.len() == 1 {
        vec![parts.iter().map(|p| p.shape[0]).sum()]
    } else {
        vec![cols, rows]
    };
    Tensor {
        name: name.into(),
        shape,
        data: parts.iter().flat_map(|p| p.data.iter().copied()).collect(),
    }
}

/// A one-layer model of `arch` from `tensors`, plus `keys`.
fn write(path: &Path, arch: &str, keys: &[(&str, OwnedValue)], tensors: &[Tensor]) {
    let mut b = GgufBuilder::new();
    let key = |k: &str| format!("{arch}.{k}");
    b.set("general.architecture", OwnedValue::string(arch))
        .unwrap();
    for (k, v) in [
        ("block_count", 1),
        ("embedding_length", D),
        ("feed_forward_length", FF),
        ("attention.head_count", HEADS),
        ("attention.head_count_kv", KV_HEADS),
        ("context_length", 64),
    ] {
        b.set(key(k), OwnedValue::U32(v as u32)).unwrap();
    }
    b.set(
        key("attention.layer_norm_rms_epsilon"),
        OwnedValue::F32(1e-6),
    )
    .unwrap();
    for (k, v) in keys {
        b.set(key(k), v.clone()).unwrap();
    }
    for t in tensors {
        b.add_tensor(t.name.clone(), GgmlType::F32, &t.shape)
            .unwrap();
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = b.write_header(file).unwrap();
    let mut i = 0;
    while let Some(spec) = w.next_tensor() {
        let t = &tensors[i];
        assert_eq!(spec.n_bytes as usize, t.data.len() * 4);
        let bytes: Vec<u8> = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_tensor(&bytes).unwrap();
        i += 1;
    }
    w.finish().unwrap().flush().unwrap();
}

/// The tensors of a one-layer Llama-style model, Q/K/V and gate/up separate.
fn separate() -> Vec<Tensor> {
    vec![
        tensor("token_embd.weight", &[D, VOCAB], 1),
        tensor("output_norm.weight", &[D], 2),
        tensor("blk.0.attn_norm.weight", &[D], 3),
        tensor("blk.0.attn_q.weight", &[D, D], 4),
        tensor("blk.0.attn_k.weight", &[D, KVD], 5),
        tensor("blk.0.attn_v.weight", &[D, KVD], 6),
        tensor("blk.0.attn_output.weight", &[D, D], 7),
        tensor("blk.0.ffn_norm.weight", &[D], 8),
        tensor("blk.0.ffn_gate.weight", &[D, FF], 9),
        tensor("blk.0.ffn_up.weight", &[D, FF], 10),
        tensor("blk.0.ffn_down.weight", &[FF, D], 11),
    ]
}

/// Every position's logits for a fixed prompt.
fn logits(path: &Path) -> Vec<f32> {
    let model = Model::open(path).unwrap();
    let tokens = [1u32, 4, 5, 3, 2];
    let mut ws = Workspace::new(&model.hp, tokens.len());
    let mut cache = KvCache::new(&model.hp, 16, KvType::F32);
    let mut out = vec![0.0; tokens.len() * model.hp.n_vocab];
    model
        .forward_cached(&mut ws, &mut cache, &tokens, true, &mut out, &Serial)
        .unwrap();
    out
}

fn by_name<'a>(ts: &'a [Tensor], name: &str) -> &'a Tensor {
    ts.iter().find(|t| t.name == name).unwrap()
}

#[test]
fn fused_qkv_and_gate_up_compute_what_separate_ones_do() {
    let dir = tempfile::tempdir().unwrap();
    let sep = separate();
    let plain = dir.path().join("separate.gguf");
    write(&plain, "phi3", &[], &{
        // Phi-3 always fuses gate and up; Q/K/V stay separate here.
        let mut v: Vec<Tensor> = Vec::new();
        for t in &sep {
            match t.name.as_str() {
                "blk.0.ffn_gate.weight" => {}
                "blk.0.ffn_up.weight" => v.push(fused(
                    "blk.0.ffn_up.weight",
                    &[by_name(&sep, "blk.0.ffn_gate.weight"), t],
                )),
                _ => v.push(tensor_copy(t)),
            }
        }
        v
    });
    let fused_path = dir.path().join("fused.gguf");
    let mut v: Vec<Tensor> = Vec::new();
    for t in &sep {
        match t.name.as_str() {
            "blk.0.attn_q.weight" => v.push(fused(
                "blk.0.attn_qkv.weight",
                &[
                    t,
                    by_name(&sep, "blk.0.attn_k.weight"),
                    by_name(&sep, "blk.0.attn_v.weight"),
                ],
            )),
            "blk.0.attn_k.weight" | "blk.0.attn_v.weight" | "blk.0.ffn_gate.weight" => {}
            "blk.0.ffn_up.weight" => v.push(fused(
                "blk.0.ffn_up.weight",
                &[by_name(&sep, "blk.0.ffn_gate.weight"), t],
            )),
            _ => v.push(tensor_copy(t)),
        }
    }
    write(&fused_path, "phi3", &[], &v);
    let (a, b) = (logits(&plain), logits(&fused_path));
    assert_eq!(a, b);
    // And the same numbers as a Llama-layout file (Phi-3 only differs in
    // its NeoX RoPE, so compare against a Qwen 2 file, which has it too).
    let qwen = dir.path().join("qwen2.gguf");
    write(&qwen, "qwen2", &[], &sep);
    assert_eq!(a, logits(&qwen));
}

fn tensor_copy(t: &Tensor) -> Tensor {
    Tensor {
        name: t.name.clone(),
        shape: t.shape.clone(),
        data: t.data.clone(),
    }
}

#[test]
fn biases_are_added_where_the_file_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.gguf");
    write(&plain, "qwen2", &[], &separate());
    let zero = |name: &str, n: usize| Tensor {
        name: name.into(),
        shape: vec![n as u64],
        data: vec![0.0; n],
    };
    let mut with_zero = separate();
    with_zero.extend([
        zero("blk.0.attn_q.bias", D),
        zero("blk.0.attn_k.bias", KVD),
        zero("blk.0.attn_v.bias", KVD),
    ]);
    let zb = dir.path().join("zero-bias.gguf");
    write(&zb, "qwen2", &[], &with_zero);
    assert_eq!(logits(&plain), logits(&zb));

    // A bias on V adds to every attention output (the probabilities sum to
    // one), so it moves the logits; one on the LM head shifts them exactly.
    let mut with_v = separate();
    with_v.push(tensor("blk.0.attn_v.bias", &[KVD], 12));
    let vb = dir.path().join("v-bias.gguf");
    write(&vb, "qwen2", &[], &with_v);
    assert_ne!(logits(&plain), logits(&vb));
    let mut with_out = separate();
    with_out.push(tensor("output.bias", &[VOCAB], 13));
    let ob = dir.path().join("out-bias.gguf");
    write(&ob, "qwen2", &[], &with_out);
    let (a, b) = (logits(&plain), logits(&ob));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let want = x + value(13, i % VOCAB);
        assert!((y - want).abs() < 1e-6, "{i}: {y} vs {want}");
    }
}

#[test]
fn unimplemented_features_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    let err = |arch: &str, keys: &[(&str, OwnedValue)]| {
        write(&p, arch, keys, &separate());
        Model::open(&p).unwrap_err().to_string()
    };
    let e = err("llama", &[("expert_count", OwnedValue::U32(8))]);
    assert!(e.contains("experts"), "{e}");
    let e = err("qwen2moe", &[]);
    assert!(e.contains("qwen2moe") && e.contains("qwen3"), "{e}");
    let e = err(
        "llama",
        &[("rope.scaling.type", OwnedValue::string("yarn"))],
    );
    assert!(e.contains("yarn"), "{e}");
    let e = err(
        "phi3",
        &[("rope.scaling.attn_factor", OwnedValue::F32(f32::NAN))],
    );
    assert!(e.contains("attn_factor"), "{e}");
    // LongRoPE factors outside Phi-3, or only one of the two.
    let mut ts = separate();
    ts.push(tensor("rope_factors_long.weight", &[D / HEADS / 2], 14));
    write(&p, "llama", &[], &ts);
    let e = Model::open(&p).unwrap_err().to_string();
    assert!(e.contains("LongRoPE"), "{e}");
}

#[test]
fn a_sliding_window_in_a_llama_file_limits_attention() {
    // With a window of 2, the last position sees only itself and the one
    // before: the logits of a 5-token prompt must change at positions 2..5
    // and not at 0..2.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.gguf"), dir.path().join("b.gguf"));
    write(&a, "llama", &[], &separate());
    write(
        &b,
        "llama",
        &[("attention.sliding_window", OwnedValue::U32(2))],
        &separate(),
    );
    let (la, lb) = (logits(&a), logits(&b));
    assert_eq!(la[..2 * VOCAB], lb[..2 * VOCAB]);
    for p in 2..5 {
        assert_ne!(
            la[p * VOCAB..(p + 1) * VOCAB],
            lb[p * VOCAB..(p + 1) * VOCAB],
            "position {p}"
        );
    }
}
