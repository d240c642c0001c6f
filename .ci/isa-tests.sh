#!/usr/bin/env bash
# Executes every SIMD path of lamina-kernels that this AVX2-only x86-64 machine
# cannot run natively:
#   * aarch64 NEON + dotprod   under `qemu-aarch64 -cpu max`
#   * aarch64 plain NEON       under `qemu-aarch64 -cpu cortex-a53` (no dotprod:
#                              the dispatcher must fall back; the tests assert it)
#   * x86-64 AVX-512 / VNNI    under Miri (intrinsics interpreted), small tests only
# Native AVX2 and scalar paths run in the ordinary `cargo test -p lamina-kernels`.
#
# Usage: .ci/isa-tests.sh [--setup-only|--no-setup]
# Installs what it needs idempotently (apt cross gcc + qemu-user, the rustup
# target, a nightly with Miri), then fails on the first failing step.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/isa}"

setup() {
    if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null \
        || ! [ -e /lib/ld-linux-aarch64.so.1 ]; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        # libc6:arm64 provides /lib/ld-linux-aarch64.so.1 for qemu-user (never pass
        # -L /usr/aarch64-linux-gnu: mixing glibc builds hangs threaded programs).
        dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
            gcc-aarch64-linux-gnu libc6-dev-arm64-cross libc6:arm64 qemu-user >/dev/null
    fi
    rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
        || rustup target add aarch64-unknown-linux-gnu
    rustup +nightly component list --installed 2>/dev/null | grep -q '^miri' \
        || rustup toolchain install nightly --profile minimal --component miri,rust-src
}

run_tests() {
    local t0=$SECONDS
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    # The runner lives here, in the environment, not in .cargo/config.toml
    # (a configured runner would break `cargo miri`).
    echo "== aarch64, qemu -cpu max (NEON + dotprod)"
    LAMINA_EXPECT_ISA=dotprod \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max" \
        cargo test -q --target aarch64-unknown-linux-gnu -p lamina-kernels
    echo "== aarch64, qemu -cpu cortex-a53 (NEON, no dotprod: fallback)"
    LAMINA_EXPECT_ISA=neon \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu cortex-a53" \
        cargo test -q --target aarch64-unknown-linux-gnu -p lamina-kernels
    echo "== x86-64 AVX-512 VNNI under Miri (no +f16c: Miri lacks F16C, see isa.rs)"
    export MIRIFLAGS="-Zmiri-disable-isolation"
    export RUSTFLAGS="-C target-feature=+avx2,+fma,+avx512f,+avx512bw,+avx512vl,+avx512vnni"
    local miri=(cargo +nightly miri test -q -p lamina-kernels --lib)
    "${miri[@]}" --no-run
    # Miri interprets on one thread: two halves of the tests run at once,
    # one a core, the slowest types split between them.
    local slow=(miri_avx512::q6_k miri_avx512::q4_0 miri_avx512_attention)
    "${miri[@]}" -- "${slow[@]}" &
    local half=$!
    local status=0
    "${miri[@]}" -- miri_avx512 "${slow[@]/#/--skip=}" || status=$?
    wait "$half" || status=$?
    unset MIRIFLAGS RUSTFLAGS
    [ "$status" -eq 0 ] || { echo "Miri tests failed"; return "$status"; }
    echo "== ISA tests passed in $((SECONDS - t0)) s"
}

case "${1:-}" in
    --setup-only) setup ;;
    --no-setup) run_tests ;;
    *) setup; run_tests ;;
esac
