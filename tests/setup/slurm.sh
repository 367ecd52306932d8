#!/usr/bin/env bash
# A real Slurm on this machine for the fleet tests: Debian's slurm-wlm (slurmctld, slurmd,
# slurmstepd) and munge, configured by the slurm.conf this script writes.
#
#   tests/setup/slurm.sh start     install when missing, write the config, start what is not
#                                  running, wait until both nodes are idle; prints the path of
#                                  slurm.conf (callers set SLURM_CONF to it)
#   tests/setup/slurm.sh stop      stop the daemons this script started (and only those)
#
# Everything lives in $BENCH_SLURM_DIR (default /var/tmp/bench-slurm): slurm.conf, state,
# spool, logs, and DIR/started (one "name pid" per daemon this script started). A daemon that
# already answers is reused and never stopped by `stop`.
#
# The cluster: TWO nodes, bench-n1 and bench-n2, both on this machine (two slurmd, `slurmd -N`,
# each on its own port), one partition `debug`. So `--nodes 2 --exclusive --ntasks-per-node 1`
# is scheduled exactly as on a real cluster: two exclusive nodes, one task each. GPUs: this
# machine has none, so no GRES is configured and `--gpus-per-node` cannot be tested here.
#
# Slurm's stock settings are kept except these, each standing in for a property of a real
# cluster or of this machine:
#   SlurmctldHost=<hostname>(127.0.0.1)  the controller is this machine
#   SlurmctldPort/SlurmdPort, ports 16817-16819  a real cluster's daemons own 6817/6818; these
#                                  keep clear of any other Slurm on the machine
#   NodeName ... NodeHostname/NodeAddr/Port   two nodes on one machine (a real cluster: one
#                                  slurmd per machine, so none of this)
#   CPUs=1 RealMemory=1000 per node  what each stand-in node offers (this machine has 2 CPUs)
#   StateSaveLocation, SlurmdSpoolDir, *LogFile, *PidFile under DIR   no /var/spool/slurm* of
#                                  a packaged install is touched
#   ProctrackType=proctrack/linuxproc, TaskPlugin=task/none   no cgroup hierarchy is delegated
#                                  to this (containerised) machine; a real cluster uses
#                                  proctrack/cgroup and task/cgroup,task/affinity
#   ReturnToService=2              a node that restarts (every test session) comes back idle
# /etc/slurm/slurm.conf, when absent, is linked to DIR/slurm.conf (and unlinked by `stop`): a
# login node of a real cluster has its config there, so commands run over SSH (the login-node
# tests) find the cluster without SLURM_CONF.
# No slurmdbd: `sacct` has no accounting storage here; the job's state is read with
# squeue and scontrol instead (see provisioning/slurm/jobs.py).
set -euo pipefail

dir=${BENCH_SLURM_DIR:-/var/tmp/bench-slurm}
conf=$dir/slurm.conf
nodes=(bench-n1 bench-n2)
ctld_port=16817

say() { echo "slurm.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "$@" >&2; then
    apt-get -o DPkg::Lock::Timeout=900 update -q >&2
    apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "$@" >&2
  fi
}

started_pid() { awk -v n="$1" '$1 == n { print $2 }' "$dir/started" 2>/dev/null | tail -n 1; }

record() { echo "$1 $2" >>"$dir/started"; }

alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

write_conf() {
  local host
  host=$(hostname -s)
  {
    echo "# tests/setup/slurm.sh: two nodes on this machine (see the script's header)"
    echo "ClusterName=benchtest"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmdPort=$((ctld_port + 1))"
    echo "AuthType=auth/munge"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "ReturnToService=2"
    local port=$((ctld_port + 1))
    for n in "${nodes[@]}"; do
      port=$((port + 1))
      echo "NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=1 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$conf.new"
  mv "$conf.new" "$conf"
}

ctld_answers() { SLURM_CONF=$conf timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }

start() {
  if [[ ! -x /usr/sbin/slurmctld || ! -x /usr/sbin/slurmd || ! -x /usr/sbin/munged ]]; then
    [[ $(id -u) == 0 ]] || die "slurm-wlm is missing and installing it needs root"
    say "installing Debian's slurm-wlm and munge"
    apt_install slurm-wlm munge
  fi
  mkdir -p "$dir/state" "$dir/log" "${nodes[@]/#/$dir/spool/}"
  touch "$dir/started"
  [[ -f $conf ]] || write_conf
  if [[ ! -e /etc/slurm/slurm.conf && ! -L /etc/slurm/slurm.conf ]]; then
    mkdir -p /etc/slurm
    ln -s "$conf" /etc/slurm/slurm.conf
    record link /etc/slurm/slurm.conf
  fi

  # munge: one per machine; reuse a running one.
  if ! munge -n </dev/null >/dev/null 2>&1; then
    [[ -s /etc/munge/munge.key ]] || die "/etc/munge/munge.key is missing (the munge package makes it)"
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge: /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 1 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n </dev/null >/dev/null 2>&1 || die "munged did not answer"
    record munged "$(cat /run/munge/munged.pid)"
  fi

  if ! ctld_answers; then
    say "starting slurmctld"
    SLURM_CONF=$conf nohup /usr/sbin/slurmctld -D -i -f "$conf" >>"$dir/log/slurmctld.out" 2>&1 &
    record slurmctld $!
    for _ in $(seq 1 100); do ctld_answers && break; sleep 0.2; done
    ctld_answers || die "slurmctld did not answer; last lines: $(tail -n 5 "$dir/log/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
  fi

  for n in "${nodes[@]}"; do
    local pid
    pid=$(cat "$dir/slurmd-$n.pid" 2>/dev/null || true)
    if alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmd ]]; then
      continue
    fi
    say "starting slurmd for $n"
    SLURM_CONF=$conf nohup /usr/sbin/slurmd -D -N "$n" -f "$conf" >>"$dir/log/slurmd-$n.out" 2>&1 &
    record "slurmd-$n" $!
  done

  # Both nodes idle (a node left down or drained by an earlier session is resumed).
  local state=""
  for _ in $(seq 1 150); do
    state=$(SLURM_CONF=$conf sinfo -h -N -p debug -o '%N %t' 2>/dev/null | sort)
    if [[ $(grep -c ' idle$' <<<"$state") == "${#nodes[@]}" ]]; then
      echo "$conf"
      return 0
    fi
    if grep -qE ' (down|drain|drng)' <<<"$state"; then
      SLURM_CONF=$conf scontrol update NodeName="$(IFS=,; echo "${nodes[*]}")" State=RESUME 2>/dev/null || true
    fi
    sleep 0.2
  done
  die "the nodes are not idle after 30 s: $(tr '\n' ' ' <<<"$state"); see $dir/log"
}

stop() {
  [[ -f $dir/started ]] || { say "nothing started by slurm.sh"; return 0; }
  # slurmds first, then the controller, then munge: the reverse of start.
  local names
  names=$(awk '{ print $1 }' "$dir/started" | tac)
  for name in $names; do
    local pid
    pid=$(started_pid "$name")
    if [[ $name == link ]]; then
      [[ $(readlink "$pid" 2>/dev/null) == "$conf" ]] && rm -f "$pid" && say "unlinked $pid"
      continue
    fi
    if alive "$pid"; then
      kill -TERM "$pid"
      for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$pid"
      say "stopped $name (pid $pid)"
    fi
  done
  rm -f "$dir/started"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) die "usage: slurm.sh start|stop" ;;
esac
