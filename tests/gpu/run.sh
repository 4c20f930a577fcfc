#!/usr/bin/env bash
# tests/gpu/run.sh: stoker's GPU tests and GPU benchmark in one go, on a
# machine with an NVIDIA GPU and its driver (docs/gpu.md).
#
#   tests/gpu/run.sh                 results under $OUT (else build/gpu-out)
#
# On a GPU machine without the Debian packages, carry a build made
# elsewhere with its libraries (tests/gpu/bundle-libs.sh). The run writes
# some 30 files under $OUT: where few can come back, see docs/gpu.md.
#
# Environment: OUT (results), B (build directory, default build), CORES
# (default nproc), DEADLINE (seconds for the whole run, default 540: no
# section starts without 20 s left, each is cut to what is left),
# KILL_CLIENTS (default 100), LARGE_PER_CLASS (benchmark images per class of
# 16, default 256), SKIP (space-separated sections to skip).
#
# Sections, each with its own time limit; a failure is recorded and the
# next section runs. Tests (their failure fails the run):
#   build          make all (nvcc compiles the kernel); carried binaries are
#                  used if the build cannot run here
#   gpu-identity   device uint8 batches byte-identical to host batches of the
#                  same seed; float32 identical and float16 within 1 ulp of
#                  the CPU float path; 2 epochs each
#   gpu-multi      two clients (ranks) of one job and a second job on one GPU
#   gpu-stats      stats show the client's device bytes
#   gpu-detect     task=detect (letterbox, mosaic, rect letterbox): device images equal to
#                  the host's, boxes (on the host) equal
#   gpu-nodevice   cuda:99 refused with the reason
#   gpu-budget     gpu_memory_budget refusal
#   gpu-kill       KILL_CLIENTS CUDA clients SIGKILLed; free GPU memory back
#                  to its baseline; the daemon still right
#   gpu-daemon-kill  stokerd SIGKILLed under a client: a clear error; release
#                  and close after it work (the release word is the client's own)
#   torch-check    zero-copy torch CUDA tensors, side streams, pin_memory
# The review of issue 25, one section per item that needs a device:
#   gpu-arch       the fatbin holds compute_75 PTX and sm_80/sm_90 code (item 10;
#                  needs cuobjdump)
#   gpu-killed-release  two float clients with streams blocked before their
#                  releases while the daemon's copies wait on them: 12 other clients
#                  (more rings than the default 8 hardware queues) are served; the
#                  first SIGKILLed and its ring freed while the second's stream is
#                  still blocked (no device-wide sync in teardown), then the second;
#                  free memory back (items 1, 2)
#   gpu-close-waits  closing with a read of the held batch queued waits for it
#                  before unmapping; the read sees the batch (item 3)
#   gpu-async-error  a copy faulting on the GPU (STOKER_TEST_GPU_FAULT) ends its
#                  session with the reason; the next client is served (items 4, 9)
#   gpu-release-timeout  a release that never reaches the GPU fails its ring
#                  after STOKER_TEST_GPU_RELEASE_AFTER_S (item 4)
#   gpu-pin-context  pin_memory makes no context; pins in the current one (item 7)
#   gpu-context-release  stokerd's context goes with its last ring; its size
#                  against what gpu_memory_budget counts (item 9)
#   gpu-other-uid  a trainer of another uid (nobody) gets device batches from a
#                  root stokerd: the ring and its release words travel as fds, no
#                  IPC objects shared (item 6; needs root and runuser, else SKIP)
#   gpu-systemd    stokerd as a transient systemd service with the unit's sandbox
#                  and the GPU drop-in serves a device attach (item 5; needs
#                  systemd as PID 1 and root, else SKIP)
# Measurements (recorded, never failing the run):
#   env, dataset, copy-bench (device path vs cuMemcpyHtoDAsync from pinned),
#   train-bench (ResNet-50 channels_last AMP batch 256: stoker device /
#   stoker pinned / DataLoader / DALI, images/s and GPU busy), cpu-scaling
#   (bench/run.py at the machine's core count).
# A summary table ends the output (also $OUT/summary.txt, summary.json).
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
B=${B:-build}
OUT=${OUT:-$ROOT/build/gpu-out}
CORES=${CORES:-$(nproc)}
DEADLINE=${DEADLINE:-540}
KILL_CLIENTS=${KILL_CLIENTS:-100}
SKIP=${SKIP:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/stoker-gpu.XXXXXX)
START=$(date +%s)
export ROOT B OUT CORES WORK KILL_CLIENTS
export STOKER_BUILD="$ROOT/$B" PYTHONPATH="$ROOT/client/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# Binaries carried from a build machine (tests/gpu/bundle-libs.sh) to one
# without the Debian packages: the libraries this machine lacks come from
# the bundle; those it has stay its own (its Python's among them).
if [ -d "$ROOT/$B/runtime-libs" ]; then
	mkdir -p "$WORK/libs"
	have=$(ldconfig -p 2>/dev/null)
	for f in "$ROOT/$B/runtime-libs"/*; do
		n=${f##*/}
		grep -q "^[[:space:]]$n " <<<"$have" || ln -s "$f" "$WORK/libs/$n"
	done
	echo "from $B/runtime-libs: $(ls "$WORK/libs" | tr '\n' ' ')"
	export LD_LIBRARY_PATH="$WORK/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

