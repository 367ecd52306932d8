#!/usr/bin/env bash
# A throwaway OpenSSH server on 127.0.0.1 that stands for the GPU host in the orchestrator tests.
#
#   tests/setup/sshd.sh DIR PORT
#
# Installs openssh-server when missing (idempotent), creates throwaway host and client keys
# in DIR (kept when already there), writes DIR/sshd_config, DIR/home/.ssh/{config,known_hosts}
# (the client side, for a temporary HOME) and DIR/remote-home (HOME of every session), then
# execs sshd in the foreground, so the caller's process id is sshd's and stopping it stops
# the server. DIR/bin comes first on the PATH of every session: tests put stand-in tools
# there (e.g. an nvidia-smi reporting other GPUs).
set -euo pipefail

dir=${1:?usage: sshd.sh DIR PORT}
port=${2:?usage: sshd.sh DIR PORT}
alias_name=${SSHD_ALIAS:-bench-test-host}

if [[ ! -x /usr/sbin/sshd ]]; then
  echo "sshd.sh: installing openssh-server" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Other package installs may hold the dpkg lock; wait for it instead of failing.
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends openssh-server >&2; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends openssh-server >&2
  fi
fi
if [[ ! -x /usr/sbin/sshd ]]; then
  echo "sshd.sh: /usr/sbin/sshd is still missing after installing openssh-server" >&2
  exit 1
fi

# sshd's privilege-separation directory; created by the service unit on a normal install.
mkdir -p /run/sshd
chmod 0755 /run/sshd

mkdir -p "$dir/home/.ssh" "$dir/bin" "$dir/remote-home"
chmod 0700 "$dir/home/.ssh"
[[ -f "$dir/host_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C bench-test-host -f "$dir/host_ed25519"
[[ -f "$dir/client_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C bench-test-client -f "$dir/client_ed25519"
cp "$dir/client_ed25519.pub" "$dir/authorized_keys"

cat >"$dir/sshd_config" <<CONF
ListenAddress 127.0.0.1:$port
HostKey $dir/host_ed25519
PidFile none
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The key files live under /tmp (world-writable), which StrictModes would refuse.
StrictModes no
Subsystem sftp internal-sftp
# Sessions get their own HOME, so what the orchestrator keeps on the "GPU host" (signing key,
# run folders) lands in DIR, not in the real home of the account sshd logs in to.
SetEnv PATH=$dir/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=$dir/remote-home
# The docker SDK opens one session per pooled HTTP connection.
MaxSessions 64
MaxStartups 64
LogLevel VERBOSE
CONF

printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" >"$dir/home/.ssh/known_hosts"
cat >"$dir/home/.ssh/config" <<CONF
Host $alias_name
  HostName 127.0.0.1
  Port $port
  User root
  IdentityFile $dir/client_ed25519
  IdentitiesOnly yes
CONF

/usr/sbin/sshd -t -f "$dir/sshd_config"
exec /usr/sbin/sshd -D -e -f "$dir/sshd_config"
