//! `cargo xtask synth SHAPE TYPE [OUT]`: a random-weight GGUF of a real
//! model's shape, for measuring speed at sizes no download here provides.
//!
//! The file is what llama.cpp's converter and llama-quantize would make of
//! the real model (architecture, metadata, tensor names, shapes and the
//! quantization mix), with uniform random weights from `--seed` and a real
//! tokenizer copied in ([`shapes::Vocab`]). Each tensor is generated and
//! quantized a chunk of rows at a time and streamed out, so a 14B file needs
//! a few megabytes of memory; the same shape, type and seed give the same
//! bytes. Random weights cost exactly what real ones cost to run.

mod layout;
mod shapes;
mod write;

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use lamina_gguf::{
    DEFAULT_ALIGNMENT, GgmlType, Gguf, GgufBuilder, MAX_COPIED_ELEMENTS, OwnedValue, StagedFile,
};

pub(crate) use layout::SynthType;
pub(crate) use shapes::{SHAPES, Shape};

/// The seed used unless one is given.
pub(crate) const DEFAULT_SEED: u64 = 1;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The model shape (case-insensitive): SmolLM2-135M, Llama-3.2-1B,
    /// Llama-3.1-8B, Qwen2.5-0.5B, Qwen2.5-7B, Qwen2.5-14B, Qwen3-0.6B,
    /// Phi-3-mini, Gemma-2-2B, Granite-3.3-8B.
    shape: String,
    /// Weight types, as llama-quantize's mixes.
    #[arg(value_enum)]
    ty: SynthType,
    /// Output file (default: target/synth/SHAPE-TYPE-sSEED.gguf).
    out: Option<PathBuf>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// GGUF to copy the tokenizer from instead of the shape's own source.
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// Print the file's size and its bytes by weight type; write nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn run_cmd(args: Args) -> Result<()> {
    let shape = find(&args.shape)?;
    let out = args
        .out
        .unwrap_or_else(|| default_path(shape, args.ty, args.seed));
    let vocab = match args.vocab {
        Some(v) => v,
        None => vocab_path(shape)?,
    };
    if args.dry_run {
        let plan = plan(shape, args.ty, args.seed, &vocab)?;
        println!("{} {}: {plan}", shape.name, args.ty.name());
        return Ok(());
    }
    write_file(shape, args.ty, args.seed, &vocab, &out, true)?;
    println!("{}", out.display());
    Ok(())
}

/// The header a file would have, with its tensors planned but not written.
fn builder(shape: &Shape, ty: SynthType, seed: u64, vocab: &Path) -> Result<GgufBuilder> {
    let vocab_file = Gguf::open(vocab)
        .with_context(|| format!("reading the tokenizer of {}", vocab.display()))?;
    let mut b = GgufBuilder::new();
    let arch = shape.arch.name();
    b.set("general.architecture", OwnedValue::string(arch))?;
    b.set("general.type", OwnedValue::string("model"))?;
    b.set(
        "general.name",
        OwnedValue::string(format!("{} (random weights, seed {seed})", shape.name)),
    )?;
    for (key, value) in shape.hparams() {
        b.set(format!("{arch}.{key}"), value)?;
    }
    copy_tokenizer(&vocab_file, shape.n_vocab, &mut b)
        .with_context(|| format!("copying the tokenizer of {}", vocab.display()))?;
    b.set("general.quantization_version", OwnedValue::U32(2))?;
    b.set("general.file_type", OwnedValue::U32(ty.file_type()))?;
    for t in shape.tensors(ty) {
        b.add_tensor(t.name, t.ty, &t.dims)?;
    }
    Ok(b)
}

/// What a file holds, from its header alone.
#[derive(Debug)]
pub(crate) struct Plan {
    pub file_bytes: u64,
    pub n_tensors: usize,
    /// Tensor bytes by weight type, in order of first use.
    pub by_type: Vec<(GgmlType, u64)>,
}

impl Plan {
    fn new(b: GgufBuilder) -> Result<Plan> {
        let mut by_type: Vec<(GgmlType, u64)> = Vec::new();
        for t in b.tensors() {
            match by_type.iter_mut().find(|(ty, _)| *ty == t.ggml_type) {
                Some((_, n)) => *n += t.n_bytes,
                None => by_type.push((t.ggml_type, t.n_bytes)),
            }
        }
        let n_tensors = b.tensors().len();
        let align = DEFAULT_ALIGNMENT;
        let data: u64 = b
            .tensors()
            .iter()
            .map(|t| t.n_bytes.div_ceil(align) * align)
            .sum();
        let mut header = Vec::new();
        b.write_header(&mut header)?;
        let header = header.len() as u64;
        Ok(Plan {
            file_bytes: header + data,
            n_tensors,
            by_type,
        })
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |n: u64| n as f64 / f64::from(1u32 << 20);
        write!(
            f,
            "{} tensors, {} bytes ({:.1} MiB):",
            self.n_tensors,
            self.file_bytes,
            mib(self.file_bytes)
        )?;
        for (ty, n) in &self.by_type {
            write!(f, " {ty} {:.1} MiB", mib(*n))?;
        }
        Ok(())
    }
}