NAMES=()
RESULTS=()
TIMES=()
KINDS=()

# ---- daemons: one per name, socket and pid under $WORK, log under $OUT ----
start_daemon() { # name [stokerd flags...]
	local name=$1
	shift
	local sock="$WORK/$name.sock"
	# Its own output to its log: never to a section's pipe (tee would wait for it).
	# CUDA_DEVICE_MAX_CONNECTIONS as deploy/stoker-gpu.conf sets it.
	CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32} "$ROOT/$B/stokerd" --socket "$sock" --workers "$CORES" "$@" </dev/null >>"$OUT/stokerd-$name.log" 2>&1 &
	echo $! >"$WORK/$name.pid"
	for _ in $(seq 200); do
		[ -S "$sock" ] && "$ROOT/$B/stokerctl" --socket "$sock" stats >/dev/null 2>&1 && return 0
		kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || break
		sleep 0.05
	done
	echo "stokerd $name did not start:"
	tail -20 "$OUT/stokerd-$name.log"
	return 1
}
stop_daemon() { # name: SIGTERM, 20 s, then SIGKILL; 0 if it stopped cleanly
	local pidf="$WORK/$1.pid" pid
	[ -f "$pidf" ] || return 0
	pid=$(cat "$pidf")
	rm -f "$pidf"
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "stokerd $1 hung after SIGTERM: killed"
		kill -KILL "$pid" 2>/dev/null
		return 1
	fi
	# Not our child (another section started it): its log says how it ended.
	tail -1 "$OUT/stokerd-$1.log" | grep -q "stopped" || { echo "stokerd $1 did not stop cleanly:"; tail -5 "$OUT/stokerd-$1.log"; return 1; }
}
daemon_alive() { [ -f "$WORK/$1.pid" ] && kill -0 "$(cat "$WORK/$1.pid")" 2>/dev/null; }
export -f start_daemon stop_daemon daemon_alive

