//! IBM Granite 3.x: Llama's layers with multipliers on the embeddings
//! (`embedding_scale`), each block's output (`residual_scale`), the
//! attention scores (`attention.scale`) and the logits (`logit_scale`).

use super::{AttnScale, BASE, Family, InputScale};

pub(super) const FAMILY: Family = Family {
    names: &["granite"],
    input_scale: InputScale::Key,
    attn_scale: AttnScale::Key,
    multipliers: true,
    ..BASE
};
