# paddock: the steps an overlay job's checkpoint (sync.sh) and restore (restore.sh) share,
# defined before either script's own text (see git/sync.rs).
#
# The host read what the job changed from its upper dir (overlay/changes.rs) and sends it on
# stdin as three NUL-separated lists, their lengths in PADDOCK_CHANGED_BYTES ("F N D"):
#   F  paths the lower layer (commit PADDOCK_LOWER) has as a file or link, changed or gone
#   N  paths it lacks: new files, and directories the job made whole
#   D  paths where it has a directory the job deleted or made again, or a file now a directory
# Every other path of the workspace is the lower layer's file, as the lower tree names it.

# read_changed FILE: the lists into FILE.f, FILE.n and FILE.d; fails unless all arrived.
read_changed() {
  [ -n "${PADDOCK_CHANGED_BYTES:-}" ] && [ -n "${PADDOCK_LOWER:-}" ] || return 1
  # shellcheck disable=SC2086 # three numbers
  set -- $PADDOCK_CHANGED_BYTES
  [ "$#" = 3 ] || return 1
  cat >"$changed_in" || return 1
  [ "$(wc -c <"$changed_in" | tr -d ' ')" = "$(($1 + $2 + $3))" ] || return 1
  head -c "$1" "$changed_in" >"$changed_in.f" &&
    tail -c "+$(($1 + 1))" "$changed_in" | head -c "$2" >"$changed_in.n" &&
    tail -c "+$(($1 + $2 + 1))" "$changed_in" >"$changed_in.d"
}

# add_changed INDEX [ITREE]: makes index file INDEX name the workspace as it is, looking
# only at the lists and at the paths where INDEX differs from the lower tree (`diff-tree`,
# in proportion to the change): D's entries go, F's and those paths are taken as they are
# (`update-index`: no walk), and N's untracked paths that git's ignore rules let in are
# added. Sets `itree` (INDEX's tree before: ITREE when the caller has it). Fails, and the
# caller takes the full walk, at anything unexpected.
add_changed() {
  ix=$1
  itree=${2:-}
  [ -n "$itree" ] || itree=$(GIT_INDEX_FILE=$ix g write-tree 2>/dev/null) || return 1
  lower_tree=$(g rev-parse -q --verify "$PADDOCK_LOWER^{tree}" 2>/dev/null) || return 1
  : >"$changed_in.x"
  if [ "$itree" != "$lower_tree" ]; then
    g diff-tree -r -z --name-only --no-renames "$lower_tree" "$itree" >"$changed_in.x" || return 1
  fi
  if [ -s "$changed_in.d" ]; then
    GIT_LITERAL_PATHSPECS=1 GIT_INDEX_FILE=$ix g rm -r -q --cached --ignore-unmatch \
      --pathspec-from-file="$changed_in.d" --pathspec-file-nul >/dev/null 2>&1 || return 1
  fi
  : >"$changed_in.k"
  if [ -s "$changed_in.n" ]; then
    xargs -0 -r env GIT_LITERAL_PATHSPECS=1 GIT_INDEX_FILE="$ix" git -c core.fsmonitor=false \
      -c core.untrackedCache=false ls-files -z --others --exclude-standard -- \
      <"$changed_in.n" >"$changed_in.k" 2>/dev/null || return 1
  fi
  cat "$changed_in.f" "$changed_in.x" "$changed_in.k" |
    GIT_INDEX_FILE=$ix g update-index --add --remove --replace -z --stdin >/dev/null 2>&1
}
