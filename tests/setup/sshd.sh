#!/usr/bin/env bash
# A throwaway OpenSSH server on 127.0.0.1 that stands for the GPU host in the orchestrator tests.
#
#   tests/setup/sshd.sh DIR PORT
#
# Installs openssh-server when missing (idempotent), creates throwaway host and client keys
# in DIR (kept when already there), and execs sshd in the foreground, so the caller's process
# id is sshd's and stopping it stops the server.
#
# The server runs Debian's own sshd_config as the package ships it
# (/usr/share/openssh/sshd_config), with only these changed, at the top of the file (sshd
# takes the first value it reads):
#   ListenAddress 127.0.0.1:PORT, HostKey DIR/host_ed25519   the port and the host key
#   PidFile none          several test hosts run at once on this machine; a real host has one
#   SetEnv PATH=BIN:...   stands in for the GPU host's driver tools on PATH: tests put stand-in
#                         tools in BIN (e.g. an nvidia-smi reporting other GPUs)
#   UsePAM no             only when SSHD_PAM=0: not needed on this machine (see below)
# and the account is what a real GPU host gives a user: a non-root account (bench-PORT) in
# the `docker` group, its home in /var/tmp/bench-ssh/PORT/home with the client key in
# ~/.ssh/authorized_keys (StrictModes applies). DIR/remote-home and DIR/bin link there.
#
# Variants for the tests (environment):
#   SSHD_USER=root          log in as root instead (the client key in DIR/root_keys)
#   SSHD_DOCKER_GROUP=0     the account is not in the docker group
#   SSHD_OPTIONS='...'      lines added at the top, e.g. "MaxSessions 2" (newline-separated)
#   SSHD_NO_SFTP=1          Debian's Subsystem sftp line removed
#   SSHD_ALIAS=NAME         the ~/.ssh/config alias the client side uses (bench-test-host)
#
# DIR/home/.ssh/{config,known_hosts} are the client side, for a temporary HOME.
set -euo pipefail

dir=${1:?usage: sshd.sh DIR PORT}
port=${2:?usage: sshd.sh DIR PORT}
alias_name=${SSHD_ALIAS:-bench-test-host}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  # Other package installs may hold the dpkg lock; wait for it instead of failing.
  if ! apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2
  fi
}
if [[ ! -x /usr/sbin/sshd ]]; then
  echo "sshd.sh: installing openssh-server" >&2
  apt_install openssh-server
fi
stock=/usr/share/openssh/sshd_config
if [[ ! -x /usr/sbin/sshd || ! -f $stock ]]; then
  echo "sshd.sh: /usr/sbin/sshd or Debian's $stock is missing after installing openssh-server" >&2
  exit 1
fi

# sshd's privilege-separation directory; created by the service unit on a normal install.
mkdir -p /run/sshd
chmod 0755 /run/sshd

mkdir -p "$dir/home/.ssh"
chmod 0700 "$dir/home/.ssh"
[[ -f "$dir/host_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C bench-test-host -f "$dir/host_ed25519"
[[ -f "$dir/client_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C bench-test-client -f "$dir/client_ed25519"

# The account. Its home is outside DIR: pytest's folders are private to root (0700).
user=${SSHD_USER:-bench-$port}
base=/var/tmp/bench-ssh/$port
# A port seen before by another DIR: start from nothing (a restart of this DIR keeps it).
[[ -f "$dir/user" ]] || rm -rf --one-file-system "$base"
mkdir -p "$base/bin"
chmod 0755 /var/tmp/bench-ssh "$base" "$base/bin"
if [[ $user == root ]]; then
  home=/root
  keys_line="AuthorizedKeysFile $dir/root_keys"
  cp "$dir/client_ed25519.pub" "$dir/root_keys"
  mkdir -p "$base/home"
else
  home=$base/home
  keys_line=""
  if ! id "$user" >/dev/null 2>&1; then
    useradd --home-dir "$home" --no-create-home --shell /bin/bash "$user"
  fi
  # The account outlives its server: a later server on the same port (ports are reused, and
  # accounts stay on the machine across runs) may ask for the other variant. Make its docker
  # membership what this one asks for, every time.
  if [[ ${SSHD_DOCKER_GROUP:-1} == 1 ]]; then
    getent group docker >/dev/null || groupadd --system docker
    usermod -aG docker "$user"
  elif id -nG "$user" | tr ' ' '\n' | grep -qx docker; then
    gpasswd -d "$user" docker >/dev/null
  fi
  mkdir -p "$home/.ssh"
  cp "$dir/client_ed25519.pub" "$home/.ssh/authorized_keys"
  chown -R "$user:" "$home"
  chmod 0755 "$home"
  chmod 0700 "$home/.ssh"
  chmod 0600 "$home/.ssh/authorized_keys"
fi
ln -sfn "$base/home" "$dir/remote-home"
ln -sfn "$base/bin" "$dir/bin"
echo "$user" >"$dir/user"

{
  echo "# tests/setup/sshd.sh: Debian's sshd_config with only these lines added (first value wins)"
  echo "ListenAddress 127.0.0.1:$port"
  echo "HostKey $dir/host_ed25519"
  echo "PidFile none"
  [[ $user == root ]] || echo "SetEnv PATH=$base/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  [[ -z $keys_line ]] || echo "$keys_line"
  # root's key file lives in DIR, under root's private pytest folder: StrictModes would refuse it.
  # Root's sessions get a HOME of their own: this machine's /root is the developer's.
  [[ $user != root ]] || printf 'StrictModes no\nSetEnv PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=%s/home\n' "$base" "$base"
  [[ ${SSHD_PAM:-1} == 1 ]] || echo "UsePAM no"
  [[ -z ${SSHD_OPTIONS:-} ]] || printf '%s\n' "$SSHD_OPTIONS"
  echo "# --- Debian's $stock, as shipped"
  if [[ ${SSHD_NO_SFTP:-0} == 1 ]]; then
    grep -v '^Subsystem[[:space:]]*sftp' "$stock"
  else
    cat "$stock"
  fi
} >"$dir/sshd_config"

printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" >"$dir/home/.ssh/known_hosts"
cat >"$dir/home/.ssh/config" <<CONF
Host $alias_name
  HostName 127.0.0.1
  Port $port
  User $user
  IdentityFile $dir/client_ed25519
  IdentitiesOnly yes
CONF

/usr/sbin/sshd -t -f "$dir/sshd_config"
exec /usr/sbin/sshd -D -e -f "$dir/sshd_config"
