#!/bin/bash
# The GPU check (`make gpu-check`): builds tpuc against the machine's torch, then check.py runs
# every phase under one deadline and report.py writes $OUT/report.md. See README.md beside it.
#
#   GPU_CHECK_DRY=1        the CPU dry run: "tpu" = XLA CPU plugin, reference = torch CPU, tiny
#                          sizes, no build (the installed tpuc), 150 s deadline
#   OUT                    where results.jsonl, log.txt, logs/ and report.md go
#                          (default build/gpu_check, or build/gpu_check-dry)
#   GPU_CHECK_DEADLINE     seconds for everything, the build included (480; dry 150)
#   GPU_CHECK_PHASES       machine,info,coexist,memory,train,ctests,pytest,micro (a subset)
#   GPU_CHECK_SIZES        small,large          GPU_CHECK_STEPS  8 (dry 5)
#   GPU_CHECK_MODES        strict,fused,compile,ref_compile (the "tpu" modes, cold and warm,
#                          and torch.compile on the reference; its eager run always runs)
#   GPU_CHECK_DTYPE        f32 | bf16 (autocast)
#   GPU_CHECK_PYTHON       the interpreter (default: the first python3 that imports torch)
#   GPU_CHECK_NO_BUILD=1   use the tpuc already installed (a second pass on a warm machine)
#   GPU_CHECK_C_BUILD=DIR  dry run: an existing C core build whose tests to run
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
case "${GPU_CHECK_DRY:-0}" in
  ""|0|no|off|false) DRY=0 ;;
  *) DRY=1 ;;
esac
if [ "$DRY" = 1 ]; then
  OUT=${OUT:-$SRC/build/gpu_check-dry}
  export GPU_CHECK_DEADLINE=${GPU_CHECK_DEADLINE:-150}
else
  OUT=${OUT:-$SRC/build/gpu_check}
  export GPU_CHECK_DEADLINE=${GPU_CHECK_DEADLINE:-480}
fi
mkdir -p "$OUT" || { echo "gpu-check: cannot create OUT=$OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
export OUT GPU_CHECK_DRY=$DRY GPU_CHECK_SRC=$SRC
export GPU_CHECK_T0=$(date +%s)
rm -rf "$OUT/logs" "$OUT/results.jsonl" "$OUT/report.md"
mkdir -p "$OUT/logs"
: > "$OUT/log.txt"
exec > >(tee -a "$OUT/log.txt") 2>&1

el() { echo $(( $(date +%s) - GPU_CHECK_T0 )); }
say() { echo "[$(el)s] $*"; }

# the interpreter whose torch tpuc is built against and run with
PY=""
for p in ${GPU_CHECK_PYTHON:-} python3 /opt/torch/.venv/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch" >/dev/null 2>&1; then PY=$(command -v "$p"); break; fi
done
if [ -z "$PY" ]; then
  echo "gpu-check: no python3 with torch found (set GPU_CHECK_PYTHON)" >&2
  exit 2
fi
export GPU_CHECK_PYTHON=$PY PYTHONUNBUFFERED=1
record() { "$PY" "$HERE/checklib.py" record "$@"; }
say "gpu-check: $([ "$DRY" = 1 ] && echo 'DRY RUN (CPU)' || echo GPU) src=$SRC out=$OUT python=$PY deadline=${GPU_CHECK_DEADLINE}s"

if [ "$DRY" = 0 ]; then
  export PIP_NO_INDEX=1
  # the CUDA plugin's libraries (cuDNN, cuBLAS, NCCL ...) come from the nvidia-* wheels
  NVLIB=$("$PY" -c "import glob, os, site; print(':'.join(sorted(glob.glob(os.path.join(site.getsitepackages()[0], 'nvidia', '*', 'lib')))))" 2>/dev/null)
  [ -n "$NVLIB" ] && export LD_LIBRARY_PATH=$NVLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  JOBS=$(nproc)
  # the C core and its tests, in the background while pip builds the package
  if command -v cmake >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
    export GPU_CHECK_C_BUILD=${GPU_CHECK_C_BUILD:-/tmp/gpu_check-c} GPU_CHECK_C_BUILD_BG=1
    mkdir -p "$GPU_CHECK_C_BUILD" && rm -f "$GPU_CHECK_C_BUILD/gpu_check_build.rc"
    (
      cmake -S "$SRC" -B "$GPU_CHECK_C_BUILD" -G Ninja -DTPUC_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release \
        > "$OUT/logs/c_build.log" 2>&1 \
        && timeout 240 nice -n 10 ninja -C "$GPU_CHECK_C_BUILD" -j "$JOBS" >> "$OUT/logs/c_build.log" 2>&1
      echo $? > "$GPU_CHECK_C_BUILD/gpu_check_build.rc"
    ) &
  else
    say "no cmake/ninja on PATH: the C core tests are skipped"
  fi
  if [ "${GPU_CHECK_NO_BUILD:-0}" = 1 ]; then
    record build status=skipped-by-request seconds=0
  else
    say "building tpuc against torch $("$PY" -c 'import torch; print(torch.__version__)')"
    t=$(date +%s)
    ( cd "$SRC" && CMAKE_BUILD_PARALLEL_LEVEL=$JOBS timeout 300 "$PY" -m pip install --no-index \
        --no-build-isolation --no-deps . > "$OUT/logs/build.log" 2>&1 )
    rc=$?
    secs=$(( $(date +%s) - t ))
    if [ $rc -eq 0 ]; then
      record build status=ok rc=0 seconds=$secs
      say "build ok (${secs}s)"
    else
      record build status=failed rc=$rc seconds=$secs
      say "BUILD FAILED rc=$rc (${secs}s); the tpu phases will fail. Last errors:"
      grep -iE 'error' "$OUT/logs/build.log" | tail -15
    fi
  fi
else
  if "$PY" -c "import tpuc" >/dev/null 2>&1; then
    record build status=skipped-dry-run seconds=0
  else
    record build status=failed-tpuc-not-importable seconds=0
    say "tpuc is not importable by $PY: run make install first"
  fi
fi

# the driver, bounded by the deadline plus a margin for its last process's kill
left=$(( GPU_CHECK_DEADLINE - $(el) + 30 ))
[ $left -lt 10 ] && left=10
timeout -k 5 $left "$PY" "$HERE/check.py"
rc=$?
[ $rc -ne 0 ] && say "check.py ended with rc=$rc"

say "report"
if "$PY" "$HERE/report.py" "$OUT" >/dev/null; then
  echo
  sed -n '/^### Summary/,/^### Training/p' "$OUT/report.md" | head -40
  say "gpu-check done: $OUT/report.md, $OUT/results.jsonl, $OUT/log.txt"
  exit 0
fi
say "gpu-check: no report (see $OUT/log.txt)"
exit 1
