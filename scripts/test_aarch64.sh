#!/usr/bin/env bash
# The aarch64 row: anelua cross-built for Linux aarch64 (the instruction set of Apple silicon)
# with Debian's gcc-aarch64-linux-gnu against arm64 multiarch libraries, and its tests run
# under qemu-user: the C tests, the double's own test (its objc_msgSend is
# spec/ane_double/msgsend_aarch64.S), and the `ane/*`, `device/*` and `probe/*` rows, every
# spec through the device code path against the double, by default.
#
#   scripts/test_aarch64.sh [--build-dir DIR] [--tests REGEX] [--exclude REGEX] [--no-install] [-j N]
#
# --tests REGEX   the ctest rows to run (default: the C tests and the device rows)
# --exclude REGEX the rows among them not to run (default: the slowest six, see below)
# --no-install    do not install the cross toolchain and arm64 libraries (they must be there)
# What it installs (Debian, as root or through sudo): the arm64 architecture in dpkg,
# gcc-aarch64-linux-gnu, qemu-user and the arm64 -dev packages anelua links. The Lua C modules
# busted and the specs load (term, system, lfs, cjson) are unpacked from their arm64 packages
# into the build directory instead (apt-get download): lua-term is not co-installable for two
# architectures, and installing it for arm64 would remove the host's busted.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-aarch64
tests='^(c/|ane/|device/|probe/|cpu-[^/]*/test_)'
# Left out by default for time (measured under qemu-user on 2 cores: 67 to 370 s each, 23 of
# the 34 CPU minutes the rows take): the specs that train, convert or run the host at length.
# What they reach on arm64 is the same code the kept rows reach (the C tests check every
# kernel against its scalar reference); run them with --exclude ''.
exclude='^(ane/(train|llama_formats|regressions|plot)_spec|device/donor-stale.*)$'
install=1
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --exclude) exclude=$2; shift 2 ;;
    --no-install) install=0; shift ;;
    -j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test_aarch64.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
step() { echo "==> $*"; }

cross_packages=(gcc-aarch64-linux-gnu qemu-user libc6-dev:arm64 liblua5.4-dev:arm64 libopenblas-dev:arm64
                libpcre2-dev:arm64 libutf8proc-dev:arm64 libreadline-dev:arm64 libmicrohttpd-dev:arm64)
lua_module_packages=(lua-term:arm64 lua-system:arm64 lua-filesystem:arm64 lua-cjson:arm64)

if [ "$install" = 1 ]; then
  command -v apt-get >/dev/null || { echo "test_aarch64.sh needs Debian's apt-get (or --no-install with the toolchain in place)" >&2; exit 1; }
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  missing=()
  for package in "${cross_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
    $sudo apt-get update -qq
    # no recommends: liblua5.4-dev:arm64 recommends arm64 builds of pkgconf and libtool-bin,
    # which would replace the host's
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

lua_modules="$build/lua-arm64"
lua_cpath="$lua_modules/usr/lib/aarch64-linux-gnu/lua/5.4"
if [ ! -d "$lua_cpath" ]; then
  step "unpacking the arm64 Lua modules busted and the specs load: ${lua_module_packages[*]}"
  mkdir -p "$build/lua-arm64-debs"
  (cd "$build/lua-arm64-debs" && apt-get download "${lua_module_packages[@]}" >/dev/null 2>&1) ||
    { echo "apt-get download ${lua_module_packages[*]} failed (is the arm64 architecture added to dpkg?)" >&2; exit 1; }
  for deb in "$build"/lua-arm64-debs/*.deb; do dpkg-deb -x "$deb" "$lua_modules"; done
fi

step "configuring and building for aarch64 in $build"
cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DANELUA_TEST_LUA_CPATH="$lua_cpath" >/dev/null
cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || { cat "$build/build.log" >&2; exit 1; }
readelf -h "$build/anelua" | grep -q "AArch64" || { echo "$build/anelua is not an aarch64 program" >&2; exit 1; }

step "running the rows matching $tests under qemu-aarch64"
started=$(date +%s)
ctest --test-dir "$build" --output-on-failure -j "$jobs" -R "$tests" ${exclude:+-E "$exclude"}
echo "aarch64 row: $(( $(date +%s) - started )) s under qemu-user"
