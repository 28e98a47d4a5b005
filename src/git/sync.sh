# paddock sync: the half of the sync protocol that runs inside the job's sandbox (its
# container, a throwaway container with the same mounts, or, for the process runtime, the
# job's own process environment). It writes to stdout one header line, then the list of
# untracked paths, then (only when a ref moved) a git bundle. The host trusts
# none of it: it checks the header, caps the sizes and fetches the bundle with fsck into a
# scratch repository of its own. GIT_DIR and GIT_WORK_TREE come from the host.
#
# Arguments: BRANCH KNOWN_TIP KNOWN_STATE SNAPSHOT BASE USER_OBJECTS ("-" for none); with
#   SNAPSHOT 0, PADDOCK_SYNC_TIP may name the branch's tip (see `fast` below)
#   SNAPSHOT 0: the branch only; 1: and the uncommitted work; 2: a checkpoint, whose STATE
#            commit has two parents, HEAD and a commit of the index's tree (as `git stash`
#            makes), also holds the `copy` files named one per line in PADDOCK_CHECKPOINT_COPY,
#            and is refused (exit 80-84, the reason on stderr) when part of the workspace
#            cannot be read, its changed files are over PADDOCK_CHECKPOINT_MAX bytes in all,
#            the index has unmerged paths, or the git dir is unusable. With PADDOCK_CHANGED_BYTES
#            set (an overlay job's), stdin holds what the job changed (see changed.sh): then
#            only those paths and the ones the index changed are looked at, and anything
#            unexpected takes the full walk instead
# Header:    paddock-sync 1 TIP STATE BUNDLE UNTRACKED_BYTES (then the untracked list, then
#            a v2 bundle whose pack may hold no object when the host has them all)
#   TIP      the branch's commit, or -
#   STATE    a commit holding the uncommitted work (parent: HEAD), clean, or -
#   BUNDLE   bundle when a bundle follows the untracked list, else -
set -u
branch=$1 known_tip=$2 known_state=$3 snapshot=$4 base=$5 user_objects=$6
g() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c gc.auto=0 \
    -c maintenance.auto=false -c core.untrackedCache=false "$@"
}
# One git process resolves every name: a line per argument, its commit or "-" (also for "-").
resolve() {
  for rev in "$@"; do printf '%s^{commit}\n' "$rev"; done |
    g cat-file --batch-check='%(objectname)' 2>/dev/null |
    while read -r oid rest; do
      if [ -n "$rest" ]; then echo -; else echo "$oid"; fi
    done
}

tmp=${TMPDIR:-/tmp}
untracked=$tmp/paddock-sync-untracked.$$
index=$tmp/paddock-sync-index.$$
fresh=$tmp/paddock-sync-git.$$
warnings=$tmp/paddock-sync-warnings.$$
changed_in=$tmp/paddock-sync-changed.$$
# Only a snapshot makes temporary files (a branch sync, after every exec, starts no `rm`).
if [ "$snapshot" != 0 ]; then
  trap 'rm -rf "$untracked" "$index" "$index.lock" "$fresh" "$warnings" "$changed_in" "$changed_in".?' EXIT
  : >"$untracked" || exit 70
fi
# What an overlay job changed, when the host sent it whole (see changed.sh).
hint=
if [ "$snapshot" = 2 ] && read_changed; then hint=1; fi
# A checkpoint lists paths from the workspace's root (its size check reads them).
if [ "$snapshot" = 2 ]; then cd "$GIT_WORK_TREE" || exit 80; fi
refuse() {
  code=$1
  shift
  echo "paddock: checkpoint refused: $*" >&2
  exit "$code"
}

# The agent may have broken its own git dir. Its files are still work to keep: then they
# are snapshotted through a fresh git dir that borrows the same objects.
use_fresh_git_dir() {
  [ "$snapshot" != 2 ] || refuse 80 "the job's git dir is unusable inside its sandbox (its index cannot be saved)"
  echo "paddock: the job's git dir is unusable inside its sandbox; snapshotting files only" >&2
  excludes=$GIT_DIR/info/exclude
  GIT_DIR=$fresh
  rm -rf "$fresh" "$index"
  (unset GIT_WORK_TREE && git init -q --bare "$fresh") >&2 || exit 79
  echo "$user_objects" >"$fresh/objects/info/alternates" || exit 79
  g() {
    git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c gc.auto=0 \
      -c maintenance.auto=false -c core.untrackedCache=false -c core.bare=false \
      -c core.excludesFile="$excludes" "$@"
  }
}

