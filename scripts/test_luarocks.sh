#!/usr/bin/env bash
# The luarocks row: anelua built and installed as a rock (anelua-0.1.0-1.rockspec) into a fresh
# tree, then used as a LuaRocks user would: the tree's `anelua` host runs a model and an example
# from the rock, stock lua5.4 loads the module through `luarocks path`, and the checkout is left
# as it was. Dependencies come from Debian (lua-filesystem, lua-cjson: --deps-mode none; this
# machine has no luarocks.org).
#   scripts/test_luarocks.sh [--tree DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
tree=$(mktemp -d)/rocktree
while [ $# -gt 0 ]; do
  case "$1" in
    --tree) tree=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test_luarocks.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
fail() { echo "luarocks row: $*" >&2; exit 1; }
command -v luarocks >/dev/null || {
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends luarocks >/dev/null
}
before=$(git status --porcelain)
luarocks --lua-version 5.4 --tree "$tree" make --deps-mode none anelua-0.1.0-1.rockspec >"$tree.log" 2>&1 ||
  { cat "$tree.log" >&2; fail "luarocks make failed"; }
[ "$(git status --porcelain)" = "$before" ] || fail "the build left files in the checkout: $(git status --porcelain)"
rock=$(ls -d "$tree"/lib/luarocks/rocks-5.4/anelua/*)
out=$("$tree/bin/anelua" run spec/data/reference/qwen3-tiny --prompt Hello --max-tokens 3 --temperature 0 2>/dev/null)
case "$out" in Hello*) ;; *) fail "the rock's anelua run printed '$out'" ;; esac
eval "$(luarocks --lua-version 5.4 --tree "$tree" path)"
loaded=$(cd / && lua5.4 -e 'local ane = require("ane"); print(tostring(require("ane.models") ~= nil) .. " " .. ane.data_dir())')
[ "$loaded" = "true $rock/share/anelua/data" ] || fail "lua5.4 loaded: $loaded"
"$tree/bin/anelua" "$rock/share/anelua/examples/gpt2.lua" --max-tokens 2 >/dev/null 2>"$tree.example.log" ||
  { cat "$tree.example.log" >&2; fail "the rock's examples/gpt2.lua failed"; }
grep -q "$rock/share/anelua/scripts/get_models.sh gpt2" "$tree.example.log" || fail "gpt2.lua did not name the rock's get_models.sh"
echo "luarocks row: built, installed in $tree, host, module, model and example run; checkout clean"
