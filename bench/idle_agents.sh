#!/usr/bin/env bash
# Idle cost of a local simulated cluster: starts examples/clusters/local.yaml (16 agents, the head, and a TPU
# simulator per simulated TPU host standing in for libtpu's metrics service), lets it settle, then measures each
# process's CPU (% of one core, from /proc/<pid>/stat) and resident memory over a window; sums per role.
#   bench/idle_agents.sh [SECONDS]      (default 20; needs build/bin from scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
window="${1:-20}"
export TORUS_TEMP_DIR="$(mktemp -d /tmp/torus_bench_idle.XXXXXX)"
trap 'build/bin/torus down >/dev/null 2>&1 || true; rm -rf "$TORUS_TEMP_DIR"' EXIT
build/bin/torus up examples/clusters/local.yaml --port 0 --dashboard-port 0 >/dev/null
session="$(readlink -f "$TORUS_TEMP_DIR/session_latest")"
sleep 3
hz="$(getconf CLK_TCK)"
declare -A before
while read -r role name pid; do before[$pid]=$(awk '{print $14+$15}' /proc/$pid/stat); done < "$session/processes"
sleep "$window"
printf '%-10s %-12s %10s %10s\n' role name "cpu_%" "rss_MB"
agent_total=0; agent_max=0; agents=0
declare -A role_cpu role_count
all_total=0
while read -r role name pid; do
  after=$(awk '{print $14+$15}' /proc/$pid/stat)
  cpu=$(awk -v d=$((after - ${before[$pid]})) -v hz="$hz" -v w="$window" 'BEGIN{printf "%.3f", 100*d/hz/w}')
  rss=$(awk '/VmRSS/{printf "%.1f", $2/1024}' /proc/$pid/status)
  printf '%-10s %-12s %10s %10s\n' "$role" "$name" "$cpu" "$rss"
  role_cpu[$role]=$(awk -v a="${role_cpu[$role]:-0}" -v b="$cpu" 'BEGIN{print a+b}')
  role_count[$role]=$(( ${role_count[$role]:-0} + 1 ))
  all_total=$(awk -v a="$all_total" -v b="$cpu" 'BEGIN{print a+b}')
  if [ "$role" = node ]; then
    agents=$((agents + 1))
    agent_total=$(awk -v a="$agent_total" -v b="$cpu" 'BEGIN{print a+b}')
    agent_max=$(awk -v a="$agent_max" -v b="$cpu" 'BEGIN{print (b>a)?b:a}')
  fi
done < "$session/processes"
printf '\n%d agents: mean %.3f%% of a core, max %.3f%%, all agents together %.3f%%\n' "$agents" \
  "$(awk -v t="$agent_total" -v n="$agents" 'BEGIN{print t/n}')" "$agent_max" "$agent_total"
for role in "${!role_cpu[@]}"; do
  printf '%-5s x%-3d together %.3f%% of a core\n' "$role" "${role_count[$role]}" "${role_cpu[$role]}"
done
printf 'the whole cluster: %.3f%% of a core\n' "$all_total"
