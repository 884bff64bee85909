#!/usr/bin/env bash
# Makes sure bubblewrap (`bwrap`), which isolates local runners, is installed:
# installs Debian's package when it is missing and we are root. Best effort:
# otherwise it says what is missing and carries on (a development server
# starts without bubblewrap, its runners unisolated and warned about; any
# other server refuses to start and says why).
set -uo pipefail

if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-bubblewrap: installing bubblewrap, which isolates local runners" >&2
  if apt-get update -q \
     && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap; then
    exit 0
  fi
fi
echo "ensure-bubblewrap: bubblewrap is not installed and could not be installed here" \
     "(install it: apt-get install bubblewrap); without it runners are not isolated" >&2
exit 0