cleanup() {
	for f in "$WORK"/*.pid; do
		[ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

# ---- sections ----
# section NAME KIND LIMIT FUNCTION: KIND is test (fails the run) or info.
section() {
	local name=$1 kind=$2 limit=$3 fn=$4 t0 rc left
	NAMES+=("$name")
	KINDS+=("$kind")
	t0=$(date +%s)
	left=$((DEADLINE - (t0 - START)))
	if [[ " $SKIP " == *" $name "* ]]; then
		RESULTS+=("SKIP (asked)")
		TIMES+=(0)
		return
	fi
	if [ "$left" -lt 20 ]; then
		echo "==== [$name] skipped: out of time (${left}s left)"
		RESULTS+=("SKIP (out of time)")
		TIMES+=(0)
		return
	fi
	[ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
	echo
	echo "==== [$name] $kind, limit ${limit}s, at +$((t0 - START))s ===="
	timeout -k 10 "$limit" bash -c "$fn" 2>&1 | tee "$OUT/$name.log"
	rc=${PIPESTATUS[0]}
	TIMES+=($(($(date +%s) - t0)))
	case $rc in
	0) RESULTS+=("PASS") ;;
	124 | 137) RESULTS+=("FAIL (timed out after ${limit}s)") ;;
	77) RESULTS+=("SKIP ($(tail -1 "$OUT/$name.log"))") ;;
	*) RESULTS+=("FAIL (exit $rc)") ;;
	esac
	echo "==== [$name] ${RESULTS[-1]} in ${TIMES[-1]}s"
}

env_info() {
	date -u
	uname -a
	echo "cores: $CORES"
	free -g | head -2
	nvidia-smi || echo "nvidia-smi: not found"
	nvidia-smi -q -d CLOCK,MEMORY 2>/dev/null | head -40
	ls -l /dev/nvidia* 2>&1
	(command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>&1 && /usr/local/cuda/bin/nvcc --version 2>&1 | tail -2
	python3 -c 'import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__); print("available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
	python3 -c 'import nvidia.dali as d; print("DALI", d.__version__)' 2>&1 | tail -1
	git -C "$ROOT" log --oneline -1 2>/dev/null
	return 0
}
export -f env_info

build() {
	# The benchmark's programs too: cpu-scaling's bench/run.py runs them.
	if make -j"$CORES" B="$B" all "$B/bench/jpeg_limit" "$B/bench/stoker_rtt" "$B/bench/profile_pipeline"; then
		# The kernel's fatbin is built only when nvcc and cuda.h were found.
		[ -f "$ROOT/$B/daemon/gpu/gpu_fatbin.o" ] || { echo "built without CUDA (no nvcc or cuda.h found)"; return 1; }
		return 0
	fi
	if [ -x "$ROOT/$B/stokerd" ] && [ -x "$ROOT/$B/tests/gpu_check" ]; then
		echo "make failed here: going on with the binaries already in $B (carried)"
		return 1
	fi
	return 1
}
export -f build

# Without Pillow, the tests' data set comes from tests/fault/mkjpeg (C):
# synthetic JPEGs of varied sizes, 8 classes.
mkjpeg_dataset() { # dir per_class
	local c i
	for c in $(seq 0 7); do
		mkdir -p "$1/class_$c"
		for i in $(seq 1 "$2"); do
			"$ROOT/$B/tests/mkjpeg" baseline $((96 + (i * 37 + c * 11) % 400)) $((96 + (i * 53 + c * 7) % 300)) \
				"$1/class_$c/$i.jpg" || return 1
		done
	done
}
export -f mkjpeg_dataset

dataset() {
	# Small (tests): 512 images. Large (benchmarks): 4096, ImageNet-like sizes.
	if ! python3 scripts/mkdataset.py "$WORK/small" --classes 8 --per-class 64 --jobs "$CORES" >/dev/null; then
		echo "mkdataset.py failed (Pillow missing?): synthetic JPEGs from mkjpeg instead"
		rm -rf "$WORK/small"
		mkjpeg_dataset "$WORK/small" 64 || return 1
	fi
	python3 scripts/mkdataset.py "$WORK/large" --classes 16 --per-class "${LARGE_PER_CLASS:-256}" --min-side 300 \
		--max-side 800 --quality-min 75 --quality-max 95 --jobs "$CORES" >/dev/null || return 1
	touch "$WORK/large/.bench-complete"
	python3 scripts/mkyolo.py "$WORK/yolo" --images 64 --jobs "$CORES" >/dev/null ||
		echo "mkyolo.py failed: no detection test"
	cat "$WORK"/large/*/* >/dev/null # the page cache, for every reader alike
	du -sh "$WORK/small" "$WORK/large"
}
export -f dataset