# An exec's piggybacked branch sync names the tip it read from the ref file with builtins
# (PADDOCK_SYNC_TIP): then no git process resolves names, and the host's known commits are
# taken as present. Were one gone, `pack-objects` fails (exit 78) and the host, told by the
# variable it set, syncs again in full, which resolves them.
fast=
if [ "$snapshot" = 0 ] && [ "$branch" != - ]; then
  case ${PADDOCK_SYNC_TIP:-} in
    *[!0-9a-f]* | '') ;;
    *) [ "${#PADDOCK_SYNC_TIP}" -eq 40 ] || [ "${#PADDOCK_SYNC_TIP}" -eq 64 ] && fast=1 ;;
  esac
fi
if [ -n "$fast" ]; then
  set -- "$PADDOCK_SYNC_TIP" - "$base" "$known_tip" "$known_state"
else
  # shellcheck disable=SC2046 # one word per resolved name
  set -- $(resolve "refs/heads/$branch" HEAD "$base" "$known_tip" "$known_state")
fi
if [ "$#" -ne 5 ]; then
  [ "$snapshot" != 0 ] || { echo "paddock: the job's git dir is unusable inside its sandbox" >&2; exit 79; }
  use_fresh_git_dir
  # shellcheck disable=SC2046
  set -- - - $(resolve "$base") - -
fi
tip=$1 head=$2 have_base=$3 have_tip=$4 have_state=$5
[ "$branch" != - ] || tip=-
[ "$head" != - ] || head=

# A checkpoint's own checks, before anything is hashed: git skips what it cannot read (a
# tree deeper than PATH_MAX) with a warning only, and a sparse file of a terabyte would be
# read whole.
check_checkpoint() {
  [ -n "$head" ] || refuse 84 "the job's HEAD names no commit"
  if [ -s "$warnings" ]; then
    refuse 81 "git cannot read part of the workspace (a path too deep or unreadable): $(head -c 300 "$warnings" | tr '\n' ' ')"
  fi
  over=$({ cat "$untracked"; g diff-files --name-only -z 2>/dev/null; } |
    xargs -0 -r stat -c '%s' -- 2>/dev/null |
    awk -v max="${PADDOCK_CHECKPOINT_MAX:-2147483648}" '{ sum += $1 } sum > max { print sum; exit }')
  [ -z "$over" ] || refuse 82 "its changed files take over ${PADDOCK_CHECKPOINT_MAX:-2147483648} bytes"
  itree=$(g write-tree 2>/dev/null) || refuse 83 "the index has unmerged paths or names objects that are gone"
}
# The `copy` files a checkpoint keeps although they are ignored.
add_copies() {
  [ "$snapshot" = 2 ] && [ -n "${PADDOCK_CHECKPOINT_COPY:-}" ] || return 0
  printf '%s\n' "$PADDOCK_CHECKPOINT_COPY" | while IFS= read -r path; do
    if [ -e "$path" ] || [ -L "$path" ]; then
      GIT_INDEX_FILE=$index g add -f -- "$path" >&2 || exit 1
    fi
  done
}

# `git add -A` fails when a file changes under it (rewritten while read: "short read"), as
# a file a running process keeps rewriting does; a second or third try takes it between
# two writes.
add_all() {
  GIT_INDEX_FILE=$index g add -A -- ':/' >&2 ||
    GIT_INDEX_FILE=$index g add -A -- ':/' >&2 ||
    GIT_INDEX_FILE=$index g add -A -- ':/' >&2
}

copy_index() {
  # A second name of the job's index in its git dir when it takes one: git writes an index
  # only through `<file>.lock` renamed over `<file>`, so the first write to the copy parts
  # it from the job's index, which stays as it was; and no 4 MB copy for a 50,000-file
  # checkout. Else a copy that keeps the index's mtime, which git's racy-clean check
  # compares file mtimes with: a fresh mtime would hide a same-size edit made in the second
  # of the last index write (`git add -A` would trust the stale stat data).
  rm -f "$index"
  same_index=1
  if [ -f "$GIT_DIR/index" ] && [ ! -L "$GIT_DIR/index" ] &&
    ln "$GIT_DIR/index" "$GIT_DIR/paddock-sync-index.$$" 2>/dev/null; then
    index=$GIT_DIR/paddock-sync-index.$$
  elif cp "$GIT_DIR/index" "$index" 2>/dev/null; then
    touch -r "$GIT_DIR/index" "$index" 2>/dev/null || :
  else
    same_index=
    rm -f "$index"
    if [ -n "$head" ]; then GIT_INDEX_FILE=$index g read-tree "$head" 2>/dev/null || rm -f "$index"; fi
  fi
}

