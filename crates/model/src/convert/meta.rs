//! `general.*` metadata, following gguf-py's `Metadata.load` heuristics: the
//! model card's YAML front matter, `_name_or_path` in config.json, the folder
//! name, and sampling defaults from generation_config.json.

use std::path::Path;

use lamina_gguf::{GgufBuilder, OwnedValue};
use serde_json::Value;

use super::Result;
use super::arch::read_json;

/// A YAML front-matter value: only scalars and lists of scalars are read.
#[derive(Clone, Debug)]
enum Yaml {
    Str(String),
    List(Vec<String>),
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    if s.len() >= 2
        && ((s.starts_with('"') && s.ends_with('"')) || (s.starts_with('\'') && s.ends_with('\'')))
    {
        s[1..s.len() - 1].to_string()
    } else {
        s.to_string()
    }
}

/// Top-level `key: value`, `key: [a, b]` and `key:` + `- item` lines; nested
/// maps and multi-line scalars are skipped.
fn parse_front_matter(text: &str) -> Vec<(String, Yaml)> {
    let mut lines = text.lines();
    if lines.next() != Some("---") {
        return Vec::new();
    }
    let mut out: Vec<(String, Yaml)> = Vec::new();
    let mut current_list: Option<usize> = None;
    for line in lines {
        if line == "---" {
            break;
        }
        let line = line.replace('\t', "  ");
        if let Some(item) = line.strip_prefix("- ").or_else(|| {
            line.trim_start()
                .strip_prefix("- ")
                .filter(|_| line.starts_with("  "))
        }) {
            if let Some(i) = current_list
                && let Yaml::List(l) = &mut out[i].1
            {
                l.push(unquote(item));
            }
            continue;
        }
        if line.starts_with(' ') || line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        current_list = None;
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let k = k.trim().to_string();
        let v = v.trim();
        if v.is_empty() {
            out.push((k, Yaml::List(Vec::new())));
            current_list = Some(out.len() - 1);
        } else if let Some(inner) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            out.push((
                k,
                Yaml::List(
                    inner
                        .split(',')
                        .map(unquote)
                        .filter(|s| !s.is_empty())
                        .collect(),
                ),
            ));
        } else {
            out.push((k, Yaml::Str(unquote(v))));
        }
    }
    out
}

fn title_word(w: &str) -> String {
    // Python's str.title(): uppercase after every non-letter, lowercase otherwise.
    let mut out = String::new();
    let mut prev_alpha = false;
    for c in w.chars() {
        if prev_alpha {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_alpha = c.is_alphabetic();
    }
    out
}

fn is_version_or_number(w: &str) -> bool {
    let b = w.as_bytes();
    if b.first().is_some_and(u8::is_ascii_digit) {
        return true;
    }
    if let Some(rest) = w.strip_prefix('v') {
        return !rest.is_empty()
            && rest
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()));
    }
    false
}

/// `Metadata.id_to_title`.
fn id_to_title(s: &str) -> String {
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            let is_lower = w.chars().any(char::is_alphabetic) && !w.chars().any(char::is_uppercase);
            if is_lower && !is_version_or_number(w) {
                title_word(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Default, Debug)]
struct IdParts {
    name: Option<String>,
    org: Option<String>,
    basename: Option<String>,
    finetune: Option<String>,
    version: Option<String>,
    size_label: Option<String>,
}

fn is_version(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    let rest = l
        .strip_prefix("iter")
        .or_else(|| l.strip_prefix('v'))
        .unwrap_or(&l);
    !rest.is_empty()
        && rest
            .split('.')
            .all(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
}

fn is_quant_type(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    let q = l.strip_prefix('i').unwrap_or(&l);
    if let Some(r) = q.strip_prefix('q') {
        let mut it = r.chars();
        if it.next().is_some_and(|c| c.is_ascii_digit()) {
            let rest: String = it.collect();
            // (_\w)*
            let b = rest.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] != b'_'
                    || i + 1 >= b.len()
                    || !(b[i + 1].is_ascii_alphanumeric() || b[i + 1] == b'_')
                {
                    return false;
                }
                i += 2;
            }
            return true;
        }
    }
    let f = l.strip_prefix('b').unwrap_or(&l);
    let f = f.strip_prefix('f').unwrap_or(f);
    let f = f.strip_prefix('p').unwrap_or(f);
    (f == "16" || f == "32") && f.len() < l.len()
}