check() { # gpu_check TEST [ARGS] against the main daemon
	daemon_alive main || start_daemon main || return 1
	"$ROOT/$B/tests/gpu_check" "$WORK/main.sock" "$WORK/small" "$@"
}
export -f check

gpu_detect() {
	[ -f "$WORK/yolo/data.yaml" ] || { echo "no YOLO data set (mkyolo.py needs Pillow)"; return 77; }
	daemon_alive main || start_daemon main || return 1
	"$ROOT/$B/tests/gpu_check" "$WORK/main.sock" "$WORK/yolo/data.yaml" detect
}
export -f gpu_detect

gpu_kill() {
	check kill "$KILL_CLIENTS" || return 1
	# The daemon logged each client's end; nothing worse.
	! grep -E "stokerd: (err|crit|alert|emerg):|AddressSanitizer|runtime error" "$OUT/stokerd-main.log"
}
export -f gpu_kill

gpu_budget() {
	start_daemon budget --set gpu_memory_budget=1M || return 1
	"$ROOT/$B/tests/gpu_check" "$WORK/budget.sock" "$WORK/small" budget
	local rc=$?
	stop_daemon budget || rc=1
	return $rc
}
export -f gpu_budget

gpu_daemon_kill() {
	start_daemon victim || return 1
	"$ROOT/$B/tests/gpu_check" "$WORK/victim.sock" "$WORK/small" daemon-kill "$(cat "$WORK/victim.pid")"
	local rc=$?
	rm -f "$WORK/victim.pid"
	return $rc
}
export -f gpu_daemon_kill

torch_check() {
	python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || { echo "torch with CUDA not installed"; return 77; }
	daemon_alive main || start_daemon main || return 1
	python3 tests/gpu/torch_check.py "$WORK/main.sock" "$WORK/small"
}
export -f torch_check

gpu_arch() {
	local dump
	dump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
	[ -x "$dump" ] || { echo "no cuobjdump here"; return 77; }
	"$dump" -lptx -lelf "$ROOT/$B/daemon/gpu/gpu_convert.fatbin" || return 1
	"$dump" -lptx "$ROOT/$B/daemon/gpu/gpu_convert.fatbin" | grep -q "sm_75" || { echo "no compute_75 PTX"; return 1; }
	"$dump" -lelf "$ROOT/$B/daemon/gpu/gpu_convert.fatbin" | grep -q "sm_80" || { echo "no sm_80 code"; return 1; }
	"$dump" -lelf "$ROOT/$B/daemon/gpu/gpu_convert.fatbin" | grep -q "sm_90" || { echo "no sm_90 code"; return 1; }
}
export -f gpu_arch

gpu_with_env_daemon() { # name "VAR=value" test
	(export "$2"; start_daemon "$1") || return 1
	"$ROOT/$B/tests/gpu_check" "$WORK/$1.sock" "$WORK/small" "$3"
	local rc=$?
	grep -E "AddressSanitizer|runtime error" "$OUT/stokerd-$1.log" && rc=1
	stop_daemon "$1" || rc=1
	return $rc
}
export -f gpu_with_env_daemon

gpu_other_uid() {
	[ "$(id -u)" = 0 ] && command -v runuser >/dev/null || { echo "not root, or no runuser: no second uid to try"; return 77; }
	chmod 755 "$WORK"
	runuser -u nobody -- test -x "$ROOT/$B/tests/gpu_check" ||
		{ echo "uid nobody cannot run $B/tests/gpu_check here (a private home?)"; return 77; }
	start_daemon uid --set socket_mode=0666 || return 1
	runuser -u nobody -- env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$ROOT/$B/tests/gpu_check" "$WORK/uid.sock" \
		"$WORK/small" identity
	local rc=$?
	stop_daemon uid || rc=1
	return $rc
}
export -f gpu_other_uid

