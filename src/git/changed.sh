# paddock: the step an overlay job's checkpoint (sync.sh) and restore (restore.sh) share,
# defined before either script's own text (see git/sync.rs).
#
# add_changed INDEX LIST: makes index file INDEX name the workspace as it is at the paths in
# LIST (NUL-separated pathspecs the host read from the job's upper dir) and at the paths
# where INDEX differs from the lower layer's tree (commit PADDOCK_LOWER): every other path is
# the lower layer's file, which the index names as it is. So the work is in proportion to
# what the job changed. Sets `itree` (INDEX's tree before). Fails, and the caller takes the
# full walk, at anything unexpected.
add_changed() {
  ix=$1 list=$2
  itree=$(GIT_INDEX_FILE=$ix g write-tree 2>/dev/null) || return 1
  lower_tree=$(g rev-parse -q --verify "$PADDOCK_LOWER^{tree}" 2>/dev/null) || return 1
  if [ "$itree" != "$lower_tree" ]; then
    g diff-tree -r -z --name-only --no-renames "$lower_tree" "$itree" >>"$list" || return 1
  fi
  [ -s "$list" ] || return 0
  # A path gone from the workspace leaves the index by `rm --cached` (`add` refuses a
  # pathspec that matches nothing, as one gone and not in the index does); the others go
  # through `add -A`, which names ignored paths and exits 1: taken, any other complaint not.
  xargs -0 -r sh -c 'for p; do
      if [ -e "$p" ] || [ -L "$p" ]; then printf "%s\0" "$p"; else printf "%s\0" "$p" >&3; fi
    done' paddock-split <"$list" >"$list.here" 3>"$list.gone" || return 1
  if [ -s "$list.gone" ]; then
    GIT_LITERAL_PATHSPECS=1 GIT_INDEX_FILE=$ix g rm -r -q --cached --ignore-unmatch \
      --pathspec-from-file="$list.gone" --pathspec-file-nul >/dev/null 2>&1 || return 1
  fi
  [ -s "$list.here" ] || return 0
  GIT_LITERAL_PATHSPECS=1 GIT_INDEX_FILE=$ix g -c advice.addIgnoredFile=false add -A \
    --pathspec-from-file="$list.here" --pathspec-file-nul >/dev/null 2>"$list.err"
  added=$?
  [ "$added" = 0 ] || { [ "$added" = 1 ] && ! grep -q '^\(error\|fatal\|warning\):' "$list.err"; }
}
