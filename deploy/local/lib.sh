# Shared by the local set-up scripts (sourced, not run). Before sourcing,
# set LOG_NAME (the prefix of every message) and, optionally, APT_HINT (what
# to do instead when a package cannot be installed here).

say() { printf '%s: %s\n' "$LOG_NAME" "$*" >&2; }
die() { printf '%s: ERROR: %s\n' "$LOG_NAME" "$*" >&2; exit 1; }

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

# apt_install installs Debian packages, running apt-get update once per script.
apt_updated=
apt_install() {
  can_install || die "$1 is not installed and this user cannot install it (need root with apt-get). Install $* yourself${APT_HINT:+, $APT_HINT}."
  if [ -z "$apt_updated" ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    apt_updated=1
  fi
  say "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
