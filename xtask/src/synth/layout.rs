//! A shape's tensors as llama.cpp's converter names and lays them out, and
//! the type llama-quantize gives each one.

use lamina_gguf::GgmlType;

use super::shapes::{Arch, Shape};

/// The weight types `cargo xtask synth` writes, named as llama-quantize names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SynthType {
    #[value(name = "q4_k_m")]
    Q4KM,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "f16")]
    F16,
}

impl SynthType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SynthType::Q4KM => "q4_k_m",
            SynthType::Q8_0 => "q8_0",
            SynthType::Q4_0 => "q4_0",
            SynthType::F16 => "f16",
        }
    }

    /// `general.file_type` (llama.cpp's `llama_ftype`).
    pub(crate) fn file_type(self) -> u32 {
        match self {
            SynthType::Q4KM => 15,
            SynthType::Q8_0 => 7,
            SynthType::Q4_0 => 2,
            SynthType::F16 => 1,
        }
    }

    /// llama-quantize's default type for the mix.
    fn base(self) -> GgmlType {
        match self {
            SynthType::Q4KM => GgmlType::Q4_K,
            SynthType::Q8_0 => GgmlType::Q8_0,
            SynthType::Q4_0 => GgmlType::Q4_0,
            SynthType::F16 => GgmlType::F16,
        }
    }
}

/// How a tensor's values are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The token embedding.
    Embed,
    /// A matrix multiplying activations (rows of `dims[0]` inputs).
    Linear,
    /// A norm's weight: all ones.
    Norm,
    /// A projection's bias.
    Bias,
    /// Llama 3's `rope_freqs`, computed as the converter does.
    RopeFreqs,
}

/// What llama-quantize's rules distinguish (`tensor_get_category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    /// `attn_v` and the fused `attn_qkv` (`category_is_attn_v`).
    AttnV,
    FfnDown,
    Other,
}

/// One tensor of the file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorPlan {
    pub name: String,
    pub dims: Vec<u64>,
    pub kind: Kind,
    pub ty: GgmlType,
}

