//! The files made from the downloads with lamina itself (conversions and
//! quantizations), each pinned to the SHA-256 llama.cpp's tools produce.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};

use super::verify::{Stamp, hash_file, mtime_ns};

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
pub(super) fn produce_derived_models(dir: &Path) -> Result<()> {
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
pub(super) enum DerivedState {
    Missing,
    /// Present with this other SHA-256.
    Differs(String),
    Verified,
}

/// Whether `out` is the pinned file: trusted from its stamp while size and
/// mtime match it, else hashed (and the stamp rewritten when it matches).
pub(super) fn derived_state(out: &Path, stamp: &Path, pinned: &str) -> Result<DerivedState> {
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
pub(super) fn write_derived_stamp(out: &Path, stamp: &Path, sha: &str) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

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
}
