# paddock sync: the half of the sync protocol that runs inside the job's sandbox (its
# container, a throwaway container with the same mounts, or, for the process runtime, the
# job's own process environment). It writes to stdout one header line, then the list of
# untracked paths, then (only when the host lacks something) a git bundle. The host trusts
# none of it: it checks the header, caps the sizes and fetches the bundle with fsck into a
# scratch repository of its own. GIT_DIR and GIT_WORK_TREE come from the host.
#
# Arguments: BRANCH KNOWN_TIP KNOWN_STATE SNAPSHOT BASE USER_OBJECTS ("-" for none)
# Header:    paddock-sync 1 TIP STATE BUNDLE UNTRACKED_BYTES
#   TIP      the branch's commit, or -
#   STATE    a commit holding the uncommitted work (parent: HEAD), clean, or -
#   BUNDLE   bundle when a bundle follows the untracked list, else -
set -u
branch=$1 known_tip=$2 known_state=$3 snapshot=$4 base=$5 user_objects=$6
g() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c gc.auto=0 \
    -c maintenance.auto=false -c core.untrackedCache=false "$@"
}
commit_of() { g rev-parse -q --verify "$1^{commit}" 2>/dev/null; }

tmp=${TMPDIR:-/tmp}
untracked=$tmp/paddock-sync-untracked.$$
index=$tmp/paddock-sync-index.$$
fresh=$tmp/paddock-sync-git.$$
trap 'rm -rf "$untracked" "$index" "$index.lock" "$fresh"' EXIT
: >"$untracked" || exit 70

# The agent may have broken its own git dir. Its files are still work to keep: then they
# are snapshotted through a fresh git dir that borrows the same objects.
use_fresh_git_dir() {
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
  tip=- head=
}

tip=-
head=
if ! g rev-parse -q --git-dir >/dev/null 2>&1; then
  [ "$snapshot" = 1 ] || { echo "paddock: the job's git dir is unusable inside its sandbox" >&2; exit 79; }
  use_fresh_git_dir
else
  if [ "$branch" != - ]; then tip=$(commit_of "refs/heads/$branch") || tip=-; fi
  head=$(commit_of HEAD) || head=
fi

state=-
if [ "$snapshot" = 1 ]; then
  if ! cp "$GIT_DIR/index" "$index" 2>/dev/null; then
    rm -f "$index"
    if [ -n "$head" ]; then GIT_INDEX_FILE=$index g read-tree "$head" 2>/dev/null || rm -f "$index"; fi
  fi
  g ls-files -z --others --exclude-standard -- ':/' >"$untracked" 2>/dev/null || : >"$untracked"
  if ! GIT_INDEX_FILE=$index g add -A -- ':/' >&2 ||
    ! tree=$(GIT_INDEX_FILE=$index g write-tree 2>/dev/null); then
    # Objects the index names are gone, or the git dir takes no writes: hash the whole
    # worktree afresh into a snapshot without a parent.
    [ "$GIT_DIR" = "$fresh" ] || use_fresh_git_dir
    rm -f "$index"
    GIT_INDEX_FILE=$index g add -A -- ':/' >&2 || exit 73
    tree=$(GIT_INDEX_FILE=$index g write-tree) || exit 74
  fi
  if [ -n "$head" ] && [ "$tree" = "$(g rev-parse "$head^{tree}")" ]; then
    state=clean
  else
    # The date of HEAD makes the snapshot of unchanged work the same commit every time.
    when=0
    [ -n "$head" ] && when=$(g show -s --format=%ct "$head")
    export GIT_AUTHOR_NAME=paddock GIT_AUTHOR_EMAIL=paddock@localhost \
      GIT_COMMITTER_NAME=paddock GIT_COMMITTER_EMAIL=paddock@localhost \
      GIT_AUTHOR_DATE="@$when +0000" GIT_COMMITTER_DATE="@$when +0000"
    state=$(g commit-tree "$tree" ${head:+-p "$head"} -m "paddock: uncommitted work") || exit 75
    g update-ref refs/paddock/state "$state" || exit 76
  fi
fi

# What the host already has (from the user's repository or earlier syncs) is left out.
nots=
for known in "$base" "$known_tip" "$known_state"; do
  [ "$known" != - ] && commit_of "$known" >/dev/null && nots="$nots $known"
done
needs() { [ -z "$nots" ] || [ -n "$(g rev-list -n 1 "$1" --not $nots)" ]; }
refs=
if [ "$tip" != - ] && [ "$tip" != "$known_tip" ] && needs "$tip"; then
  refs="refs/heads/$branch"
fi
case $state in
  -|clean) ;;
  *) if [ "$state" != "$known_state" ] && needs "$state"; then refs="$refs refs/paddock/state"; fi ;;
esac

bundle=-
[ -n "$refs" ] && bundle=bundle
printf 'paddock-sync 1 %s %s %s %s\n' "$tip" "$state" "$bundle" "$(wc -c <"$untracked" | tr -d ' ')"
cat "$untracked" || exit 77
[ -n "$refs" ] || exit 0
# shellcheck disable=SC2086 # word splitting of the ref and commit lists is intended
g bundle create --quiet - $refs ${nots:+--not $nots} || exit 78
