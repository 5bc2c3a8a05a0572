#!/bin/sh
# backends.sh: OpenMP and BLAS appear only in src/kernels/cpu/ (STYLE §8.1, §8.7). Every other
# source under src/, cli/ and include/ (the kernels' scalar references in src/kernels/ref/
# included) must be free of OpenMP pragmas and calls, <omp.h>, cblas and OpenBLAS's own calls:
# layers, solvers and models reach threads and BLAS only through the k_* kernels of
# src/kernels/kernels.h (k_foreach for a loop whose body is their own).
# Prints `backends: N passed, N failed` for tests/run.sh; exits non-zero on a violation.
cd "$(dirname "$0")/.." || exit 2

pattern='#[[:space:]]*pragma[[:space:]]+omp|_Pragma[[:space:]]*\([[:space:]]*"[[:space:]]*omp|omp\.h|(^|[^a-z_])omp_[a-z_]+[[:space:]]*\(|cblas|openblas_'
pass=0; fail=0
for f in $(find src cli include -name '*.[ch]' | sort); do
    case $f in src/kernels/cpu/*) continue ;; esac
    hits=$(grep -nE "$pattern" "$f")
    if [ -n "$hits" ]; then
        echo "$hits" | sed "s|^|FAIL backends: $f:|; s|\$| (OpenMP / BLAS belong in src/kernels/cpu/)|"
        fail=$((fail+1))
    else
        pass=$((pass+1))
    fi
done
echo "backends: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
