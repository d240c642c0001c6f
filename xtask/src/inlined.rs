//! Checks that the release `lamina` binary holds no SIMD intrinsic as a
//! function of its own.
//!
//! An intrinsic called from code compiled without its target feature (a
//! closure inside a `#[target_feature]` kernel, for one) is not inlined:
//! each vector instruction becomes a call, and the kernel runs several
//! times slower while its tests still pass. The symbol table shows it:
//! such an intrinsic appears as `core::core_arch::...::_mm256_...`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

/// Whether a demangled symbol is an out-of-line SIMD intrinsic: a function
/// of `core::core_arch` itself (not a generic instantiated over one of its
/// types) named as x86 (`_mm*`) or Arm (`v*`) intrinsics are.
pub(crate) fn is_intrinsic(symbol: &str) -> bool {
    let Some(path) = symbol.strip_prefix("core::core_arch::") else {
        return false;
    };
    let name = path.rsplit("::").next().unwrap_or(path);
    !path.contains('<')
        && (name.starts_with("_mm") || (name.starts_with('v') && name.contains('_')))
}

/// Lists the binary's defined symbols with `nm` and fails naming every
/// out-of-line intrinsic. Without `nm` it says so and passes.
pub(crate) fn check(bin: &Path) -> Result<()> {
    let out = match Command::new("nm")
        .arg("-C")
        .arg("--defined-only")
        .arg(bin)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!(
                "skipped the inlined-intrinsics check: nm did not run ({e}); install binutils"
            );
            return Ok(());
        }
    };
    anyhow::ensure!(
        out.status.success(),
        "nm {} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let symbols = String::from_utf8(out.stdout).context("nm's output is not UTF-8")?;
    let found: Vec<&str> = symbols
        .lines()
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .filter(|s| is_intrinsic(s))
        .collect();
    anyhow::ensure!(
        found.is_empty(),
        "{} holds {} SIMD intrinsics as functions of their own, so kernels call them \
         instead of inlining them (look for a closure or helper compiled without the \
         kernel's target features):\n  {}",
        bin.display(),
        found.len(),
        found.join("\n  ")
    );
    eprintln!(
        "inlined intrinsics: {} holds none out of line",
        bin.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_intrinsic;

    #[test]
    fn tells_out_of_line_intrinsics_from_core_arch_helpers() {
        for s in [
            "core::core_arch::x86::avx2::_mm256_and_si256",
            "core::core_arch::x86::sse::_mm_prefetch",
            "core::core_arch::arm_shared::neon::generated::vaddq_f32",
            "core::core_arch::aarch64::neon::generated::vpaddq_s32",
        ] {
            assert!(is_intrinsic(s), "{s}");
        }
        for s in [
            "core::core_arch::x86::xsave::_xgetbv",
            "<core::core_arch::x86::__m128i as core::fmt::Debug>::fmt",
            "core::ptr::drop_in_place<aho_corasick::packed::teddy::generic::Slim<core::core_arch::x86::__m128i,1_usize>>",
            "lamina_kernels::x86_64::avx2::attention::k_attend2_f32",
        ] {
            assert!(!is_intrinsic(s), "{s}");
        }
    }
}
