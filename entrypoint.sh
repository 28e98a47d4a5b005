#!/bin/sh
# paddock agent entrypoint. Gives the runtime uid a HOME (a tmpfs in job containers), sets the
# git identity from PADDOCK_GIT_AUTHOR_NAME / PADDOCK_GIT_AUTHOR_EMAIL (defaults name the job),
# marks the workspace safe for git, then idles as the long-lived job container or runs its
# arguments.
set -e
HOME="${HOME:-/home/agent}"
export HOME
mkdir -p "$HOME" 2>/dev/null || true
if [ -w "$HOME" ] && [ ! -f "$HOME/.gitconfig" ]; then
  job="${PADDOCK_JOB_ID:-job}"
  git config --global user.name "${PADDOCK_GIT_AUTHOR_NAME:-paddock agent ($job)}"
  git config --global user.email "${PADDOCK_GIT_AUTHOR_EMAIL:-$job@paddock.invalid}"
  # The worktree and the repository belong to the host user, not to this uid.
  git config --global --add safe.directory '*'
  # Housekeeping needs write access to the shared repository, which the container lacks.
  git config --global gc.auto 0
  git config --global maintenance.auto false
fi
if [ "$#" -eq 0 ]; then
  # The job container: idle until stopped, and exit at once on SIGTERM.
  trap 'exit 0' TERM INT
  while :; do
    sleep 3600 &
    wait $! || true
  done
fi
exec "$@"
