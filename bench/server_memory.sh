#!/usr/bin/env bash
# Resident memory of the dev server with N floating IPs allocated (default 1,000,000), and the
# latency of allocating more over HTTP at that size.
#
#   bench/server_memory.sh [N]
#
# Builds the release preset, starts the server once to bootstrap a fresh data directory, fills
# it with bench_populate while it is stopped, restarts it, allocates 200 more floating IPs over
# HTTP, and prints VmRSS/VmHWM from /proc.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target floatplane bench_populate >/dev/null
dir=$(mktemp -d /tmp/floatplane-mem-XXXXXX)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT

start_server() {
  build/release/floatplane server --dev --data-dir "$dir" --listen 127.0.0.1:0 \
    >"$dir/stdout" 2>"$dir/stderr" &
  pid=$!
  for _ in $(seq 100); do grep -q listening "$dir/stdout" 2>/dev/null && break; sleep 0.1; done
  base=$(sed -n 's/^listening on //p' "$dir/stdout")
}

start_server
kill -TERM $pid; wait $pid
build/release/bench_populate "$dir" "$n"
start_server
token=$(cat "$dir/admin-token")
for i in $(seq 200); do
  curl -sf -o /dev/null -H "Authorization: Bearer $token" -X POST \
    "$base/v1/floating-ips?project=bench" \
    -d "{\"name\":\"extra-$i\",\"description\":\"\",\"address_allocator\":{\"type\":\"auto\",\"pool_selector\":{\"type\":\"explicit\",\"pool\":\"bench-pool\"}}}"
done
echo "allocated: $n + 200 floating IPs"
# Server-side latency from the request log (curl's own process start-up would dominate a
# client-side timing of one request per curl).
grep '"path":"/v1/floating-ips"' "$dir/stderr" | grep '"status":201' |
  sed -n 's/.*"latency_ms":\([0-9.]*\).*/\1/p' | sort -n |
  awk '{v[NR]=$1; s+=$1} END {printf "floating IP create over HTTP (server-side, %d requests): mean %.2f ms, p50 %.2f ms, p99 %.2f ms\n", NR, s/NR, v[int(NR*0.5)], v[int(NR*0.99)]}'
grep -E 'VmRSS|VmHWM' /proc/$pid/status
curl -sf -H "Authorization: Bearer $token" "$base/v1/system/ip-pools/bench-pool/utilization"; echo