/// The plan of the file `write_file` would write.
pub(crate) fn plan(shape: &Shape, ty: SynthType, seed: u64, vocab: &Path) -> Result<Plan> {
    Plan::new(builder(shape, ty, seed, vocab)?)
}

/// The shape named `name`, or an error listing the known ones.
pub(crate) fn find(name: &str) -> Result<&'static Shape> {
    shapes::find(name).with_context(|| {
        let known: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
        format!("unknown shape {name:?}; known: {}", known.join(", "))
    })
}

/// `target/synth/SHAPE-TYPE-sSEED.gguf`.
pub(crate) fn default_path(shape: &Shape, ty: SynthType, seed: u64) -> PathBuf {
    crate::target_dir()
        .join("synth")
        .join(format!("{}-{}-s{seed}.gguf", shape.name, ty.name()))
}

/// The synthetic file for `shape`, `ty` and `seed` under `target/synth/`,
/// written first if it is not there yet.
pub(crate) fn ensure(shape: &Shape, ty: SynthType, seed: u64) -> Result<PathBuf> {
    let path = default_path(shape, ty, seed);
    if !path.is_file() {
        write_file(shape, ty, seed, &vocab_path(shape)?, &path, true)?;
    }
    Ok(path)
}

/// The file a shape's tokenizer is copied from.
pub(crate) fn vocab_path(shape: &Shape) -> Result<PathBuf> {
    match shape.vocab {
        shapes::Vocab::Project(name) => {
            let path = crate::models::default_dir()?.join(name);
            ensure!(
                path.is_file(),
                "{} (the tokenizer source of {}) is missing: run `cargo xtask models`, or pass --vocab",
                path.display(),
                shape.name
            );
            Ok(path)
        }
        shapes::Vocab::LlamaCpp(name) => {
            let file = format!("ggml-vocab-{name}.gguf");
            let src = crate::target_dir().join("llama.cpp/src");
            // `target/llama.cpp/src/<sdist>/vendor/llama.cpp/models/`, as
            // `cargo xtask llama-cpp` unpacks it.
            let found = std::fs::read_dir(&src).ok().and_then(|dirs| {
                dirs.filter_map(|d| d.ok())
                    .map(|d| d.path().join("vendor/llama.cpp/models").join(&file))
                    .find(|p| p.is_file())
            });
            found.with_context(|| {
                format!(
                    "{file} (the tokenizer source of {}) is not under {}: run `cargo xtask llama-cpp`, \
                     or pass --vocab",
                    shape.name,
                    src.display()
                )
            })
        }
    }
}

/// Writes the file (through a temporary renamed into place when complete).
pub(crate) fn write_file(
    shape: &Shape,
    ty: SynthType,
    seed: u64,
    vocab: &Path,
    out: &Path,
    progress: bool,
) -> Result<()> {
    let b = builder(shape, ty, seed, vocab)?;
    let plan = shape.tensors(ty);
    let total = b.tensors().iter().map(|t| t.n_bytes).sum();
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let staged = StagedFile::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = b.write_header(BufWriter::with_capacity(1 << 20, staged.file()))?;
    let bar = write::bar(total, progress, format!("{} {}", shape.name, ty.name()));
    for t in &plan {
        write::write_tensor(shape, seed, t, &mut w, &bar)?;
    }
    w.finish()?
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", out.display()))?;
    staged.commit()?;
    bar.finish_and_clear();
    Ok(())
}

/// Copies every `tokenizer.*` key, with the token arrays cut or padded to
/// `n_vocab` as the converter pads a vocabulary (`[PAD<id>]`, unused, score
/// -1000); special-token ids past the end are dropped.
fn copy_tokenizer(src: &Gguf, n_vocab: u64, b: &mut GgufBuilder) -> Result<()> {
    let n = usize::try_from(n_vocab)?;
    let mut budget = MAX_COPIED_ELEMENTS;
    let mut copied = 0;
    for (key, value) in src.metadata() {
        if !key.starts_with("tokenizer.") {
            continue;
        }
        let mut value = value.try_to_owned_value(key, &mut budget)?;
        let pad: Option<fn(usize) -> OwnedValue> = match key {
            "tokenizer.ggml.tokens" => Some(|i| OwnedValue::string(format!("[PAD{i}]"))),
            "tokenizer.ggml.token_type" => Some(|_| OwnedValue::I32(5)),
            "tokenizer.ggml.scores" => Some(|_| OwnedValue::F32(-1000.0)),
            _ => None,
        };
        if let (Some(pad), OwnedValue::Array(_, items)) = (pad, &mut value) {
            items.truncate(n);
            let have = items.len();
            items.extend((have..n).map(pad));
        }
        if key.ends_with("_token_id") && value_u64(&value).is_some_and(|id| id >= n_vocab) {
            continue;
        }
        b.set(key, value)?;
        copied += 1;
    }
    if copied == 0 || !src.contains_key("tokenizer.ggml.tokens") {
        bail!("it has no tokenizer.ggml.tokens");
    }
    Ok(())
}

fn value_u64(v: &OwnedValue) -> Option<u64> {
    match *v {
        OwnedValue::U32(x) => Some(x.into()),
        OwnedValue::I32(x) => u64::try_from(x).ok(),
        OwnedValue::U64(x) => Some(x),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
