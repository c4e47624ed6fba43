#!/usr/bin/env bash
# Pack what the GPU machine lacks to run `python -m tlp collect` on a CUDA target, into build/gpu_bundle/ (ignored).
#
# The GPU machine has Python 3.12 with torch, numpy, psutil, cloudpickle, tqdm, ml-dtypes and typing-extensions,
# and no TVM. A `tlp collect` imports, beyond those: tvm and tvm_ffi (xgboost only for evolved candidates, which
# collect_chunk.sh turns off with random_fraction=1.0; tornado only for --rpc-tracker).
# - tvm: this venv's installed copy (its wheel is tagged py3-none: no CPython-specific extension, it loads on 3.12),
#   without tvm/3rdparty/cutlass, tvm/src and __pycache__;
# - tvm_ffi: its wheel is cp311-only (a Cython extension), so the cp312 wheel of the same version is downloaded.
# The tarball (xz) is split into parts that each fit one device call beside the working tree (the tree and the
# carried paths travel together, 64 MiB at most): see README.md.
#
# Usage (from anywhere): bash benchmarks/gpu_platform/prepare_bundle.sh
# Settings: PYTHON (default .venv/bin/python), BUNDLE_DIR (default build/gpu_bundle), PARTS (default: the fewest
# equal parts that each fit beside the tracked tree with 3 MiB to spare), SPLIT_ONLY=1 (split an existing bundle
# again, no packing).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=${BUNDLE_DIR:-build/gpu_bundle}
started=$(date +%s)

SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TVM_VERSION=$($PY -c 'from importlib.metadata import version; print(version("apache-tvm"))')
FFI_VERSION=$($PY -c 'from importlib.metadata import version; print(version("apache-tvm-ffi"))')
TVM_INFO="$SITE/apache_tvm-$TVM_VERSION.dist-info"
if ! grep -q "^Tag: py3-none" "$TVM_INFO/WHEEL"; then
    echo "prepare_bundle: apache-tvm $TVM_VERSION is not a py3-none wheel here ($(grep ^Tag "$TVM_INFO/WHEEL" | head -1)):" \
         "its extension is CPython-specific; download its cp312 wheel instead" >&2
    exit 1
fi

if [ -z "${SPLIT_ONLY:-}" ]; then
rm -rf "$OUT"
mkdir -p "$OUT/stage/site" "$OUT/wheels"
# 1. tvm, as installed (built with CUDA: lib/libtvm_runtime_cuda.so), minus what a collection never reads
tar -C "$SITE" --exclude='tvm/3rdparty/cutlass' --exclude='tvm/src' --exclude='tvm/web' --exclude='__pycache__' \
    -cf - tvm "apache_tvm-$TVM_VERSION.dist-info" | tar -C "$OUT/stage/site" -xf -
# 2. tvm_ffi for CPython 3.12 (without its sources and test library)
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$OUT/wheels" "apache-tvm-ffi==$FFI_VERSION"
$PY - "$OUT/wheels" "$OUT/stage/site" <<'PYEOF'
import glob, sys, zipfile
wheels = glob.glob(f"{sys.argv[1]}/apache_tvm_ffi-*-cp312-*.whl")
assert len(wheels) == 1, wheels
zipfile.ZipFile(wheels[0]).extractall(sys.argv[2])
PYEOF
rm -rf "$OUT/stage/site/tvm_ffi/src" "$OUT/stage/site/tvm_ffi/lib/libtvm_ffi_testing.so"
# nothing built for 3.11 may travel
if find "$OUT/stage/site" -name '*cpython-311*' | grep -q .; then
    echo "prepare_bundle: a CPython 3.11 extension in the bundle:" >&2
    find "$OUT/stage/site" -name '*cpython-311*' >&2
    exit 1
fi
echo "tvm $TVM_VERSION (py3-none, this venv's) + tvm-ffi $FFI_VERSION (cp312)" > "$OUT/stage/site/BUNDLE_VERSION"

# 3. one xz stream (an x86 filter made a sample of libtvm_compiler.so 2 % larger; -9e saved under 0.5 %)
tar -C "$OUT/stage" -cf - site | xz -T2 -6 > "$OUT/tlp_gpu_bundle.tar.xz"
rm -rf "$OUT/stage" "$OUT/wheels"
else
    # SPLIT_ONLY=1: split an existing bundle again (its parts joined, checked), e.g. after the tree grew
    cat "$OUT"/*/tlp_gpu_bundle.tar.xz.part-* > "$OUT/tlp_gpu_bundle.tar.xz"
    [ "$(sha256sum "$OUT/tlp_gpu_bundle.tar.xz" | cut -d' ' -f1)" = "$(sed -n 's/^sha256 //p' "$OUT/a/MANIFEST")" ] \
        || { echo "prepare_bundle: the parts under $OUT do not add up to their bundle" >&2; exit 1; }
    rm -rf "$OUT"/*/
fi
TREE=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((3 * 1024 * 1024))  # for files the tree gains before the run
SIZE=$(stat -c %s "$OUT/tlp_gpu_bundle.tar.xz")
ROOM=$((LIMIT - TREE - MARGIN))
[ "$ROOM" -gt $((60 * 1024 * 1024)) ] && ROOM=$((60 * 1024 * 1024))
N=${PARTS:-$(( (SIZE + ROOM - 1) / ROOM ))}
SUM=$(sha256sum "$OUT/tlp_gpu_bundle.tar.xz" | cut -d' ' -f1)
split -n "$N" -a 1 "$OUT/tlp_gpu_bundle.tar.xz" "$OUT/tlp_gpu_bundle.tar.xz.part-"
rm "$OUT/tlp_gpu_bundle.tar.xz"
parts=$(cd "$OUT" && ls tlp_gpu_bundle.tar.xz.part-* | tr '\n' ' ')
for part in $parts; do
    folder="$OUT/${part##*part-}"
    mkdir -p "$folder"
    mv "$OUT/$part" "$folder/"
    printf 'sha256 %s\nparts %s\n' "$SUM" "$parts" > "$folder/MANIFEST"
done
total=$(cat "$OUT"/*/tlp_gpu_bundle.tar.xz.part-* | wc -c)
echo "bundle: $OUT/{$(cd "$OUT" && ls -d */ | tr -d / | tr '\n' ',' | sed 's/,$//')}: $total bytes in $N parts" \
     "(tracked tree: $TREE bytes; tree + a part <= 64 MiB - 3 MiB), sha256 $SUM, $(( $(date +%s) - started )) s"
