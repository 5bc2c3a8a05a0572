#!/bin/sh
# Runs the source checks (tests/layering.sh, tests/backends.sh, tests/docs.sh) and every test
# binary in $1 (the build folder) from the repository root, so tests find tests/ref/*.safetensors,
# and sums their `name: N passed, N failed` lines into one closing line. Exits non-zero if any
# check fails or prints no summary.
dir=${1:-build}
# Tests run many tiny kernels back to back; spinning OpenMP workers only steal the other core.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# An MPI=1 build (its --version says mpi=yes) runs test_mpi as two processes; OpenMPI refuses
# to start as root (CI) without this explicit consent. The timeout turns a deadlock into a failure.
mpi=""
if "$dir/implicit" --version 2>/dev/null | grep -q 'mpi=yes'; then
    mpi="timeout 600 mpirun -np 2 --oversubscribe"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
total_pass=0; total_fail=0; bad=0
# The source checks (shell scripts over the tree) first, then the test binaries.
for t in tests/layering.sh tests/backends.sh tests/docs.sh "$dir"/test_*; do
    case $t in
    *.sh) name=$(basename "$t" .sh); out=$(sh "$t" 2>&1); rc=$? ;;
    *)
        [ -x "$t" ] || continue
        name=$(basename "$t")
        if [ "$name" = test_mpi ] && [ -n "$mpi" ]; then out=$($mpi "$t" 2>&1); rc=$?; else out=$("$t" 2>&1); rc=$?; fi ;;
    esac
    echo "$out" | grep -E '^(FAIL|skip)' | head -50
    line=$(echo "$out" | grep -E '^[A-Za-z_0-9]+: [0-9]+ passed, [0-9]+ failed' | tail -1)
    if [ -z "$line" ]; then
        echo "$name: no summary line (exit $rc)"; echo "$out" | tail -20; bad=$((bad+1)); continue
    fi
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
    f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
    printf '  %-22s %s\n' "$name" "$(echo "$line" | sed 's/^[^:]*: //')"
    total_pass=$((total_pass+p)); total_fail=$((total_fail+f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "$name exited $rc"; bad=$((bad+1)); fi
done
total_fail=$((total_fail+bad))
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
