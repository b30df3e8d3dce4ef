#!/usr/bin/env bash
# Installs anelua's dependencies, then configures and builds it. Idempotent: packages
# already present are skipped and the build is incremental. Prints each step it takes.
#
#   scripts/setup.sh [build-dir]        (default: build; CMAKE_BUILD_TYPE=Debug to debug)
#
# Debian/Ubuntu: apt-get (as root, or through sudo). macOS: Homebrew.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}

step() { printf '==> %s\n' "$*"; }

debian_packages=(build-essential cmake pkg-config lua5.4 liblua5.4-dev lua-filesystem lua-cjson lua-busted
                 libopenblas-dev libpcre2-dev libutf8proc-dev libreadline-dev libmicrohttpd-dev
                 curl python3) # curl: scripts/get_models.sh; python3: the stand-in hub its spec serves on 127.0.0.1
# Homebrew's `lua` is 5.5 now: lua@5.4 (keg-only; CMakeLists.txt finds it and readline's keg
# through brew --prefix), and luarocks pointed at it with --lua-dir.
brew_packages=(cmake pkg-config lua@5.4 luarocks pcre2 utf8proc readline libmicrohttpd)

install_debian() {
  local missing=()
  for package in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    step "Debian packages: all ${#debian_packages[@]} present"
    return
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  step "Debian packages: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

install_macos() {
  command -v brew >/dev/null || { echo "Homebrew is needed: https://brew.sh" >&2; exit 1; }
  step "Homebrew packages: ${brew_packages[*]}"
  brew install --quiet "${brew_packages[@]}"
  local lua_dir
  lua_dir=$(brew --prefix lua@5.4)
  for rock in luafilesystem lua-cjson busted; do
    luarocks --lua-dir="$lua_dir" show "$rock" >/dev/null 2>&1 || luarocks --lua-dir="$lua_dir" install "$rock"
  done
  step "Lua rocks for $lua_dir; if a script cannot find lfs or cjson: eval \"\$(luarocks --lua-dir=$lua_dir path)\""
}

case "$(uname -s)" in
  Linux)
    if command -v apt-get >/dev/null; then install_debian
    else echo "setup.sh knows apt-get (Debian/Ubuntu) and Homebrew (macOS); install the packages by hand:" \
              "${debian_packages[*]}" >&2; exit 1
    fi ;;
  Darwin) install_macos ;;
  *) echo "unsupported system $(uname -s)" >&2; exit 1 ;;
esac

# The official OpenAI client for `anelua serve`'s tests (spec/openai: its version pinned in
# package-lock.json); npm only for that test oracle.
if command -v npm >/dev/null; then
  if [ -f "$root/spec/openai/node_modules/openai/package.json" ]; then
    step "npm: the openai client for the serve tests is present"
  else
    step "npm: installing the openai client for the serve tests (spec/openai, pinned)"
    npm ci --prefix "$root/spec/openai" --no-audit --no-fund --loglevel=error
  fi
else
  step "npm is not installed: spec/serve_spec.lua's OpenAI-client test needs Node.js and npm"
fi

step "Configuring ($build, ${CMAKE_BUILD_TYPE:-Release})"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" >/dev/null
step "Building"
log="$build/build.log"
if ! cmake --build "$build" -j "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)" >"$log" 2>&1; then
  cat "$log" >&2
  echo "build failed (log: $log)" >&2
  exit 1
fi
grep -E "warning|error" "$log" || true
step "Done: $build/anelua"
