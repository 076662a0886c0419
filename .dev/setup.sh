# Sourced by .dev/serve and .dev/test: install what they need, once.
#
# Each step checks first and does nothing when its part is in place, so a checkout
# that is set up starts at once, and offline. Bash; stops at the first failure.
#
#   debian_packages PKG...  apt-get install the packages dpkg does not list as installed
#                           (as root, or through sudo); elsewhere, say what to install
#   can_install_packages    true when debian_packages can install (root, or sudo)
#   venv [EXTRAS]           .venv with this checkout installed (editable, with EXTRAS:
#                           default dev, the tests' and tools'; .dev/serve asks for
#                           server,container only) at the locked versions of
#                           .dev/constraints.txt, created or brought up to date when
#                           pyproject.toml, setup.py or the constraints changed since
#                           the last install; a venv with the dev extra has every
#                           other one
#   node_packages           tests/node/node_modules (the `ai` npm package the AI SDK
#                           stream is tested with) from its package-lock.json, with
#                           `npm ci`, when missing or older than the lock file; npm
#                           itself from Debian's npm package when missing
#   acp_agents              the five ACP agents (`sandstream agents install`: pinned npm
#                           packages in ~/.cache/sandstream/agents, or $SANDSTREAM_AGENTS_DIR;
#                           a no-op once installed, offline once npm's cache has them;
#                           and the agents' shield, built with cc); needs venv first

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

debian_packages() {
  local missing=() package
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "setup: not a Debian system; make sure these are installed: $*" >&2
    return 0
  fi
  for package in "$@"; do
    dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null | grep -qx installed ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "setup: needs root to run: apt-get install ${missing[*]}" >&2
      return 1
    }
    as_root=(sudo)
  fi
  echo "setup: installing ${missing[*]} (apt-get)" >&2
  "${as_root[@]}" apt-get update -q
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

can_install_packages() {
  [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1
}

venv() {
  local extras=${1:-dev} stamp="$root/.venv/.installed" want have
  if ! "$root/.venv/bin/python" -c '' 2>/dev/null; then
    python3 -c 'import ensurepip' 2>/dev/null || debian_packages python3-venv
    echo "setup: creating .venv" >&2
    rm -rf "$root/.venv"
    python3 -m venv "$root/.venv"
  fi
  want="$(cat "$root/pyproject.toml" "$root/setup.py" "$root/.dev/constraints.txt" |
    sha256sum | cut -d' ' -f1) $("$root/.venv/bin/python" -V)"
  have=$(cat "$stamp" 2>/dev/null || true)
  if [ "$have" = "$want [$extras]" ] || [ "$have" = "$want [dev]" ]; then
    return 0
  fi
  echo "setup: installing this checkout into .venv (pip install -c .dev/constraints.txt" \
    "-e '.[$extras]')" >&2
  "$root/.venv/bin/pip" install -q -c "$root/.dev/constraints.txt" -e "$root[$extras]"
  echo "$want [$extras]" >"$stamp"
}

node_packages() {
  local dir="$root/tests/node"
  command -v npm >/dev/null 2>&1 || debian_packages npm
  if [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    return 0
  fi
  echo "setup: installing the npm packages of tests/node (npm ci)" >&2
  npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
}

acp_agents() {
  command -v npm >/dev/null 2>&1 || debian_packages npm
  command -v cc >/dev/null 2>&1 || debian_packages gcc libc6-dev  # the agents' shield
  "$root/.venv/bin/sandstream" agents install >/dev/null
}
