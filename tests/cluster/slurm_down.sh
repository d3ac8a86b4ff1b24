#!/bin/bash
# slurm_down.sh [--graceful] [--rm] [DIR] -- stop a cluster started by slurm_up.sh.
# DIR defaults to $SLURM_LAB_DIR.
#   --graceful : scancel all jobs first and wait for them to finish (SIGTERM,
#                then SIGKILL after KillWait); default is to SIGKILL leftovers.
#   --rm       : delete DIR afterwards.
# Only processes belonging to this instance are touched (see mine()).
# Exit status 0 = nothing left.
set -uo pipefail
GRACEFUL=0; RM=0; D=
for a in "$@"; do
  case $a in
    --graceful) GRACEFUL=1 ;;
    --rm) RM=1 ;;
    *) D=$a ;;
  esac
done
D=${D:-${SLURM_LAB_DIR:-}}
log() { echo "slurm-down: $*" >&2; }
[ -n "$D" ] && [ -f "$D/slurm.conf" ] || { log "no cluster dir (arg or \$SLURM_LAB_DIR)"; exit 2; }
export SLURM_CONF=$D/slurm.conf

# pids of this instance (never ourselves or our ancestors):
#  - slurmctld/slurmd/slurmstepd whose cwd is inside DIR (daemons chdir to the
#    log dir; slurmstepd rewrites its /proc/PID/environ via setproctitle, so
#    the environment cannot be used to recognise it)
#  - all descendants of those (job processes)
#  - orphaned job processes: environ has SLURM_CONF=DIR/slurm.conf + SLURM_JOB_ID
mine() {
  local skip=${1:-} p q roots="" anc=" $$ " table
  table=$(ps -e -o pid=,ppid=,comm=)
  q=$$
  while [ "$q" -gt 1 ] 2>/dev/null; do
    q=$(awk -v p="$q" '$1==p {print $2}' <<<"$table"); [ -n "$q" ] || break; anc+="$q "
  done
  for p in $(awk '$3 ~ /^(slurmctld|slurmd|slurmstepd)/ {print $1}' <<<"$table"); do
    case $(readlink "/proc/$p/cwd" 2>/dev/null)/ in "$D"/*) roots+="$p " ;; esac
  done
  {
    [ -n "$roots" ] && awk -v r="$roots" '
      { par[$1]=$2 }
      END { n=split(r,a," "); for(i=1;i<=n;i++) m[a[i]]=1
            do { ch=0; for (c in par) if (!(c in m) && (par[c] in m)) { m[c]=1; ch=1 } } while (ch)
            for (c in m) print c }' <<<"$table"
    grep -lzxF "SLURM_CONF=$D/slurm.conf" /proc/[0-9]*/environ 2>/dev/null |
      xargs -r grep -lz '^SLURM_JOB_ID=' 2>/dev/null | cut -d/ -f3
  } | sort -un | while read -r p; do
    case $anc in *" $p "*) continue ;; esac
    [ "$p" = "$skip" ] && continue
    [ -d "/proc/$p" ] && echo "$p"
  done
}

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
wait_gone() {   # wait_gone SECONDS PID...
  local n=$(( $1 * 10 )); shift
  while [ $n -gt 0 ]; do
    local any=0; for p in "$@"; do alive "$p" && any=1; done
    [ $any = 0 ] && return 0; sleep 0.1; n=$((n - 1))
  done
  return 1
}

# pid from a pidfile, only if that process still has the expected name
# (guards against pid reuse when DIR is stale)
pidof_file() {
  local p; p=$(head -1 "$1" 2>/dev/null) || return 0
  [ -n "$p" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = "$2" ] && echo "$p"
  return 0
}
CTLD=$(pidof_file "$D/run/slurmctld.pid" slurmctld)
SLURMD=$(pidof_file "$(ls "$D"/run/slurmd-*.pid 2>/dev/null | head -1)" slurmd)
MUNGED=$(pidof_file "$D/munge/munged.pid" munged)

if [ $GRACEFUL = 1 ] && alive "$CTLD"; then
  KW=$(awk -F= '$1=="KillWait"{print $2}' "$SLURM_CONF"); KW=${KW:-30}
  jobs=$(squeue -h -o %A 2>/dev/null | sort -u)
  [ -n "$jobs" ] && timeout 10 scancel $jobs 2>/dev/null
  for i in $(seq $(( (KW + 10) * 10 ))); do
    [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1
  done
fi

# stop slurmctld + slurmd (both get the shutdown RPC)
alive "$CTLD" && timeout 10 scontrol shutdown >/dev/null 2>&1
wait_gone 10 $CTLD $SLURMD || { log "daemons did not exit, SIGKILL"; kill -9 $CTLD $SLURMD 2>/dev/null; }

# leftovers: slurmstepd + job processes (slurmstepds survive slurmd shutdown)
for round in 1 2 3 4 5; do
  pids=$(mine "$MUNGED")
  [ -z "$pids" ] && break
  kill -9 $pids 2>/dev/null; sleep 0.2
done

# munged last (slurm daemons need it during shutdown)
if alive "$MUNGED"; then
  kill "$MUNGED" 2>/dev/null      # same as: munged -s --socket=DIR/munge/munge.sock
  wait_gone 5 "$MUNGED" || kill -9 "$MUNGED" 2>/dev/null
fi

left=$(mine)
if [ -n "$left" ]; then
  log "processes still alive: $left"; exit 1
fi
# cgroup file systems slurm_up.sh mounted for slurmd (a chroot had none)
if [ -f "$D/mounts" ]; then
  tac "$D/mounts" | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -f "$D/mounts"
fi
[ $RM = 1 ] && rm -rf "$D"
log "stopped ($D)"
exit 0