impl Shape {
    /// Every tensor, in the order written, with the type `ty` gives it.
    pub(crate) fn tensors(&self, ty: SynthType) -> Vec<TensorPlan> {
        let (d, ff, n_layer) = (self.n_embd, self.n_ff, self.n_layer);
        let q = self.n_head * self.head_dim();
        let kv = self.n_head_kv * self.head_dim();
        let mut out = Vec::new();
        let mut push = |name: String, dims: Vec<u64>, kind: Kind, cat: Category, layer: u64| {
            let ty = match kind {
                Kind::Linear | Kind::Embed => {
                    weight_type(ty, cat, layer, n_layer, dims[0], self.tied)
                }
                _ => GgmlType::F32,
            };
            out.push(TensorPlan {
                name,
                dims,
                kind,
                ty,
            });
        };
        if self.llama3_rope.is_some() {
            let n = self.head_dim() / 2;
            push(
                "rope_freqs.weight".into(),
                vec![n],
                Kind::RopeFreqs,
                Category::Other,
                0,
            );
        }
        push(
            "token_embd.weight".into(),
            vec![d, self.n_vocab],
            Kind::Embed,
            Category::TokenEmbd,
            0,
        );
        for il in 0..n_layer {
            let b = |t: &str| format!("blk.{il}.{t}");
            let lin = |cat| (Kind::Linear, cat);
            let mut layer: Vec<(String, Vec<u64>, (Kind, Category))> = vec![(
                b("attn_norm.weight"),
                vec![d],
                (Kind::Norm, Category::Other),
            )];
            if self.arch == Arch::Phi3 {
                layer.push((
                    b("attn_qkv.weight"),
                    vec![d, q + 2 * kv],
                    lin(Category::AttnV),
                ));
            } else {
                layer.push((b("attn_q.weight"), vec![d, q], lin(Category::Other)));
                layer.push((b("attn_k.weight"), vec![d, kv], lin(Category::Other)));
                layer.push((b("attn_v.weight"), vec![d, kv], lin(Category::AttnV)));
            }
            if self.arch == Arch::Qwen2 {
                let bias = (Kind::Bias, Category::Other);
                layer.push((b("attn_q.bias"), vec![q], bias));
                layer.push((b("attn_k.bias"), vec![kv], bias));
                layer.push((b("attn_v.bias"), vec![kv], bias));
            }
            if self.arch == Arch::Qwen3 {
                let hd = self.head_dim();
                layer.push((
                    b("attn_q_norm.weight"),
                    vec![hd],
                    (Kind::Norm, Category::Other),
                ));
                layer.push((
                    b("attn_k_norm.weight"),
                    vec![hd],
                    (Kind::Norm, Category::Other),
                ));
            }
            layer.push((b("attn_output.weight"), vec![q, d], lin(Category::Other)));
            if self.arch == Arch::Gemma2 {
                let norm = (Kind::Norm, Category::Other);
                layer.push((b("post_attention_norm.weight"), vec![d], norm));
            }
            layer.push((b("ffn_norm.weight"), vec![d], (Kind::Norm, Category::Other)));
            if self.arch == Arch::Phi3 {
                // Phi-3 stores gate and up as one matrix, gate first.
                layer.push((b("ffn_up.weight"), vec![d, 2 * ff], lin(Category::Other)));
            } else {
                layer.push((b("ffn_gate.weight"), vec![d, ff], lin(Category::Other)));
                layer.push((b("ffn_up.weight"), vec![d, ff], lin(Category::Other)));
            }
            layer.push((b("ffn_down.weight"), vec![ff, d], lin(Category::FfnDown)));
            if self.arch == Arch::Gemma2 {
                let norm = (Kind::Norm, Category::Other);
                layer.push((b("post_ffw_norm.weight"), vec![d], norm));
            }
            for (name, dims, (kind, cat)) in layer {
                push(name, dims, kind, cat, il);
            }
        }
        push(
            "output_norm.weight".into(),
            vec![d],
            Kind::Norm,
            Category::Other,
            0,
        );
        if !self.tied {
            push(
                "output.weight".into(),
                vec![d, self.n_vocab],
                Kind::Linear,
                Category::Output,
                0,
            );
        }
        out
    }
}

