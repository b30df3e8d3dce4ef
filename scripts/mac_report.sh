#!/usr/bin/env bash
# One file to send back from a Mac's first run: the system and Homebrew versions, the
# configure and build output, the bind report (every message's expected and live type
# encoding), ane.capabilities(), a short decode on the device and the whole probe report.
# Every step runs even when an earlier one failed; the file says what each returned.
#
#   scripts/mac_report.sh [--out FILE] [--build-dir DIR] [--no-build]
#
# --no-build reuses DIR as it is (default: build-mac-report, configured and built afresh).
# Elsewhere than macOS it runs too, against ANELUA_ANE_FRAMEWORK (the test double), which
# is how CI checks it.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/anelua-mac-report.txt"
build="$root/build-mac-report"
do_build=1
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "mac_report.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$out" || { echo "mac_report.sh: cannot write $out" >&2; exit 1; }

# section TITLE COMMAND...: the command's output and exit status under a heading
section() {
  local title=$1; shift
  printf '\n===== %s\n$ %s\n' "$title" "$*" >>"$out"
  "$@" >>"$out" 2>&1
  printf -- '----- exit status %d\n' "$?" >>"$out"
  printf '%s\n' "$title" >&2
}

export NSZombieEnabled=YES OBJC_DEBUG_MISSING_POOLS=YES # misuse a Mac would otherwise hide
section "system" uname -a
if [ "$(uname -s)" = Darwin ]; then
  section "macOS" sw_vers
  section "chip" sysctl -n machdep.cpu.brand_string hw.model
  section "Homebrew kegs" bash -c 'for k in lua@5.4 readline luarocks pcre2 utf8proc cmake; do
    printf "%s %s %s\n" "$k" "$(brew list --versions "$k" 2>&1)" "$(brew --prefix "$k" 2>&1)"; done'
  section "Xcode command line tools" bash -c 'xcode-select -p; cc --version'
fi
section "git" git -C "$root" log -1 --format='%H %s'
if [ "$do_build" = 1 ]; then
  section "configure" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
  section "build" cmake --build "$build" -j 4
fi
host="$build/anelua"
section "bind report and capabilities" "$host" -e '
  local ane = require("ane")
  print("ane backend: " .. tostring(ane.backends().ane))
  local caps = ane.capabilities()
  local keys = {}
  for k in pairs(caps) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do if k ~= "encodings" then print(k, tostring(caps[k])) end end
  for _, line in ipairs(caps.encodings or {}) do print(line) end'
section "decode on the device" "$host" --backend ane "$root/examples/gpt2.lua" --max-tokens 8
section "probes" "$host" --backend ane --probe all --report "$work/probe"
for file in "$work/probe.md" "$work/probe.json"; do
  [ -f "$file" ] && section "$(basename "$file")" cat "$file"
done
section "statistics after the run" "$host" --backend ane -e 'local ane = require("ane")
  local g = ane.graph("report_check"); local x = g:input("x", { 1, 64, 1, 32 })
  g:output("y", g:relu(g:conv(x, g:const("w", ane.tensor.randn({ 64, 64, 1, 1 }, { seed = 1, dtype = "fp16", std = 0.1 })))))
  local p = ane.compile(g); p:eval({ x = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 2 }) })
  for k, v in pairs(ane.stats().device or {}) do print(k, tostring(v)) end'
echo "mac_report.sh: wrote $out; please send it back (it holds no personal data beyond uname and the chip)" >&2
