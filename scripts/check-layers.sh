#!/usr/bin/env bash
# Checks that every #include of a project header respects the layers of
# docs/architecture.md. Prints each violation as FILE:LINE: the include and the rule it
# breaks, and exits 1 if there is any. Run by scripts/test.sh; cheap enough to run always.
#
#   base/    uses nothing of ours          (sockets, futexes, logging, keyed MAC)
#   ordma/   base/                         (the engines: never proto/, rpc/, server/, client/,
#                                           cache/; its references are plain value types)
#   proto/   base/ and ordma/ value types  (the odafs protocol and its conversions, the
#                                           references' wire form among them)
#   rpc/     base/                         (ONC RPC only: never server/, client/, ordma/)
#   cache/   base/                         (never server/ or client/; ORDMA reaches it by hooks)
#   server/  base/ proto/ rpc/ cache/ ordma/
#   client/  base/ proto/ rpc/ ordma/      (never server/)
# Every pair of layers has one direction: the rules above form no cycle, and neither do the
# includes found (checked with tsort). tests/ and bench/ may use every layer.
# Backends: only ordma/ itself reaches into ordma/engine_impl/ (server/ and client/ see the
# Engine interface), and one backend's folder never includes another's.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [base]="base"
  [proto]="base proto ordma"
  [rpc]="base rpc"
  [cache]="base cache"
  [ordma]="base ordma"
  [server]="base proto rpc cache ordma server"
  [client]="base proto rpc ordma client"
)

status=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for layer in "${!allowed[@]}"; do
  for a in ${allowed[$layer]}; do [ "$a" != "$layer" ] && echo "$layer $a" >>"$edges"; done
done
if ! tsort "$edges" >/dev/null 2>"$edges.err"; then
  echo "scripts/check-layers.sh: the layer rules form a cycle: $(tr '\n' ' ' <"$edges.err")" >&2
  status=1
fi
: >"$edges"
for layer in "${!allowed[@]}"; do
  [ -d "$layer" ] || continue
  while IFS= read -r hit; do
    # hit: path:line:#include "dir/file.h"
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$rest")
    dir=${target%%/*}
    [ "$dir" = "$target" ] && continue  # a same-folder include without a path
    [ "$dir" != "$layer" ] && [ -d "$dir" ] && echo "$layer $dir" >>"$edges"
    ok=0
    for a in ${allowed[$layer]}; do [ "$dir" = "$a" ] && ok=1; done
    if [ $ok = 0 ]; then
      echo "$file:$line: includes \"$target\": $layer/ may use only ${allowed[$layer]// //}" \
           "(scripts/check-layers.sh)" >&2
      status=1
    fi
  done < <(grep -rnE '^\s*#\s*include\s+"' "$layer" --include='*.h' --include='*.cc' || true)
done

if ! tsort "$edges" >/dev/null 2>"$edges.err"; then
  echo "scripts/check-layers.sh: the includes between layers form a cycle:" \
       "$(tr '\n' ' ' <"$edges.err")" >&2
  status=1
fi
rm -f "$edges.err"

# Backends stay behind ordma/engine.h, and apart from each other.
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  target=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$rest")
  case "$file" in
    ordma/engine_impl/*/*)
      own=$(cut -d/ -f3 <<<"$file")
      other=$(cut -d/ -f3 <<<"$target")
      [ "$other" = "$own" ] && continue
      ;;
    ordma/*) continue ;;
  esac
  echo "$file:$line: includes \"$target\": a backend's folder is private to it" \
       "(server/ and client/ use ordma/engine.h; scripts/check-layers.sh)" >&2
  status=1
done < <(grep -rnE '^\s*#\s*include\s+"ordma/engine_impl/' base proto rpc cache ordma server client \
           --include='*.h' --include='*.cc' || true)

# Files over ~600 lines are a sign that one unit does several jobs (generated code aside).
while IFS= read -r f; do
  n=$(wc -l <"$f")
  if [ "$n" -gt "${ODAFS_MAX_LINES:-600}" ]; then
    echo "note: $f has $n lines (over ${ODAFS_MAX_LINES:-600}); consider splitting it" >&2
  fi
done < <(find base proto rpc cache ordma server client -name '*.h' -o -name '*.cc' | sort)

[ $status = 0 ] && echo "layers: ok"
exit $status