fn is_size(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    if matches!(
        l.as_str(),
        "small" | "mini" | "medium" | "large" | "xl" | "xxl"
    ) {
        return true;
    }
    // (([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?)
    let b = l.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'a') {
        i = 1;
    } else {
        let mut j = 0;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > 0 && b.get(j) == Some(&b'x') {
            i = j + 1;
        }
    }
    let start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i == start {
        return false;
    }
    if i < b.len() && (b[i] == b'.' || b[i] == b'_') {
        let s = i + 1;
        i = s;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return false;
        }
    }
    if i >= b.len() || !b"kmbt".contains(&b[i]) {
        return false;
    }
    i += 1;
    if i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i == b.len()
}

/// `Metadata.get_model_id_components`.
fn model_id_components(id: &str, total_params: u64) -> IdParts {
    if id.contains(' ') {
        return IdParts {
            name: Some(id.to_string()),
            ..Default::default()
        };
    }
    let (mut org, full) = match id.split_once('/') {
        Some((o, n)) => (Some(o.to_string()), n.to_string()),
        None => (None, id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full
        .split('-')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let mut types: Vec<Vec<&str>> = vec![Vec::new(); parts.len()];
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if is_version(&part) {
            types[i].push("version");
        } else if is_quant_type(&part) {
            types[i].push("type");
            parts[i] = part.to_uppercase();
        } else if i > 0 && is_size(&part) {
            let mut p: String = part.replace('_', ".");
            let chars: Vec<char> = p.chars().collect();
            if chars.last().is_some_and(|c| c.is_ascii_digit()) && chars.len() >= 2 {
                let n = chars.len();
                p = format!(
                    "{}.{}{}",
                    chars[..n - 2].iter().collect::<String>(),
                    chars[n - 1],
                    chars[n - 2]
                );
            }
            let chars: Vec<char> = p.chars().collect();
            if chars.len() > 1
                && chars[chars.len() - 2].is_ascii_digit()
                && "kmbt".contains(chars[chars.len() - 1])
            {
                p = format!(
                    "{}{}",
                    chars[..chars.len() - 1].iter().collect::<String>(),
                    chars[chars.len() - 1].to_ascii_uppercase()
                );
            }
            if total_params != 0 {
                let (num, suf) = p.split_at(p.len() - p.chars().last().map_or(0, char::len_utf8));
                if let (Ok(x), Some(pos)) = (num.parse::<f64>(), " KMBT".find(suf)) {
                    let label = x * 1000f64.powi(pos as i32);
                    let total = total_params as f64;
                    if (label - total).abs() > (7 * total_params / 8) as f64 {
                        types[i].push("finetune");
                        p = format!("{num}{}", suf.to_lowercase());
                    }
                }
            }
            if types[i].is_empty() {
                types[i].push("size_label");
            }
            parts[i] = p;
        } else if i > 0
            && matches!(
                part.to_ascii_lowercase().as_str(),
                "chat" | "instruct" | "vision" | "lora"
            )
        {
            types[i].push("finetune");
        }
    }
    let has_numeric_size = parts
        .iter()
        .zip(&types)
        .any(|(n, t)| t.contains(&"size_label") && n.chars().any(|c| c.is_ascii_digit()));
    if has_numeric_size {
        for (n, t) in parts.iter().zip(types.iter_mut()) {
            if t.contains(&"size_label") && n.chars().all(char::is_alphabetic) {
                t.retain(|x| *x != "size_label");
            }
        }
    }
    let mut at_start = true;
    for (p, t) in parts.iter().zip(types.iter_mut()) {
        if at_start
            && ((t.is_empty() && p.chars().next().is_some_and(char::is_alphabetic))
                || t.contains(&"version"))
        {
            t.push("basename");
        } else {
            at_start = false;
            if t.is_empty() {
                t.push("finetune");
            }
        }
    }
    for t in types.iter_mut().rev() {
        if t.contains(&"basename") && t.len() > 1 {
            t.retain(|x| *x != "basename");
        } else {
            break;
        }
    }
    let join = |f: &dyn Fn(&Vec<&str>) -> bool| -> Option<String> {
        let mut seen: Vec<&str> = Vec::new();
        for (p, t) in parts.iter().zip(&types) {
            if f(t) && !seen.contains(&p.as_str()) {
                seen.push(p);
            }
        }
        let s = seen.join("-");
        (!s.is_empty()).then_some(s)
    };
    let join_all = |f: &dyn Fn(&Vec<&str>) -> bool| -> Option<String> {
        let v: Vec<&str> = parts
            .iter()
            .zip(&types)
            .filter(|(_, t)| f(t))
            .map(|(p, _)| p.as_str())
            .collect();
        let s = v.join("-");
        (!s.is_empty()).then_some(s)
    };
    let mut basename = join_all(&|t| t.contains(&"basename"));
    let size_label = join(&|t| t.contains(&"size_label"));
    let finetune = join_all(&|t| t.contains(&"finetune"));
    let version = join_all(&|t| t.contains(&"version") && !t.contains(&"basename"));
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    IdParts {
        name: Some(full),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

/// `model_weight_count_rounded_notation(n, min_digits=2)`.
fn size_label(n: u64) -> String {
    let x = n as f64;
    let (scaled, suffix) = if x > 1e12 {
        (x * 1e-12, "T")
    } else if x > 1e9 {
        (x * 1e-9, "B")
    } else if x > 1e6 {
        (x * 1e-6, "M")
    } else {
        (x * 1e-3, "K")
    };
    let rounded = format!("{}", scaled.round_ties_even() as u64);
    let digits = rounded.trim_start_matches('0').len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

#[derive(Default)]
struct General {
    name: Option<String>,
    author: Option<String>,
    version: Option<String>,
    organization: Option<String>,
    finetune: Option<String>,
    basename: Option<String>,
    description: Option<String>,
    size_label: Option<String>,
    license: Option<String>,
    license_name: Option<String>,
    license_link: Option<String>,
    source_url: Option<String>,
    source_doi: Option<String>,
    source_uuid: Option<String>,
    source_repo_url: Option<String>,
    base_models: Option<Vec<Vec<(String, String)>>>,
    datasets: Option<Vec<Vec<(String, String)>>>,
    tags: Option<Vec<String>>,
    languages: Option<Vec<String>>,
}

fn hf_ref(id: &str, total: u64) -> Vec<(String, String)> {
    let mut m = Vec::new();
    if id.starts_with("http://") || id.starts_with("https://") || id.starts_with("ssh://") {
        m.push(("repo_url".to_string(), id.to_string()));
        return m;
    }
    let p = model_id_components(id, total);
    if let Some(n) = &p.name {
        m.push(("name".into(), id_to_title(n)));
    }
    if let Some(o) = &p.org {
        m.push(("organization".into(), id_to_title(o)));
    }
    if let Some(v) = p.version {
        m.push(("version".into(), v));
    }
    if let (Some(o), Some(n)) = (&p.org, &p.name) {
        m.push(("repo_url".into(), format!("https://huggingface.co/{o}/{n}")));
    }
    m
}

/// Writes general.* (after general.architecture and general.type); the
/// model's id is `model_id`, else `dir`'s name.
pub fn write_general(
    b: &mut GgufBuilder,
    dir: &Path,
    model_id: Option<&str>,
    total_params: u64,
) -> Result<()> {
    let mut g = General::default();
    let card = std::fs::read_to_string(dir.join("README.md"))
        .map(|t| parse_front_matter(&t))
        .unwrap_or_default();
    let get = |k: &str| {
        card.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let get_str = |k: &str| match get(k) {
        Some(Yaml::Str(s)) => Some(s),
        _ => None,
    };
    macro_rules! use_card {
        ($field:ident, $($key:literal),+) => {
            $( if g.$field.is_none() { g.$field = get_str($key); } )+
        };
    }
    use_card!(name, "name", "model_name");
    use_card!(author, "author", "model_author", "model_creator");
    use_card!(version, "version", "model_version");
    use_card!(organization, "organization", "model_organization");
    use_card!(description, "description", "model_description");
    use_card!(finetune, "finetune", "model_finetune");
    use_card!(basename, "basename", "model_basename", "model_type");
    use_card!(size_label, "size_label", "model_size_label");
    use_card!(source_url, "url", "model_url");
    use_card!(source_doi, "doi", "model_doi");
    use_card!(source_uuid, "uuid", "model_uuid");
    use_card!(source_repo_url, "repo_url", "model_repo_url");
    let list = |keys: &[&str]| -> Option<Vec<String>> {
        keys.iter().find_map(|k| get(k)).map(|v| match v {
            Yaml::Str(s) => vec![s],
            Yaml::List(l) => l,
        })
    };
    if let Some(bm) = list(&["base_model", "base_models", "base_model_sources"]) {
        g.base_models = Some(bm.iter().map(|id| hf_ref(id, total_params)).collect());
    }
    if let Some(ds) = list(&["datasets", "dataset", "dataset_sources"]) {
        g.datasets = Some(ds.iter().map(|id| hf_ref(id, total_params)).collect());
    }
    use_card!(license, "license");
    use_card!(license_name, "license_name");
    use_card!(license_link, "license_link");
    for key in ["tags", "pipeline_tag"] {
        if let Some(v) = list(&[key]) {
            g.tags.get_or_insert_with(Vec::new).extend(v);
        }
    }
    for key in ["languages", "language"] {
        if let Some(v) = list(&[key]) {
            g.languages.get_or_insert_with(Vec::new).extend(v);
        }
    }

    let config = read_json(&dir.join("config.json")).ok();
    let apply = |p: IdParts, g: &mut General| {
        if g.name.is_none() {
            g.name = p.name.as_deref().map(id_to_title);
        }
        if g.organization.is_none() {
            g.organization = p.org.as_deref().map(id_to_title);
        }
        g.basename = g.basename.take().or(p.basename);
        g.finetune = g.finetune.take().or(p.finetune);
        g.version = g.version.take().or(p.version);
        g.size_label = g.size_label.take().or(p.size_label);
    };
    if let Some(id) = config
        .as_ref()
        .and_then(|c| c.get("_name_or_path"))
        .and_then(Value::as_str)
        && id.matches('/').count() <= 1
    {
        apply(model_id_components(id, total_params), &mut g);
    }
    let dir_name = model_id.map(str::to_string).or_else(|| {
        dir.canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
    });
    if let Some(id) = dir_name {
        apply(model_id_components(&id, total_params), &mut g);
    }
    if g.size_label.is_none() && total_params > 0 {
        g.size_label = Some(size_label(total_params));
    }

    // Sampling defaults from generation_config.json.
    if let Ok(Value::Object(gen_cfg)) = read_json(&dir.join("generation_config.json")) {
        let f = |k: &str| {
            gen_cfg
                .get(k)
                .and_then(Value::as_f64)
                .map(|v| OwnedValue::F32(v as f32))
        };
        let i = |k: &str| {
            gen_cfg
                .get(k)
                .and_then(Value::as_i64)
                .map(|v| OwnedValue::I32(v as i32))
        };
        let entries = [
            (
                "sequence",
                gen_cfg
                    .get("sequence")
                    .and_then(Value::as_str)
                    .map(OwnedValue::string),
            ),
            ("top_k", i("top_k")),
            ("top_p", f("top_p")),
            ("min_p", f("min_p")),
            ("xtc_probability", f("xtc_probability")),
            ("xtc_threshold", f("xtc_threshold")),
            ("temp", f("temperature")),
            ("penalty_last_n", i("penalty_last_n")),
            (
                "penalty_repeat",
                f("penalty_repeat").or_else(|| f("repetition_penalty")),
            ),
            ("mirostat", i("mirostat")),
            ("mirostat_tau", f("mirostat_tau")),
            ("mirostat_eta", f("mirostat_eta")),
        ];
        for (k, v) in entries {
            if let Some(v) = v {
                b.set(format!("general.sampling.{k}"), v)?;
            }
        }
    }

    let name = g.name.clone().unwrap_or_else(|| "model".into());
    b.set("general.name", OwnedValue::string(name))?;
    let s = |b: &mut GgufBuilder, k: &str, v: &Option<String>| -> Result<()> {
        if let Some(v) = v {
            b.set(format!("general.{k}"), OwnedValue::string(v.clone()))?;
        }
        Ok(())
    };
    s(b, "author", &g.author)?;
    s(b, "version", &g.version)?;
    s(b, "organization", &g.organization)?;
    s(b, "finetune", &g.finetune)?;
    s(b, "basename", &g.basename)?;
    s(b, "description", &g.description)?;
    s(b, "size_label", &g.size_label)?;
    s(b, "license", &g.license)?;
    s(b, "license.name", &g.license_name)?;
    s(b, "license.link", &g.license_link)?;
    s(b, "source.url", &g.source_url)?;
    s(b, "source.doi", &g.source_doi)?;
    s(b, "source.uuid", &g.source_uuid)?;
    s(b, "source.repo_url", &g.source_repo_url)?;
    for (what, list) in [("base_model", &g.base_models), ("dataset", &g.datasets)] {
        if let Some(list) = list {
            b.set(
                format!("general.{what}.count"),
                OwnedValue::U32(list.len() as u32),
            )?;
            for (i, entry) in list.iter().enumerate() {
                for (k, v) in entry {
                    b.set(
                        format!("general.{what}.{i}.{k}"),
                        OwnedValue::string(v.clone()),
                    )?;
                }
            }
        }
    }
    if let Some(t) = &g.tags {
        b.set("general.tags", OwnedValue::string_array(t))?;
    }
    if let Some(l) = &g.languages {
        b.set("general.languages", OwnedValue::string_array(l))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_id_heuristics_match_gguf_py() {
        let p = model_id_components("embeddinggemma-300m", 307_581_696);
        assert_eq!(p.basename.as_deref(), Some("embeddinggemma"));
        assert_eq!(p.size_label.as_deref(), Some("300M"));
        assert_eq!(id_to_title("embeddinggemma-300m"), "Embeddinggemma 300m");
        let p = model_id_components("meta-llama/Llama-3.2-1B-Instruct", 1_235_814_400);
        assert_eq!(p.org.as_deref(), Some("meta-llama"));
        assert_eq!(p.basename.as_deref(), Some("Llama-3.2"));
        assert_eq!(p.size_label.as_deref(), Some("1B"));
        assert_eq!(p.finetune.as_deref(), Some("Instruct"));
        assert_eq!(size_label(307_581_696), "308M");
        assert_eq!(size_label(4_300_000), "4.3M");
    }

    #[test]
    fn front_matter() {
        let card =
            "---\nlicense: gemma\ntags:\n- a\n- b\nlanguage: [en, fr]\nx: |\n  y\n---\n# body";
        let fm = parse_front_matter(card);
        assert!(matches!(&fm[0].1, Yaml::Str(s) if s == "gemma"));
        assert!(matches!(&fm[1].1, Yaml::List(l) if l == &["a", "b"]));
        assert!(matches!(&fm[2].1, Yaml::List(l) if l == &["en", "fr"]));
    }
}
