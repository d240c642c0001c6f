//! Tensor names: the renames and skips of `filter_tensors` and gguf-py's
//! `TensorNameMap`, restricted to the tensors these architectures have.

use super::{Arch, Model, bert};
use crate::convert::{Error, Result};

impl Model {
    /// The renames of `filter_tensors` (None: skip the tensor).
    pub fn filter_name(&self, name: &str) -> Option<String> {
        const SKIP_PREFIX: [&str; 10] = [
            "mlp",
            "vit.",
            "vpm.",
            "siglip2.",
            "conformer.",
            "merger.",
            "resampler.",
            "sound_encoder.",
            "sound_projection.",
            "speech_embeddings.",
        ];
        const SKIP_SUB: [&str; 16] = [
            "visual.",
            "vision.",
            "audio.",
            "talker.",
            "vision_",
            "audio_",
            "token2wav.",
            "code2wav.",
            "projector.",
            "pre_mm_projector_norm",
            "image_newline",
            "view_seperator",
            "patch_embed",
            "patch_merger.",
            "patch_merge_mlp.",
            "model.connector.",
        ];
        let renamed;
        let name = if self.arch.is_bert() {
            renamed = bert::filter_name(self, name)?;
            renamed.as_str()
        } else {
            name
        };
        let mut name = name.to_string();
        if self.arch.is_llama() && name.contains("text_model.") {
            name = name.replace("text_model.", "");
        }
        // Gemma 2 ties the output to the embedding; some exports still carry lm_head.
        if self.arch == Arch::Gemma2 && name == "lm_head.weight" {
            return None;
        }
        if self.arch == Arch::Granite
            && (name.starts_with("encoder.")
                || name.contains("image_")
                || name.contains("layerwise_projectors")
                || name.contains("spatial_projectors"))
        {
            return None;
        }
        if SKIP_PREFIX.iter().any(|p| name.starts_with(p))
            || SKIP_SUB.iter().any(|s| name.contains(s))
        {
            return None;
        }
        if name.ends_with("e_score_correction_bias") {
            name = name.replace("e_score_correction_bias", "e_score_correction.bias");
        }
        if name.contains("language_model.") {
            name = name.replace("language_model.", "");
        }
        Some(name)
    }

    /// Maps a Hugging Face tensor name to its GGUF name (gguf-py's TensorNameMap
    /// restricted to the tensors these architectures have).
    pub(super) fn map_name(&self, name: &str) -> Result<String> {
        let fail = || {
            Error::Tensor(format!(
                "cannot map tensor {name:?} to a {} GGUF tensor: the checkpoint has a tensor \
                 this architecture does not use",
                self.arch.name()
            ))
        };
        if self.arch.is_bert() {
            return bert::map_name(self, name).ok_or_else(fail);
        }
        let (base, suffix) = if let Some(b) = name.strip_suffix(".weight") {
            (b, ".weight")
        } else if let Some(b) = name.strip_suffix(".bias") {
            (b, ".bias")
        } else {
            return Err(fail());
        };
        let stripped = base.strip_prefix("model.").unwrap_or(base);
        let mapped: String = match stripped {
            "embed_tokens" => "token_embd".into(),
            "norm" => "output_norm".into(),
            _ if base == "lm_head" && self.arch != Arch::Gemma2 => "output".into(),
            "dense_2" | "dense_3" if self.arch == Arch::GemmaEmbedding => stripped.into(),
            "rope_freqs" if self.arch == Arch::Llama => "rope_freqs".into(),
            _ => {
                let rest = stripped.strip_prefix("layers.").ok_or_else(fail)?;
                let (bid, leaf) = rest.split_once('.').ok_or_else(fail)?;
                let bid: u64 = bid.parse().map_err(|_| fail())?;
                if bid >= self.block_count {
                    return Err(fail());
                }
                let gemma = self.arch.is_gemma();
                let qk_norm =
                    matches!(self.arch, Arch::Gemma3 | Arch::GemmaEmbedding | Arch::Qwen3);
                let phi3 = self.arch == Arch::Phi3;
                let leaf = match leaf {
                    "self_attn.qkv_proj" if phi3 => "attn_qkv",
                    "mlp.gate_up_proj" if phi3 => "ffn_up",
                    "input_layernorm" => "attn_norm",
                    "self_attn.q_proj" => "attn_q",
                    "self_attn.k_proj" => "attn_k",
                    "self_attn.v_proj" => "attn_v",
                    "self_attn.o_proj" => "attn_output",
                    "self_attn.q_norm" if qk_norm => "attn_q_norm",
                    "self_attn.k_norm" if qk_norm => "attn_k_norm",
                    "post_attention_layernorm" if gemma => "post_attention_norm",
                    "post_attention_layernorm" => "ffn_norm",
                    "pre_feedforward_layernorm" if gemma => "ffn_norm",
                    "post_feedforward_layernorm" if gemma => "post_ffw_norm",
                    "mlp.gate_proj" if !phi3 => "ffn_gate",
                    "mlp.up_proj" => "ffn_up",
                    "mlp.down_proj" => "ffn_down",
                    _ => return Err(fail()),
                };
                format!("blk.{bid}.{leaf}")
            }
        };
        Ok(format!("{mapped}{suffix}"))
    }
}