state=-
if [ "$snapshot" != 0 ]; then
  # The index's own tree first (as `check_checkpoint` takes it): git keeps it in the index
  # (its cache tree), so the copy below names it already and is not written again for it;
  # and when the copy is that index, `add_changed` takes the tree as it is.
  job_itree=
  [ -z "$hint" ] || job_itree=$(g write-tree 2>/dev/null) || job_itree=
  copy_index
  done_add=
  if [ -n "$hint" ] && [ -n "$head" ] && add_changed "$index" "${same_index:+$job_itree}"; then
    # Its untracked list stays empty: a checkpoint's commit holds the untracked files.
    echo "paddock: looked only at the changed paths" >&2
    done_add=1
  else
    [ -z "$hint" ] || { copy_index; : >"$warnings"; }
    g ls-files -z --others --exclude-standard -- ':/' >"$untracked" 2>"$warnings" || : >"$untracked"
    [ "$snapshot" != 2 ] || check_checkpoint
    add_all && done_add=1
  fi
  if [ -z "$done_add" ] || ! add_copies ||
    ! tree=$(GIT_INDEX_FILE=$index g write-tree 2>/dev/null); then
    # Objects the index names are gone, or the git dir takes no writes: hash the whole
    # worktree afresh into a snapshot without a parent.
    if [ "$GIT_DIR" != "$fresh" ]; then
      use_fresh_git_dir
      tip=- head= have_tip=- have_state=-
      # shellcheck disable=SC2046
      set -- $(resolve "$base")
      have_base=${1:--}
    fi
    rm -f "$index"
    add_all || exit 73
    tree=$(GIT_INDEX_FILE=$index g write-tree) || exit 74
  fi
  if [ "$snapshot" = 1 ] && [ -n "$head" ] && [ "$tree" = "$(g rev-parse "$head^{tree}")" ]; then
    state=clean
  else
    # The date of HEAD makes the snapshot of unchanged work the same commit every time.
    when=0
    # (Read from the commit object: `git show -s` took 30 ms of a checkpoint's budget, and
    # the job's config could make `log` print a signature.)
    [ -n "$head" ] && when=$(g cat-file commit "$head" |
      sed -n 's/^committer .* \([0-9][0-9]*\) [-+][0-9][0-9]*$/\1/p' | head -n 1)
    [ -n "$when" ] || when=0
    export GIT_AUTHOR_NAME=paddock GIT_AUTHOR_EMAIL=paddock@localhost \
      GIT_COMMITTER_NAME=paddock GIT_COMMITTER_EMAIL=paddock@localhost \
      GIT_AUTHOR_DATE="@$when +0000" GIT_COMMITTER_DATE="@$when +0000"
    if [ "$snapshot" = 2 ]; then
      index_commit=$(g commit-tree "$itree" -p "$head" -m "paddock: index") || exit 75
      state=$(g commit-tree "$tree" -p "$head" -p "$index_commit" -m "paddock: checkpoint") || exit 75
    else
      state=$(g commit-tree "$tree" ${head:+-p "$head"} -m "paddock: uncommitted work") || exit 75
    fi
    g update-ref refs/paddock/state "$state" || exit 76
  fi
fi

# What the host already has (from the user's repository or earlier syncs) is left out.
nots=
for known in "$have_base" "$have_tip" "$have_state"; do
  [ "$known" != - ] && nots="$nots $known"
done
# A ref goes into the bundle when the host does not have it at that commit; its pack holds
# only what the host lacks (possibly nothing: the agent reset the branch to a known commit).
refs= tips=
if [ "$tip" != - ] && [ "$tip" != "$known_tip" ]; then
  refs="refs/heads/$branch" tips=$tip
fi
case $state in
  -|clean) ;;
  *) if [ "$state" != "$known_state" ]; then refs="$refs refs/paddock/state" tips="$tips $state"; fi ;;
esac

bundle=-
[ -n "$refs" ] && bundle=bundle
if [ -s "$untracked" ]; then
  printf 'paddock-sync 1 %s %s %s %s\n' "$tip" "$state" "$bundle" "$(wc -c <"$untracked" | tr -d ' ')"
  cat "$untracked" || exit 77
else
  printf 'paddock-sync 1 %s %s %s 0\n' "$tip" "$state" "$bundle"
fi
[ -n "$refs" ] || exit 0
# A v2 bundle written by hand: its header, then one thin pack-objects of the tips minus what
# the host has (`git bundle create` adds a second process and a history walk for
# prerequisite lines, which the host does not read).
printf '# v2 git bundle\n'
# shellcheck disable=SC2086 # one word per commit
set -- $tips
for ref in $refs; do
  printf '%s %s\n' "$1" "$ref"
  shift
done
printf '\n'
# shellcheck disable=SC2086 # one word per commit
{ printf '%s\n' $tips; for known in $nots; do printf '^%s\n' "$known"; done; } |
  g pack-objects --revs --stdout --thin --delta-base-offset -q || exit 78
