#!/usr/bin/env bash
# Tests scripts/lab, which the dataplane tests stand on: two labs up at once under their own
# prefixes, each with an IPv6 underlay that carries jumbo frames from the switch to every sled,
# the external network reaching the switch and the pools routed to it (an address nothing
# claims answered "unreachable" by the switch); a second `up` of a lab refused; one lab's
# `down` leaving the other working; the root namespace's addresses, routes and rules the same
# after as before; exit 77 without root. Exit 77 (skip) where labs cannot run.
set -euo pipefail
cd "$(dirname "$0")/../.."
lab=scripts/lab

fail() { echo "FAIL: $*" >&2; exit 1; }

set +e
$lab status >/dev/null 2>&1
code=$?
set -e
[ $code -eq 77 ] && { echo "skipped: labs need root and network namespaces"; exit 77; }

# The root namespace's own state (other tests' namespaces may come and go meanwhile).
root_state() { ip -br addr; ip route; ip -6 route; ip rule; ip -6 rule; }
before=$(root_state)

a=fplta$$
b=fpltb$$
cleanup() { $lab down --prefix "$a" >/dev/null 2>&1 || true; $lab down --prefix "$b" >/dev/null 2>&1 || true; }
trap cleanup EXIT

[ "$($lab up --prefix "$a")" = "$a" ] || fail "up did not print its prefix"
$lab up --prefix "$b" --sleds 3 >/dev/null

works() {
  local prefix=$1 sleds=$2 unreachable=${3:-} i
  eval "$($lab env --prefix "$prefix")"
  [ "$LAB_NS_SWITCH" = "$prefix-sw" ] || fail "env of $prefix: switch namespace '$LAB_NS_SWITCH'"
  for ((i = 0; i < sleds; i++)); do
    local underlay_var="LAB_SLED${i}_UNDERLAY"
    # Jumbo frames, not fragmented: the VXLAN the agents add must never need fragmenting.
    ip netns exec "$LAB_NS_SWITCH" ping -6 -c 1 -W 2 -M do -s 8900 "${!underlay_var}" >/dev/null ||
      fail "$prefix: switch cannot reach sled $i at ${!underlay_var} with 8900-byte packets"
    ip netns exec "$prefix-sled$i" ping -6 -c 1 -W 2 "$LAB_SWITCH_UNDERLAY" >/dev/null ||
      fail "$prefix: sled $i cannot reach the switch's underlay address"
  done
  ip netns exec "$LAB_NS_EXT" ping -c 1 -W 2 192.0.2.1 >/dev/null ||
    fail "$prefix: the external network cannot reach the switch"
  ip netns exec "$LAB_NS_EXT" ping -6 -c 1 -W 2 2001:db8:e::1 >/dev/null ||
    fail "$prefix: the external network cannot reach the switch over IPv6"
  # Once per lab: the kernel rate-limits the ICMP errors it sends to one peer.
  [ -n "$unreachable" ] || return 0
  local out
  out=$(ip netns exec "$LAB_NS_EXT" ping -c 1 -W 2 203.0.113.77 2>&1 || true)
  [[ "$out" == *"Unreachable"* ]] || fail "$prefix: an unclaimed pool address was not answered unreachable: $out"
  out=$(ip netns exec "$LAB_NS_EXT" ping -6 -c 1 -W 2 2001:db8:f100::77 2>&1 || true)
  [[ "$out" == *"unreachable"* || "$out" == *"Unreachable"* ]] ||
    fail "$prefix: an unclaimed IPv6 pool address was not answered unreachable: $out"
}
works "$a" 2 unreachable
works "$b" 3 unreachable
[ "$(ip netns list | grep -c "^$b-sled")" -eq 3 ] || fail "--sleds 3 did not make 3 sleds"

set +e
err=$($lab up --prefix "$a" 2>&1 >/dev/null)
code=$?
set -e
[ $code -eq 1 ] || fail "a second up of $a exited $code"
[[ "$err" == *"lab $a is up"* ]] || fail "a second up of $a said: $err"
works "$a" 2

set +e
err=$($lab up --prefix "Bad-Prefix" 2>&1 >/dev/null)
code=$?
set -e
[ $code -eq 1 ] && [[ "$err" == *"--prefix must be"* ]] || fail "a bad prefix: exit $code, '$err'"
ip netns list | grep -q "^Bad-Prefix" && fail "a refused up left namespaces"

$lab down --prefix "$a"
ip netns list | grep -q "^$a-" && fail "down left namespaces of $a"
$lab status --prefix "$a" >/dev/null 2>&1 && fail "status of a lab that is down succeeded"
works "$b" 3
$lab status --prefix "$b" | grep -q "$b-sw" || fail "status of $b does not list its switch"

set +e
err=$($lab down 2>&1)
code=$?
set -e
[ $code -eq 1 ] && [[ "$err" == *"--prefix P, or --all"* ]] || fail "down without a lab: exit $code, '$err'"
set +e
err=$($lab down --prefix '.*' 2>&1)
code=$?
set -e
[ $code -eq 1 ] && [[ "$err" == *"--prefix must be"* ]] || fail "down --prefix '.*': exit $code, '$err'"
works "$b" 3

$lab down --prefix "$b"
after=$(root_state)
[ "$before" = "$after" ] || fail "the root namespace changed: $(diff <(echo "$before") <(echo "$after"))"

# Without root: skipped (77), never half-built.
if command -v setpriv >/dev/null; then
  set +e
  setpriv --reuid=65534 --regid=65534 --clear-groups $lab up --prefix fpltc$$ >/dev/null 2>&1
  code=$?
  set -e
  [ $code -eq 77 ] || fail "up without root exited $code, not 77"
fi
echo "lab: all checks passed"
