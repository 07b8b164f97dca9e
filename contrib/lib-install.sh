# shellcheck shell=bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Installs what lungate needs to build and to run its whole test suite on
# Debian 12.  Sourced by contrib/check and contrib/quickstart.  As root,
# missing packages are installed with apt-get (one "apt-get update" first);
# as another user the missing ones are named and lg_install_deps fails.
# LUNGATE_NO_INSTALL=1 skips the step (other distributions, offline).

LG_DEB_PACKAGES=(
  build-essential autoconf automake libtool pkg-config
  libiscsi-dev libiscsi-bin
  nbdkit nbdkit-plugin-dev
  libfuse3-dev fuse3
  libsodium-dev libcriterion-dev
  tgt istgt
  libnbd-bin python3-libnbd
  qemu-utils qemu-block-extra fio fuse2fs e2fsprogs
  clang cppcheck shellcheck
  debhelper dpkg-dev lintian
  iproute2 procps psmisc gdb strace
  linux-image-amd64 qemu-system-x86 busybox-static cpio
)

# lg_missing_packages PKG...: print those not installed, one a line.
lg_missing_packages ()
{
  local p
  for p in "$@"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" \
         != "install ok installed" ]; then
      printf '%s\n' "$p"
    fi
  done
}

lg_install_deps ()
{
  local missing=()
  if [ "${LUNGATE_NO_INSTALL:-}" = 1 ]; then
    echo "LUNGATE_NO_INSTALL=1: not checking packages"
    return 0
  fi
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "no dpkg-query: not a Debian system, install by hand:"
    echo "  ${LG_DEB_PACKAGES[*]}"
    return 0
  fi
  mapfile -t missing < <(lg_missing_packages "${LG_DEB_PACKAGES[@]}")
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "all ${#LG_DEB_PACKAGES[@]} packages are installed"
    return 0
  fi
  echo "missing packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "not root: install them with" >&2
    echo "  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    return 1
  fi
  apt-get update || return 1
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing[@]}" || return 1
  mapfile -t missing < <(lg_missing_packages "${missing[@]}")
  if [ "${#missing[@]}" -ne 0 ]; then
    echo "still missing after apt-get install: ${missing[*]}" >&2
    return 1
  fi
}