gpu_systemd() {
	[ "$(id -u)" = 0 ] && [ -d /run/systemd/system ] && command -v systemd-run >/dev/null ||
		{ echo "no systemd as PID 1 (or not root) here"; return 77; }
	local unit=stoker-gputest props=() line key
	# The unit's sandbox, then the drop-in's lines, as transient properties.
	while IFS= read -r line; do
		case $line in '' | '#'* | '['*) continue ;; esac
		key=${line%%=*}
		# Not the sandbox: how it starts, and the private /tmp ($WORK is there).
		case $key in ExecStart | ExecStartPre | ExecReload | Type | NotifyAccess | WatchdogSec | Restart | RestartSec | \
			User | Group | Description | Documentation | Requires | After | WantedBy | CacheDirectory* | \
			PrivateTmp | ProtectHome) continue ;; esac
		props+=(-p "$line")
	done < <(cat "$ROOT/deploy/stoker.service" "$ROOT/deploy/stoker-gpu.conf")
	# What the drop-in's ExecStartPre does, before the start.
	command -v nvidia-modprobe >/dev/null && nvidia-modprobe -u -c=0
	mkdir -p "$WORK/sd" && chmod 755 "$WORK" "$WORK/sd"
	systemd-run --unit "$unit" --collect "${props[@]}" -p ReadWritePaths="$WORK/sd" \
		"$ROOT/$B/stokerd" --socket "$WORK/sd/stoker.sock" --workers 2 || return 1
	for _ in $(seq 100); do [ -S "$WORK/sd/stoker.sock" ] && break; sleep 0.1; done
	"$ROOT/$B/tests/gpu_check" "$WORK/sd/stoker.sock" "$WORK/small" identity
	local rc=$?
	systemctl show "$unit" -p MemoryDenyWriteExecute -p SystemCallFilter | cut -c1-200
	journalctl -u "$unit" --no-pager | tail -20
	systemctl stop "$unit"
	return $rc
}
export -f gpu_systemd

main_daemon_clean_stop() {
	# The main daemon served every test above: it stops cleanly, with no
	# device memory left.
	daemon_alive main || { echo "the main stokerd is gone:"; tail -30 "$OUT/stokerd-main.log"; return 1; }
	"$ROOT/$B/stokerctl" --socket "$WORK/main.sock" stats --json >"$OUT/stats-main.json"
	python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("device_bytes", s["device_bytes"], "cuda", s["cuda"]); sys.exit(s["device_bytes"] != 0)' "$OUT/stats-main.json" || return 1
	stop_daemon main
}
export -f main_daemon_clean_stop

copy_bench() {
	local line
	for t in uint8 float16 float32; do
		line=$("$ROOT/$B/tests/gpu_copybench" "$t" 2) || return 1
		echo "$line" | tee -a "$OUT/copy.jsonl"
	done
}
export -f copy_bench

train_bench() {
	python3 -c 'import torch, torchvision; assert torch.cuda.is_available()' 2>/dev/null ||
		{ echo "torch/torchvision with CUDA not installed"; return 77; }
	start_daemon bench || return 1
	python3 tests/gpu/bench_gpu.py --socket "$WORK/bench.sock" --data "$WORK/large" --out "$OUT" --cores "$CORES" \
		--steps 25 --warmup 6
	local rc=$?
	"$ROOT/$B/stokerctl" --socket "$WORK/bench.sock" stats >"$OUT/stats-bench.txt" 2>&1
	stop_daemon bench
	return $rc
}
export -f train_bench

