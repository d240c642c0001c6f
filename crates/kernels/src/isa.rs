//! Instruction-set detection, done once and cached.
//!
//! [`Isa::selected`] is the ISA every table lookup uses: the best one this CPU
//! executes, unless the `LAMINA_ISA` environment variable (`scalar`, `avx2`,
//! `avx512`, `amx`, `neon`, `dotprod`) forces another; forcing one the CPU lacks is
//! refused with an error naming the missing features.

use crate::KernelError;
use std::sync::OnceLock;

/// A family of kernels; each needs a set of CPU features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust, the reference every other path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL + VNNI (on top of AVX2, which it falls back to per type).
    Avx512Vnni,
    /// x86-64 AMX-TILE + AMX-INT8 on top of AVX-512 VNNI, where the OS grants
    /// the tile state.
    Amx,
    /// aarch64 Advanced SIMD.
    Neon,
    /// aarch64 Advanced SIMD with the `sdot` dot-product instructions.
    NeonDotprod,
}

impl Isa {
    /// Every ISA, from the most portable.
    pub const ALL: [Isa; 6] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::Avx512Vnni,
        Isa::Amx,
        Isa::Neon,
        Isa::NeonDotprod,
    ];

    /// The name `LAMINA_ISA` takes and the CLI reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512",
            Isa::Amx => "amx",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "dotprod",
        }
    }

    /// Parses a [`Isa::name`].
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == name)
    }

    /// The CPU features this ISA needs, as `is_*_feature_detected!` names them.
    pub fn features(self) -> &'static str {
        match self {
            Isa::Scalar => "",
            Isa::Avx2 => "avx2+fma+f16c",
            Isa::Avx512Vnni => "avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni",
            Isa::Amx => {
                "avx2+fma+f16c+avx512f+avx512bw+avx512vl+avx512vnni+amx-tile+amx-int8 and the OS's tile state"
            }
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon+dotprod",
        }
    }

    /// Whether this CPU executes the ISA (detected once, then cached).
    pub fn is_available(self) -> bool {
        static DETECTED: OnceLock<[bool; 6]> = OnceLock::new();
        let d = DETECTED.get_or_init(|| Isa::ALL.map(detect));
        d[self as usize]
    }

    /// The fastest available ISA: the default path.
    ///
    /// AMX first: its tile unit multiplies 64 values of sixteen weight rows
    /// by sixteen tokens in one instruction. Then AVX-512 VNNI: its tiles
    /// (`vpdpbusd` over rows packed four bytes at a time) do a quarter of
    /// AVX2's instructions per block.
    pub fn best_available() -> Isa {
        [
            Isa::Amx,
            Isa::Avx512Vnni,
            Isa::Avx2,
            Isa::NeonDotprod,
            Isa::Neon,
        ]
        .into_iter()
        .find(|i| i.is_available())
        .unwrap_or(Isa::Scalar)
    }

    /// The ISA a `LAMINA_ISA` value asks for (`None` or empty: the best available).
    pub fn resolve(forced: Option<&str>) -> Result<Isa, KernelError> {
        let best = Isa::best_available();
        let Some(name) = forced.map(str::trim).filter(|s| !s.is_empty()) else {
            return Ok(best);
        };
        let isa = Isa::from_name(name).ok_or_else(|| KernelError::UnknownIsa(name.to_string()))?;
        if isa.is_available() {
            Ok(isa)
        } else {
            Err(KernelError::IsaUnavailable {
                requested: isa.name(),
                missing: isa.features(),
                best: best.name(),
            })
        }
    }

    /// Whether the ISA's tables hold AVX-512 kernels (AVX-512 VNNI or AMX).
    pub fn has_avx512(self) -> bool {
        matches!(self, Isa::Avx512Vnni | Isa::Amx)
    }

    /// Whether this CPU has AVX-512 BF16 (`vdpbf16ps`) on top of AVX-512
    /// VNNI: its AVX-512 and AMX tables then multiply BF16 weights in bf16
    /// pairs (detected once, then cached).
    pub fn has_avx512_bf16() -> bool {
        static DETECTED: OnceLock<bool> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            return Isa::Avx512Vnni.is_available() && is_x86_feature_detected!("avx512bf16");
            #[cfg(not(target_arch = "x86_64"))]
            false
        })
    }

    /// The ISA in use for this process: `LAMINA_ISA` read and checked once.
    pub fn selected() -> Result<Isa, KernelError> {
        static SELECTED: OnceLock<Result<Isa, KernelError>> = OnceLock::new();
        SELECTED
            .get_or_init(|| Isa::resolve(std::env::var("LAMINA_ISA").ok().as_deref()))
            .clone()
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn detect(isa: Isa) -> bool {
    // Miri does not implement F16C: `.ci/isa-tests.sh` runs it without `+f16c`,
    // and the kernels it executes decode f16 in software under `cfg(miri)`.
    let avx2 = || {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && (cfg!(miri) || is_x86_feature_detected!("f16c"))
    };
    let avx512 = || {
        avx2()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    };
    match isa {
        Isa::Scalar => true,
        Isa::Avx2 => avx2(),
        Isa::Avx512Vnni => avx512(),
        Isa::Amx => avx512() && crate::x86_64::amx::usable(),
        Isa::Neon | Isa::NeonDotprod => false,
    }
}

#[cfg(target_arch = "aarch64")]
fn detect(isa: Isa) -> bool {
    use std::arch::is_aarch64_feature_detected;
    match isa {
        Isa::Scalar => true,
        Isa::Neon => is_aarch64_feature_detected!("neon"),
        Isa::NeonDotprod => {
            is_aarch64_feature_detected!("neon") && is_aarch64_feature_detected!("dotprod")
        }
        Isa::Avx2 | Isa::Avx512Vnni | Isa::Amx => false,
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn detect(isa: Isa) -> bool {
    isa == Isa::Scalar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
        }
        assert_eq!(Isa::from_name("sse9"), None);
    }

    #[test]
    fn scalar_can_always_be_forced() {
        assert_eq!(Isa::resolve(Some("scalar")), Ok(Isa::Scalar));
        assert_eq!(Isa::resolve(None), Ok(Isa::best_available()));
        assert_eq!(Isa::resolve(Some("")), Ok(Isa::best_available()));
    }

    #[test]
    fn unknown_and_unavailable_isas_are_refused() {
        let e = Isa::resolve(Some("sse9")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "LAMINA_ISA=\"sse9\" is not one of scalar, avx2, avx512, amx, neon, dotprod"
        );
        // An ISA of the other architecture is never available.
        let foreign = if cfg!(target_arch = "aarch64") {
            "avx2"
        } else {
            "neon"
        };
        let e = Isa::resolve(Some(foreign)).unwrap_err();
        assert!(matches!(e, KernelError::IsaUnavailable { .. }), "{e}");
        assert!(e.to_string().contains("this CPU lacks"), "{e}");
        for isa in Isa::ALL {
            assert_eq!(Isa::resolve(Some(isa.name())).is_ok(), isa.is_available());
        }
    }

    /// The CI scripts set `LAMINA_EXPECT_ISA` to the ISA the emulated or real
    /// CPU must end up with (e.g. `neon` under `qemu-aarch64 -cpu cortex-a53`):
    /// this proves which path the dispatcher took.
    #[test]
    fn dispatcher_picks_the_expected_isa() {
        let selected = Isa::selected().expect("LAMINA_ISA refused");
        eprintln!(
            "selected ISA: {selected}, best available: {}",
            Isa::best_available()
        );
        if let Ok(want) = std::env::var("LAMINA_EXPECT_ISA") {
            assert_eq!(selected.name(), want, "dispatcher picked {selected}");
        }
        if std::env::var_os("LAMINA_ISA").is_none() {
            assert_eq!(selected, Isa::best_available());
        }
        assert!(selected.is_available());
    }
}
