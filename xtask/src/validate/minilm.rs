//! The `minilm` check: `lamina embed` on all-MiniLM-L6-v2's F32 and Q8_0
//! files against the gold of `testdata/embed/minilm/` (sentence-transformers
//! on the checkpoint, llama.cpp on GGUFs its own converter made, which are
//! the files `cargo xtask models` makes), judged by
//! `testdata/embed/thresholds.rs`; with `--live`, also against
//! `llama-embedding` run now on the same files.
//!
//! Texts longer than sentence-transformers' max_seq_length (256 tokens) are
//! compared with PyTorch on the whole text (`pytorch-F32-full`), which is what
//! lamina and llama.cpp embed up to the model's 512 positions. llama.cpp is
//! judged only on the texts it tokenizes as Hugging Face does.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use super::embedding::{
    EmbedText, cos_row, cosine, drift_row, floor_row, lamina_embed, llama_embed, load_embed_gold,
};
use super::thresholds::{self, min_mean};
use super::{Ctx, Row, read_json};
use crate::models::hash_file;

/// sentence-transformers' max_seq_length for this model.
const ST_MAX_SEQ: usize = 256;

/// What the gold says of each text beside its vectors.
struct TextInfo {
    /// Tokens the Hugging Face tokenizer gives (specials included).
    hf_len: usize,
    /// Whether llama-tokenize gives the same ids.
    llama_like_hf: bool,
}

fn text_info(gold: &Value) -> Result<Vec<TextInfo>> {
    let hf = gold["hf_ids"].as_array().context("gold.json: hf_ids")?;
    let like = gold["llama_tokenizes_like_hf"]
        .as_array()
        .context("gold.json: llama_tokenizes_like_hf")?;
    anyhow::ensure!(
        hf.len() == like.len(),
        "gold.json: hf_ids and llama_tokenizes_like_hf differ in length"
    );
    Ok(hf
        .iter()
        .zip(like)
        .map(|(ids, like)| TextInfo {
            hf_len: ids.as_array().map_or(0, Vec::len),
            llama_like_hf: like.as_bool().unwrap_or(false),
        })
        .collect())
}

/// The cosines of the texts `keep` selects.
fn pick(cos: &[f64], info: &[TextInfo], keep: impl Fn(&TextInfo) -> bool) -> Vec<f64> {
    cos.iter()
        .zip(info)
        .filter(|(_, i)| keep(i))
        .map(|(&c, _)| c)
        .collect()
}

fn cosines(a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| cosine(x, y)).collect()
}

pub(super) fn minilm(ctx: &Ctx) -> Result<Vec<Row>> {
    let dir = ctx.root.join("testdata/embed/minilm");
    let gold = load_embed_gold(&dir)?.context("testdata/embed/minilm/{texts,gold}.json absent")?;
    let index = read_json(&dir.join("gold.json"))?;
    let info = text_info(&index)?;
    anyhow::ensure!(
        info.len() == gold.texts.len(),
        "gold.json: hf_ids for every text"
    );
    let source = |name: &str| -> Result<&Vec<Vec<f32>>> {
        gold.sources
            .iter()
            .find(|(s, _)| s == name)
            .map(|(_, v)| v)
            .with_context(|| format!("testdata/embed/minilm/{name}.f32 is missing"))
    };
    let torch = source("pytorch-F32")?;
    let torch_full = source("pytorch-F32-full")?;
    let mut rows = Vec::new();
    for quant in ["F32", "Q8_0"] {
        let key = format!("llamacpp-{quant}");
        let name = index["sources"][&key]["file"]
            .as_str()
            .with_context(|| format!("gold.json: sources.{key}.file"))?
            .to_string();
        let want = index["sources"][&key]["sha256"].as_str().unwrap_or("");
        let model = ctx.models.join(&name);
        if !model.is_file() {
            rows.push(Row::skip(
                "MiniLM cosine",
                &name,
                format!("{} is missing", model.display()),
            ));
            continue;
        }
        let got = hash_file(&model, &name)?;
        if got != want {
            rows.push(Row::skip(
                "MiniLM cosine",
                &name,
                format!("SHA-256 {got} is not the gold's {want} (cargo xtask models remakes it)"),
            ));
            continue;
        }
        let llama = source(&key)?;
        let ours = lamina_embed(ctx, &model, &gold.texts)?;
        rows.extend(judge(
            quant, &name, &ours, llama, torch, torch_full, &info, "gold",
        ));
        if ctx.live {
            let live = live_vectors(&model, &gold.texts)?;
            rows.extend(judge(
                quant, &name, &ours, &live, torch, torch_full, &info, "live",
            ));
            // This gold has no spread runs for Q8_0: a rebuild of llama.cpp
            // must stay within the floor lamina is held to there.
            let floor = match quant {
                "F32" => thresholds::live_vs_gold(quant, &[]),
                _ => Ok(thresholds::Floor {
                    min: thresholds::MINILM_Q8_0_VS_LLAMA,
                    mean: thresholds::MINILM_Q8_0_VS_LLAMA,
                }),
            };
            rows.push(drift_row(&name, &cosines(&live, llama), floor));
        }
    }
    Ok(rows)
}