cpu_scaling() {
	python3 bench/run.py --data "$WORK/large" --cores "$CORES" --only limit,stoker,torch,dali --epochs 1 \
		--min-seconds 3 --repeat 1 --wait-quiet 0 --retries 0 --out "$OUT/cpu-scaling"
}
export -f cpu_scaling

section env info 60 env_info
section build test 240 build
section dataset info 90 dataset
# The tests need only the small set (the benchmarks the large one).
if [ -x "$ROOT/$B/tests/gpu_check" ] && [ -d "$WORK/small" ]; then
	section gpu-identity test 90 "check identity"
	section gpu-multi test 60 "check multi"
	section gpu-stats test 30 "check stats"
	section gpu-detect test 60 gpu_detect
	section gpu-nodevice test 30 "check nodevice"
	section torch-check test 90 torch_check
	section gpu-arch test 20 gpu_arch
	section gpu-close-waits test 40 "check close-waits"
	section gpu-pin-context test 40 "check pin-context"
	section gpu-context-release test 60 "check context-release"
	section gpu-killed-release test 120 "check killed-release"
	section gpu-kill test 150 gpu_kill
	section gpu-main-stop test 40 main_daemon_clean_stop
	section gpu-budget test 40 gpu_budget
	section gpu-daemon-kill test 40 gpu_daemon_kill
	section gpu-async-error test 90 "gpu_with_env_daemon fault STOKER_TEST_GPU_FAULT=illegal-address async-error"
	section gpu-release-timeout test 60 "gpu_with_env_daemon late STOKER_TEST_GPU_RELEASE_AFTER_S=3 release-timeout"
	section gpu-other-uid test 90 gpu_other_uid
	section gpu-systemd test 60 gpu_systemd
	section copy-bench info 60 copy_bench
	section train-bench info 200 train_bench
	section cpu-scaling info 150 cpu_scaling
else
	echo "no gpu_check binary or no data set: the GPU sections cannot run"
	NAMES+=("gpu-sections")
	KINDS+=(test)
	RESULTS+=("FAIL (not built)")
	TIMES+=(0)
fi

# ---- summary ----
# Outside the pipeline below: its braces run in a subshell.
failed=0
for i in "${!NAMES[@]}"; do
	[ "${KINDS[$i]}" = test ] && [[ "${RESULTS[$i]}" == FAIL* ]] && failed=1
done
{
	echo
	echo "==== summary (stoker GPU run, $(date -u), $(($(date +%s) - START))s) ===="
	printf '%-18s %-5s %6s  %s\n' SECTION KIND SECONDS RESULT
	for i in "${!NAMES[@]}"; do
		printf '%-18s %-5s %6s  %s\n' "${NAMES[$i]}" "${KINDS[$i]}" "${TIMES[$i]}" "${RESULTS[$i]}"
	done
	[ -f "$OUT/copy.jsonl" ] && { echo; echo "copy throughput:"; cat "$OUT/copy.jsonl"; }
	[ -f "$OUT/train.json" ] && { echo; echo "training loop:"; python3 -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("  %-14s %10s img/s  GPU busy %-6s of synthetic %s" % (r["feeder"], r.get("images_per_second", "-"),
          r.get("gpu_busy", "-"), r.get("of_synthetic", r.get("skipped", r.get("error", "-")))))' "$OUT/train.json"; }
	echo
	[ $failed = 0 ] && echo "GPU TESTS: PASS" || echo "GPU TESTS: FAIL"
} | tee "$OUT/summary.txt"
python3 - "$OUT/summary.json" "${#NAMES[@]}" "${NAMES[@]}" "${KINDS[@]}" "${TIMES[@]}" "${RESULTS[@]}" <<'PY'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
v = sys.argv[3:]
rows = [dict(section=v[i], kind=v[n + i], seconds=int(v[2 * n + i]), result=v[3 * n + i]) for i in range(n)]
json.dump(rows, open(out, "w"), indent=1)
PY
exit $failed
