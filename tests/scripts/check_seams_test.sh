#!/usr/bin/env bash
# Tests scripts/check-seams on a small tree of its own: a part that reads the standard clock,
# sleeps, waits on a condition variable with a timeout or draws its own ids is named with the
# seam to use; the same code in common/, cmd/, main.cc, a unit test or a testing/ folder, or
# in a comment, passes; and this checkout's src/ passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
check=scripts/check-seams
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$tree"/{app/testing,common,cmd,db}
bad='auto t = std::chrono::steady_clock::now();'
for f in common/clock.cc cmd/server.cc main.cc app/x_test.cc app/testing/world.h; do
  echo "$bad" >"$tree/$f"
done
echo "// std::this_thread::sleep_for is not used here" >"$tree/app/ok.cc"
$check "$tree" >/dev/null || fail "exempt files and comments were flagged: $($check "$tree")"

declare -A seam=(
  ["auto t = std::chrono::steady_clock::now();"]="Clock::Monotonic/Now"
  ["auto w = std::chrono::system_clock::now();"]="Clock::Monotonic/Now"
  ["std::this_thread::sleep_for(d);"]="Clock::SleepFor"
  ["cv.wait_for(lock, 10ms);"]="Clock::WaitUntil/WaitFor"
  ["cv->wait_until(lock, t);"]="Clock::WaitUntil/WaitFor"
  ["sleep(1);"]="Clock::SleepFor"
  ["std::random_device rd;"]="Random"
  ["RAND_bytes(buf, 32);"]="Random"
  ["Uuid id = Uuid::Random();"]="Random::NewUuid"
  ["Uuid id = Uuid::TimeOrdered();"]="Random::NewUuid/NewTimeOrderedUuid"
)
for code in "${!seam[@]}"; do
  echo "$code" >"$tree/db/bad.cc"
  if out=$($check "$tree"); then fail "not flagged: $code"; fi
  grep -qF "src/db/bad.cc:1: use the injected ${seam[$code]}" <<<"$out" || fail "for '$code': $out"
done
rm "$tree/db/bad.cc"

$check >/dev/null || fail "this checkout's src/ breaks the rule: $($check)"
echo "check-seams: ok"