/// llama-quantize's `use_more_bits`: the first and last eighth of the
/// layers and every third one between them.
fn use_more_bits(i: u64, n: u64) -> bool {
    let (i, n) = (i as i64, n as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type llama-quantize gives a 2-D weight of `ty`'s mix
/// (`llama_tensor_get_type` without an importance matrix), with
/// `tensor_type_fallback` for rows that do not fit the block size.
fn weight_type(
    ty: SynthType,
    cat: Category,
    layer: u64,
    n_layer: u64,
    ne0: u64,
    tied: bool,
) -> GgmlType {
    use GgmlType as T;
    let base = ty.base();
    if ty == SynthType::F16 {
        return T::F16;
    }
    let picked = match cat {
        Category::Output | Category::TokenEmbd if cat == Category::Output || tied => {
            if base == T::Q8_0 || !ne0.is_multiple_of(base.block_size() as u64) {
                T::Q8_0
            } else {
                T::Q6_K
            }
        }
        Category::AttnV | Category::FfnDown
            if ty == SynthType::Q4KM && use_more_bits(layer, n_layer) =>
        {
            T::Q6_K
        }
        _ => base,
    };
    if ne0.is_multiple_of(picked.block_size() as u64) {
        return picked;
    }
    let fallback = match picked {
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        other => other,
    };
    if ne0.is_multiple_of(fallback.block_size() as u64) {
        fallback
    } else {
        T::F16
    }
}

#[cfg(test)]
mod tests {
    use super::super::shapes::{SHAPES, find};
    use super::*;

    fn types_of(shape: &str, ty: SynthType) -> Vec<(String, GgmlType)> {
        find(shape)
            .unwrap()
            .tensors(ty)
            .into_iter()
            .map(|t| (t.name, t.ty))
            .collect()
    }

    fn type_of(all: &[(String, GgmlType)], name: &str) -> GgmlType {
        all.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// The types of the real SmolLM2-135M-Instruct-Q4_K_M.gguf (llama-quantize's output).
    #[test]
    fn q4_k_m_mix_matches_the_real_smollm2_file() {
        let t = types_of("smollm2-135m", SynthType::Q4KM);
        assert_eq!(type_of(&t, "token_embd.weight"), GgmlType::Q8_0);
        assert_eq!(type_of(&t, "blk.0.attn_q.weight"), GgmlType::Q5_0);
        assert_eq!(type_of(&t, "blk.0.attn_norm.weight"), GgmlType::F32);
        let more: Vec<u64> = (0..30)
            .filter(|i| type_of(&t, &format!("blk.{i}.attn_v.weight")) == GgmlType::Q8_0)
            .collect();
        assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
        for i in 0..30 {
            let down = type_of(&t, &format!("blk.{i}.ffn_down.weight"));
            let want = if more.contains(&i) {
                GgmlType::Q6_K
            } else {
                GgmlType::Q4_K
            };
            assert_eq!(down, want, "layer {i}");
        }
        assert!(!t.iter().any(|(n, _)| n == "output.weight"));
    }

    #[test]
    fn output_and_tied_embeddings_get_q6_k() {
        let t = types_of("llama-3.2-1b", SynthType::Q4KM);
        assert_eq!(type_of(&t, "token_embd.weight"), GgmlType::Q6_K);
        assert_eq!(type_of(&t, "rope_freqs.weight"), GgmlType::F32);
        let t = types_of("llama-3.1-8b", SynthType::Q4KM);
        assert_eq!(type_of(&t, "token_embd.weight"), GgmlType::Q4_K);
        assert_eq!(type_of(&t, "output.weight"), GgmlType::Q6_K);
        let t = types_of("qwen2.5-7b", SynthType::Q4_0);
        assert_eq!(type_of(&t, "output.weight"), GgmlType::Q6_K);
        assert_eq!(type_of(&t, "blk.3.ffn_down.weight"), GgmlType::Q4_0);
        let t = types_of("qwen2.5-7b", SynthType::Q8_0);
        assert_eq!(type_of(&t, "output.weight"), GgmlType::Q8_0);
        let t = types_of("phi-3-mini", SynthType::Q4KM);
        assert_eq!(type_of(&t, "blk.0.attn_qkv.weight"), GgmlType::Q6_K);
        assert_eq!(type_of(&t, "blk.4.attn_qkv.weight"), GgmlType::Q4_K);
        let t = types_of("gemma-2-2b", SynthType::F16);
        assert_eq!(type_of(&t, "token_embd.weight"), GgmlType::F16);
        assert_eq!(type_of(&t, "blk.0.post_ffw_norm.weight"), GgmlType::F32);
    }

    #[test]
    fn every_shape_has_whole_blocks_and_its_family_tensors() {
        for s in SHAPES {
            for ty in [
                SynthType::Q4KM,
                SynthType::Q8_0,
                SynthType::Q4_0,
                SynthType::F16,
            ] {
                for t in s.tensors(ty) {
                    assert!(
                        t.ty.row_bytes(t.dims[0]).is_some(),
                        "{} {}: {} rows of {}",
                        s.name,
                        t.name,
                        t.ty,
                        t.dims[0]
                    );
                }
            }
        }
        let names = |s: &str| -> Vec<String> {
            find(s)
                .unwrap()
                .tensors(SynthType::F16)
                .into_iter()
                .map(|t| t.name)
                .collect()
        };
        assert!(names("qwen2.5-0.5b").contains(&"blk.23.attn_v.bias".to_string()));
        assert!(names("qwen3-0.6b").contains(&"blk.0.attn_k_norm.weight".to_string()));
        assert!(names("gemma-2-2b").contains(&"blk.25.post_attention_norm.weight".to_string()));
        let phi = find("phi-3-mini").unwrap().tensors(SynthType::F16);
        let up = phi
            .iter()
            .find(|t| t.name == "blk.0.ffn_up.weight")
            .unwrap();
        assert_eq!(up.dims, [3072, 16384]);
    }
}
