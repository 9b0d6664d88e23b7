#!/usr/bin/env bash
# The whole test suite: set-up, build, host unit tests, then the kselftests in QEMU guests
# (one-host and two-hosts topologies). Prints one line per test and, last,
# "N passed, N failed, N skipped"; exits non-zero on any failure.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

passed=0 failed=0 skipped=0
finish() {
	echo "$passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
	exit $?
}
step() { # step NAME COMMAND...: a preparation step; its failure fails the suite.
	local name=$1
	shift
	if "$@"; then
		echo "ok - $name"
		passed=$((passed + 1))
	else
		echo "not ok - $name"
		failed=$((failed + 1))
		finish
	fi
}

step "set-up (packages, toolchain)" "$REPO/scripts/setup.sh"
step "kernel and module build ($FLAVOUR)" "$REPO/scripts/build.sh"
step "initramfs" "$REPO/scripts/initramfs.sh"
check() { # check NAME COMMAND...: a host-side check; its output is shown if it fails.
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "ok - $name"
		passed=$((passed + 1))
	else
		echo "$out"
		echo "not ok - $name"
		failed=$((failed + 1))
	fi
}

check "lint: rustfmt clean, no compiler or clippy warning in our code" \
	"$REPO/scripts/lint.sh" --no-words
# The tables of figures in README.md and bench/results/README.md are what the benchmarks'
# result files give.
check "readme: its tables of figures are generated from bench/results/*.json" \
	"$REPO/scripts/readme-tables.py" --check
# Every script, script option and IPOIB_RS_* variable the README names exists.
check "readme commands: every script, option, variable and path it names exists" \
	python3 "$REPO/scripts/check-readme.py"
# No text of the repository records how it was developed (sessions, the log folders of
# particular runs, what a run showed).
check "words: no text records how the repository was developed" \
	python3 "$REPO/scripts/check-words.py"

# Host unit tests of the wire formats.
out=$(cd "$REPO/tests/wire" && CARGO_TARGET_DIR=$CACHE/cargo-target cargo test 2>&1)
rc=$?
echo "$out" | grep -E '^test .* \.\.\. ' | sed -E 's/^test (.*) \.\.\. ok$/ok - wire: \1/; s/^test (.*) \.\.\. FAILED$/not ok - wire: \1/'
read -r p f < <(echo "$out" | sed -nE 's/^test result: .* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' |
	awk '{p += $1; f += $2} END {print p + 0, f + 0}')
passed=$((passed + p)) failed=$((failed + f))
if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
	echo "$out" | tail -n 20
	echo "not ok - wire: cargo test did not run"
	failed=$((failed + 1))
fi

# The benchmark's summary (scripts/vs-c.awk) on made-up figures with known medians.
bench_out=$("$REPO/tests/bench/vs_c_awk.sh" 2>&1)
bench_rc=$?
echo "$bench_out"
passed=$((passed + $(grep -c "^ok - " <<<"$bench_out")))
failed=$((failed + $(grep -c "^not ok - " <<<"$bench_out")))
if [ "$bench_rc" -ne 0 ] && ! grep -q "^not ok - " <<<"$bench_out"; then
	echo "not ok - bench summary: tests/bench/vs_c_awk.sh failed (exit $bench_rc) without saying what"
	failed=$((failed + 1))
fi

# The cost benchmark's plugin builds, and its report places made-up counts at real addresses
# of the kernel and modules just built as it should.
cost_out=$("$REPO/tests/bench/cost_report.sh" "$KBUILD" \
	"$(find "$OUT/$FLAVOUR/modroot" -name ib_ipoib.ko | head -n 1)" "$OUT/$FLAVOUR/ipoib-c.ko" \
	"$CACHE/cost-plugin" 2>&1)
