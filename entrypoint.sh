#!/bin/sh
# paddock agent entrypoint. Gives the runtime uid a HOME (a tmpfs in job containers), then idles
# as the long-lived job container or runs its arguments. Git's identity and settings come with
# the container's environment (set by paddock), not from here, so no exec can race them.
set -e
HOME="${HOME:-/home/agent}"
export HOME
mkdir -p "$HOME" 2>/dev/null || true
if [ "$#" -eq 0 ]; then
  # The job container: idle until stopped, and exit at once on SIGTERM.
  trap 'exit 0' TERM INT
  while :; do
    sleep 3600 &
    wait $! || true
  done
fi
exec "$@"
