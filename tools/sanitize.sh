#!/usr/bin/env bash
# make sanitize: build the C kernels with AddressSanitizer + UndefinedBehaviorSanitizer in a
# scratch copy of the tree (the working tree's build is left alone) and run the kernel
# property tests on that build. Any finding aborts the run (UBSan does not recover), so a
# green run means zero findings. The kernel sources are whatever _build_kernels.py lists
# (csrc/logits.c, csrc/mechanisms.c, csrc/status.c); a compiler warning is a finding too.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PY:-.venv/bin/python}"
[[ "$py" = /* ]] || py="$root/$py"  # absolute, but not resolved: a venv's python is a symlink
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# tracked, untracked-but-not-ignored; a tracked file deleted in the working tree is skipped
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [[ -e "$f" ]]; then printf '%s\0' "$f"; fi; done |
    xargs -0 cp --parents -t "$work")
cd "$work"
CTXLITE_SANITIZE=1 "$py" ctxlite/runtime/_build_kernels.py >build.log 2>&1 || { cat build.log >&2; exit 1; }
if grep -E 'warning:' build.log >&2; then echo "sanitize: the kernels compile with warnings" >&2; exit 1; fi
so="$(ls ctxlite/runtime/_kernels*.so)"
ldd "$so" | grep -q libasan || { echo "sanitize: $so is not linked to ASan" >&2; exit 1; }
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$py" -c "import ctxlite.runtime.kernels as k, sys; assert k.__file__.startswith('$work'), k.__file__"
"$py" -m pytest tests/test_kernels.py -q -s -p no:cacheprovider "$@"  # -s: a finding is printed before the abort
