#!/usr/bin/env bash
# Drives the REPL (a real terminal, through script(1)) with N lines that each build, compile,
# evaluate and close a program whose weights differ every time, then reports the process's
# RSS and the runtime's counters at the start, after a fifth of the lines and at the end, and the
# length of the history file: a leak shows as RSS or cached programs growing with the lines. Used for docs/reliability.md.
#   scripts/repl_cycles.sh [N=10000] [backend=sim]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-10000}
backend=${2:-sim}
lines=$(mktemp)
rss='(function() for l in io.lines("/proc/self/status") do local kb = l:match("^VmRSS:%s+(%d+)") if kb then return tonumber(kb) // 1024 end end end)()'
report="print(string.format('cycles %d rss_mb %d lua_kb %d cached %d compiles %d', i, $rss, collectgarbage('count') // 1, ane.stats().cached_programs or -1, ane.stats().compiles))"
{
  echo "i = 0"
  echo "$report"
  for k in $(seq 1 "$n"); do
    echo "i = $k; do local g = ane.graph('cycle'); local x = g:input('x', {1, 16, 1, 32}); g:output('y', g:relu(g:conv(x, g:const('w', ane.tensor({16, 16, 1, 1}, 'fp16'):fill(i / 16384))))); local p = ane.compile(g); p:eval{x = ane.tensor({1, 16, 1, 32}, 'fp16'):fill(1)}; p:close() end"
    if [ "$k" -eq $((n / 5)) ] || [ "$k" -eq "$n" ]; then echo "collectgarbage(); $report"; fi
  done
  echo "os.exit(0)"
} > "$lines"
log=$(mktemp)
home=$(mktemp -d)
ANELUA_COMPILE_BUDGET=1000000 HOME=$home script -q -c "'$root/build/anelua' --backend $backend" "$log" < "$lines" > /dev/null
reports=$(grep -a "cycles [0-9]" "$log" | sed 's/.*\(cycles [0-9]\)/\1/' | tr -d '\r' || true)
[ -n "$reports" ] && echo "$reports"
count=$(printf '%s' "$reports" | grep -c "cycles" || true)
if [ "$count" -lt 3 ]; then
  # a short run: what the terminal showed last says whether the REPL stopped, failed or was cut off
  echo "only $count of 3 report lines; the terminal's last 2,000 bytes:" >&2
  tail -c 2000 "$log" | tr -d '\r' >&2
fi
[ -n "${KEEP_LOG:-}" ] && cp "$log" "$KEEP_LOG"
echo "history_lines $(cat "$home/.anelua_history" 2>/dev/null | wc -l)"
rm -rf "$lines" "$log" "$home"
