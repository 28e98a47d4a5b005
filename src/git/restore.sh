# paddock restore: puts a job's workspace back to a checkpoint, inside the job's sandbox (its
# container, a throwaway one with the same mounts, or the process runtime's own
# environment), as the agent's user. The host wrote the checkpoint's objects as a bundle
# into the workspace; nothing here runs on the host. GIT_DIR and GIT_WORK_TREE come from
# the host.
#
# Arguments: BUNDLE STATE BRANCH MOVE_BRANCH FRESH
#   BUNDLE       the bundle's path (removed before anything else happens to the workspace)
#   STATE        the checkpoint commit: its tree is the workspace, its first parent HEAD,
#                its second parent a commit of the index's tree (see sync.sh, SNAPSHOT 2)
#   MOVE_BRANCH  1: the branch moves to the checkpoint's HEAD too
#   FRESH        1: a new job's checkout, untouched since its create (a fork): nothing was
#                made since, so the walk for untracked files is skipped
# With PADDOCK_CHANGED_BYTES set (an overlay job's), stdin holds what the job changed (see
# changed.sh): then only those paths and the ones the index changed are looked at, and
# anything unexpected takes the full walk instead.
# Exit codes 70-76 name the step that failed; its reason is on stderr.
set -u
bundle=$1 state=$2 branch=$3 move_branch=$4 fresh=${5:-0}
g() {
  git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c gc.auto=0 \
    -c maintenance.auto=false -c core.untrackedCache=false "$@"
}
fail() {
  code=$1
  shift
  echo "paddock: restore failed: $*" >&2
  exit "$code"
}
changed_in=${TMPDIR:-/tmp}/paddock-restore-changed.$$
trap 'rm -f "$bundle" "$changed_in" "$changed_in".?' EXIT
cd "$GIT_WORK_TREE" || fail 70 "the workspace is gone"
hint=
if [ "$fresh" != 1 ] && read_changed; then hint=1; fi
# The index made to name the workspace exactly, looking only where the job changed something
# (see changed.sh: files made since become entries, which the two-tree merge below then
# removes); a two-tree merge from its tree to the checkpoint's touches only what differs.
restore_changed() {
  add_changed "$GIT_DIR/index" || return 1
  wtree=$(g write-tree 2>/dev/null) || return 1
  g read-tree -m -u "$wtree" "$state^{tree}" 2>/dev/null || return 1
  echo "paddock: looked only at the changed paths" >&2
  # What is left of the new paths (directories made since, emptied) goes, as `clean -d`
  # takes it in the full walk.
  [ ! -s "$changed_in.n" ] || xargs -0 -r env GIT_LITERAL_PATHSPECS=1 \
    git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c gc.auto=0 \
    -c maintenance.auto=false -c core.untrackedCache=false clean -fdq -- <"$changed_in.n" ||
    fail 75 "files made since the checkpoint could not be removed"
}
g bundle unbundle "$bundle" >/dev/null || fail 71 "the checkpoint's objects could not be unpacked"
rm -f "$bundle"
# The objects stay reachable here, so an agent's `git gc` keeps them.
g update-ref refs/paddock/restored "$state" || fail 72 "the job's git dir takes no writes"
head=$(g rev-parse -q --verify "$state^1^{commit}") &&
  index_tree=$(g rev-parse -q --verify "$state^2^{tree}") ||
  fail 72 "the checkpoint is not a checkpoint commit"
if [ "$move_branch" = 1 ]; then
  g update-ref -m "paddock: restore" "refs/heads/$branch" "$head" || fail 73 "the branch could not move"
  g symbolic-ref HEAD "refs/heads/$branch" || fail 73 "HEAD could not name the branch"
fi
# The workspace becomes the checkpoint's tree: what the index tracks and the checkpoint
# lacks goes, anything in the way is overwritten. An index the agent broke is dropped first.
# A fresh checkout (a fork's, at the checkpoint's HEAD) takes only the paths that differ
# (a two-tree merge from HEAD), not a check of every file.
cleaned=$fresh
# Whether the index names the checkpoint's tree exactly now (a two-tree merge into it).
merged=
if [ "$fresh" = 1 ] && g read-tree -m -u HEAD "$state^{tree}" 2>/dev/null; then
  merged=1
elif [ -n "$hint" ] && restore_changed; then
  cleaned=1 merged=1
elif ! g read-tree --reset -u "$state^{tree}" 2>/dev/null; then
  rm -f "$GIT_DIR/index" "$GIT_DIR/index.lock"
  g read-tree --reset -u "$state^{tree}" || fail 74 "the workspace could not be written"
fi
# Files made since (untracked, not ignored) go; ignored files (caches, builds) stay.
if [ "$cleaned" != 1 ]; then
  g clean -fdq -- . || fail 75 "files made since the checkpoint could not be removed"
fi
# The index becomes the checkpoint's; entries that match keep their stat data (`-m`), so the
# next `git status` does not hash every file again. After a look at the changed paths only,
# the index names the checkpoint's tree already: only the entries where the index's tree
# differs from it are set (`--index-info`: the whole index is read and written once).
set_index_entries() {
  g diff-tree -r -z --name-only --no-renames "$state^{tree}" "$index_tree" >"$changed_in.i" || return 1
  [ -s "$changed_in.i" ] || return 0
  g diff-tree -r -z --name-only --no-renames --diff-filter=D "$state^{tree}" "$index_tree" \
    >"$changed_in.r" || return 1
  {
    xargs -0 -r sh -c 'for p; do printf "0 0000000000000000000000000000000000000000\t%s\0" "$p"; done' \
      paddock-drop <"$changed_in.r" &&
      xargs -0 -r env GIT_LITERAL_PATHSPECS=1 git ls-tree -r -z --full-tree "$index_tree" -- \
        <"$changed_in.i"
  } | g update-index --add --replace -z --index-info
}
if [ -n "$merged" ] && set_index_entries; then
  :
else
  g read-tree -m "$index_tree" || fail 76 "the index could not be written"
fi
