#!/usr/bin/env bash
# The main job on the bundled example: validate a whole Source's document tree, list it, and
# show how hostile or broken documents are reported. Run by `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Validate the example Source, following every link down from its Source Description"
resourcesync validate --follow examples/site/.well-known/resourcesync \
  --map http://example.org/=examples/site

step "List the Resource List (an index over two parts) as a table"
resourcesync cat --follow examples/site/dataset1/resourcelist.xml \
  --map http://example.org/=examples/site

step "The same as JSON Lines, for scripts"
resourcesync cat examples/site/dataset1/changelist.xml --json

step "Broken and hostile documents: findings with locations, exit code 1 or 2, no traceback"
set +e
resourcesync validate examples/broken/changelist-out-of-order.xml
echo "exit code: $?"
resourcesync validate examples/broken/xxe.xml
echo "exit code: $?"
set -e

step "Publish the bundled resource tree (examples/resources) as a ResourceSync Source"
work=$(mktemp -d)
cp -r examples/resources "$work/resources"
resourcesync publish "$work/resources" --base-url http://example.org/files/ --out "$work/public" \
  --capabilities resourcelist,changelist,resourcedump,changedump --hash md5,sha-256
resourcesync validate --follow "$work/public/.well-known/resourcesync" \
  --map http://example.org/="$work/public"

step "Change the tree (edit, add, delete, touch) and publish again: only the changes are listed"
echo '<p>edited</p>' >> "$work/resources/articles/welcome.html"
echo 'new' > "$work/resources/data/new.txt"
rm "$work/resources/articles/notes.md"
touch "$work/resources/data/people.csv"
resourcesync publish "$work/resources" --base-url http://example.org/files/ --out "$work/public" \
  --capabilities resourcelist,changelist,resourcedump,changedump --hash md5,sha-256 --json
resourcesync cat "$work/public/resourcesync/changelist.xml"
resourcesync validate --follow "$work/public/.well-known/resourcesync" \
  --map http://example.org/="$work/public"
rm -rf "$work"

step "LIRS: an EUC-JP antenna feed (encoding detected), converted to a Change List and validated"
resourcesync lirs cat examples/lirs/antenna.eucjp.lirs
out=$(mktemp -d)
resourcesync lirs to-resourcesync examples/lirs/antenna.eucjp.lirs -o "$out/changelist.xml" \
  --capability-list http://antenna.example.jp/capabilitylist.xml --json
resourcesync validate "$out/changelist.xml"
resourcesync lirs from-resourcesync "$out/changelist.xml" -o "$out/back.lirs.gz" --json
rm -rf "$out"

step "Done"
