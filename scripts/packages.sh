# Sourced by the scripts in this folder: installs the Debian 12 packages floatplane needs to
# build, run and test, if any are missing.

FLOATPLANE_PACKAGES=(
  cmake g++ make ninja-build  # every preset builds with Ninja (scripts/configure)
  clang-14 libclang-rt-14-dev lld-14  # the sanitizer build (its runtime is only recommended)
  libboost1.81-dev libboost-url1.81-dev libexpected-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libssl-dev libsqlite3-dev libpq-dev
  libargon2-dev  # local users' passwords (Argon2id)
  postgresql postgresql-client  # the engine's tests start a throwaway PostgreSQL 15 cluster
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pytest python3-jsonschema
  python3-psycopg2  # the PostgreSQL e2e run creates and drops its databases on one kept connection
  python3-pytest-xdist  # the end-to-end suites run on four workers (-n 4): most of a test is waiting
  iproute2 iputils-ping  # scripts/lab: the dataplane's network namespaces
  pkg-config libnftables-dev nftables  # the Linux agents' NAT tables (nft: for looking at them by hand)
  libnetfilter-conntrack-dev conntrack  # the sled's flush of a removed address's flows (conntrack: by hand)
  libcurl4-openssl-dev libtomlplusplus-dev  # the command-line client: HTTP(S), credentials.toml
  openssl  # the e2e tests' own certificate authority (HTTPS)
  clang-format curl git bsdutils  # bsdutils: script(1), the CLI tests' terminal
  chromium  # the web console's browser tests (Playwright drives Debian's chromium)
)

ensure_packages() {
  local missing=()
  local pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "floatplane: installing missing Debian packages: ${missing[*]}" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "floatplane: need root or sudo to install ${missing[*]}" >&2; return 1; }
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}