fn live_vectors(model: &Path, texts: &[EmbedText]) -> Result<Vec<Vec<f32>>> {
    texts.iter().map(|t| llama_embed(model, &t.text)).collect()
}

/// The rows for one file: against llama.cpp's vectors (`which`: the gold's
/// or a live run) where it tokenizes as Hugging Face does, and against
/// PyTorch, on F32 text by text (sentence-transformers' own output where it
/// does not truncate, the whole text where it does), on Q8_0 by the mean
/// against llama.cpp's mean over the same texts.
#[allow(clippy::too_many_arguments)]
fn judge(
    quant: &str,
    name: &str,
    ours: &[Vec<f32>],
    llama: &[Vec<f32>],
    torch: &[Vec<f32>],
    torch_full: &[Vec<f32>],
    info: &[TextInfo],
    which: &str,
) -> Vec<Row> {
    let like_hf = |i: &TextInfo| i.llama_like_hf;
    let vs_llama = pick(&cosines(ours, llama), info, like_hf);
    let mut rows = Vec::new();
    let check = format!("MiniLM cosine vs llama.cpp {which} (texts it tokenizes like HF)");
    if quant == "F32" {
        let floor = thresholds::vs_llama(quant, &[]).expect("F32 needs no spread");
        rows.push(floor_row(&check, name, &vs_llama, &floor));
    } else {
        rows.push(cos_row(
            &check,
            name,
            &vs_llama,
            thresholds::MINILM_Q8_0_VS_LLAMA,
        ));
    }
    if which != "gold" {
        return rows;
    }
    let full = cosines(ours, torch_full);
    if quant == "F32" {
        let short = pick(&cosines(ours, torch), info, |i| i.hf_len <= ST_MAX_SEQ);
        rows.push(cos_row(
            "MiniLM cosine vs sentence-transformers (texts ≤ 256 tokens)",
            name,
            &short,
            thresholds::F32_VS_PYTORCH,
        ));
        let long = pick(&full, info, |i| i.hf_len > ST_MAX_SEQ);
        rows.push(cos_row(
            "MiniLM cosine vs PyTorch on the whole text (texts > 256 tokens)",
            name,
            &long,
            thresholds::F32_VS_PYTORCH,
        ));
    } else {
        // Both means over the texts llama.cpp reads as Hugging Face does.
        let llama_vs_torch = pick(&cosines(llama, torch_full), info, like_hf);
        let floor = thresholds::vs_pytorch(quant, &llama_vs_torch);
        let (_, theirs) = min_mean(&llama_vs_torch);
        let mut row = floor_row(
            "MiniLM cosine vs PyTorch (texts llama.cpp tokenizes like HF)",
            name,
            &pick(&full, info, like_hf),
            &floor,
        );
        row.threshold = format!(
            "{} (llama.cpp's mean {theirs:.7} − {})",
            row.threshold,
            thresholds::PYTORCH_MEAN_SLACK
        );
        rows.push(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::Status;

    fn info(lens: &[(usize, bool)]) -> Vec<TextInfo> {
        lens.iter()
            .map(|&(hf_len, llama_like_hf)| TextInfo {
                hf_len,
                llama_like_hf,
            })
            .collect()
    }

    #[test]
    fn gold_index_is_read() {
        let v: Value = serde_json::from_str(
            r#"{"hf_ids": [[101, 7592, 102], [101, 102]], "llama_tokenizes_like_hf": [true, false]}"#,
        )
        .unwrap();
        let i = text_info(&v).unwrap();
        assert_eq!((i[0].hf_len, i[0].llama_like_hf), (3, true));
        assert_eq!((i[1].hf_len, i[1].llama_like_hf), (2, false));
        let bad: Value =
            serde_json::from_str(r#"{"hf_ids": [[1]], "llama_tokenizes_like_hf": []}"#).unwrap();
        assert!(text_info(&bad).is_err());
    }

    /// llama.cpp is judged only where it tokenizes like HF, sentence-
    /// transformers only where it does not truncate.
    #[test]
    fn each_reference_judges_its_own_texts() {
        let e = |x: f32| vec![1.0, x];
        let ours = [e(0.0), e(0.0), e(0.0)];
        // The second text is tokenized differently by llama.cpp (far off),
        // the third is over 256 tokens (sentence-transformers cut it).
        let llama = [e(0.0), e(1.0), e(0.0)];
        let torch = [e(0.0), e(0.0), e(1.0)];
        let i = info(&[(10, true), (12, false), (300, true)]);
        let rows = judge("F32", "m", &ours, &llama, &torch, &ours, &i, "gold");
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(|r| r.status == Status::Pass), "{:?}", rows);
        assert!(rows[0].figure.contains("(2 texts)"), "{}", rows[0].figure);
        let far = [e(0.0), e(0.0), e(1.0)];
        let rows = judge("F32", "m", &ours, &llama, &torch, &far, &i, "gold");
        assert_eq!(
            rows[2].status,
            Status::Fail,
            "the long text against the whole-text run"
        );
    }

    #[test]
    fn q8_0_is_judged_against_llama_cpp_s_mean_to_pytorch() {
        let e = |x: f32| vec![1.0, x];
        // The third text llama.cpp tokenizes differently: far off, it must
        // not lower the bar.
        let i = info(&[(5, true), (5, true), (5, false)]);
        let torch = [e(0.0), e(0.0), e(0.0)];
        let llama = [e(0.01), e(0.01), e(1.0)];
        let judge_q8 =
            |ours: &[Vec<f32>]| judge("Q8_0", "m", ours, &llama, &torch, &torch, &i, "gold");
        let rows = judge_q8(&[e(0.01), e(0.02), e(0.0)]);
        assert_eq!(rows[0].status, Status::Pass, "{:?}", rows[0]);
        assert_eq!(rows[1].status, Status::Pass, "{:?}", rows[1]);
        assert!(
            rows[1].threshold.contains("llama.cpp's mean 0.99995"),
            "{}",
            rows[1].threshold
        );
        let rows = judge_q8(&[e(0.05), e(0.05), e(0.0)]);
        assert_eq!(rows[0].status, Status::Pass, "{:?}", rows[0]);
        assert_eq!(rows[1].status, Status::Fail, "{:?}", rows[1]);
        let rows = judge_q8(&[e(0.1), e(0.1), e(0.0)]);
        assert!(rows.iter().all(|r| r.status == Status::Fail), "{rows:?}");
    }
}