cost_rc=$?
echo "$cost_out"
passed=$((passed + $(grep -c "^ok - " <<<"$cost_out")))
failed=$((failed + $(grep -c "^not ok - " <<<"$cost_out")))
if [ "$cost_rc" -ne 0 ] && ! grep -q "^not ok - " <<<"$cost_out"; then
	echo "not ok - cost: tests/bench/cost_report.sh failed (exit $cost_rc) without saying what"
	failed=$((failed + 1))
fi

# The wire parsers fuzzed for a bounded time (libFuzzer through cargo fuzz; the stable
# toolchain is let use the sanitizer flags). A crash input is kept as a regression test.
fuzz_secs=${IPOIB_RS_FUZZ_SECS:-30}
fuzz_dir=$REPO/tests/wire/fuzz
mkdir -p "$CACHE/fuzz-corpus"
if out=$(cd "$fuzz_dir" && RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$CACHE/fuzz-target \
	cargo fuzz run wire_parsers "$CACHE/fuzz-corpus" -- -max_total_time="$fuzz_secs" 2>&1); then
	runs=$(echo "$out" | sed -nE 's/^Done ([0-9]+) runs.*/\1/p' | tail -n 1)
	echo "ok - fuzz: wire parsers, ${runs:-?} inputs in ${fuzz_secs} s, no failure"
	passed=$((passed + 1))
else
	echo "$out" | grep -E 'panicked|ERROR|Test unit written' | head -n 5 | sed 's/^/#   /'
	for crash in "$fuzz_dir"/artifacts/wire_parsers/crash-*; do
		[ -f "$crash" ] && mv "$crash" "$fuzz_dir/regressions/" &&
			echo "#   kept as tests/wire/fuzz/regressions/${crash##*/}"
	done
	echo "not ok - fuzz: wire parsers"
	failed=$((failed + 1))
fi

# Editor support: rust-project.json for rust-analyzer covers the driver and test modules.
if "$REPO/scripts/rust-analyzer.sh" 2>/dev/null; then
	echo "ok - rust-analyzer: rust-project.json covers the driver and its test modules"
	passed=$((passed + 1))
else
	echo "not ok - rust-analyzer: rust-project.json covers the driver and its test modules"
	failed=$((failed + 1))
fi

# The patch series upstream would review: it applies to pristine sources and checkpatch
# finds no error.
patch_out=$("$REPO/scripts/check-patches.sh")
patch_rc=$?
while read -r line; do
	echo "$line"
	case "$line" in
	"ok - "*) passed=$((passed + 1)) ;;
	"not ok - "*) failed=$((failed + 1)) ;;
	esac
done <<<"$patch_out"
if [ "$patch_rc" -ne 0 ] && ! grep -q "^not ok - " <<<"$patch_out"; then
	echo "not ok - patch series: check-patches.sh failed (exit $patch_rc) without saying what"
	failed=$((failed + 1))
fi

# Guests.
stamp=$(date +%Y%m%d-%H%M%S)
for topology in one-host two-hosts two-hosts-ib; do
	IPOIB_RS_RUN=$stamp-$topology "$REPO/scripts/vm.sh" "$topology"
	counts=$OUT/logs/$stamp-$topology/counts
	if [ -f "$counts" ]; then
		read -r p f s <"$counts"
		passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
	else
		echo "not ok - $topology: guest run did not complete"
		failed=$((failed + 1))
	fi
done
# The cost benchmark's QEMU plugin in a guest: what it counts between the marks.
plugin_out=$("$REPO/tests/bench/cost_plugin.sh" "$CACHE/cost-plugin" 2>&1)
plugin_rc=$?
echo "$plugin_out" | grep -v "^\[ipoib-rs\]"
passed=$((passed + $(grep -c "^ok - " <<<"$plugin_out")))
failed=$((failed + $(grep -c "^not ok - " <<<"$plugin_out")))
if [ "$plugin_rc" -ne 0 ] && ! grep -q "^not ok - " <<<"$plugin_out"; then
	echo "not ok - cost plugin: tests/bench/cost_plugin.sh failed (exit $plugin_rc) without saying what"
	failed=$((failed + 1))
fi
finish
