#!/usr/bin/env bash
# Compiles every C example of README.md against the header, as written: each is a whole
# translation unit, warnings are errors, and one with a main() is linked against the library
# (cbridge/build, made first) and run. The README's Rust examples are doctests (src/lib.rs).
#
#   scripts/readme_c.sh
set -euo pipefail
cd "$(dirname "$0")/.."
make -C cbridge -s build/libjitbridge.a
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk -v dir="$work" '
    /^```c$/ { n++; file = sprintf("%s/example%d.c", dir, n); inside = 1; next }
    /^```$/ && inside { inside = 0; close(file); next }
    inside { print > file }
' README.md
count=0
for example in "$work"/example*.c; do
    [ -e "$example" ] || { echo "README.md has no C example"; exit 1; }
    count=$((count + 1))
    flags=(-std=c11 -Wall -Wextra -Werror -Icbridge/include)
    if grep -q 'int main' "$example"; then
        cc "${flags[@]}" "$example" -o "$work/run" cbridge/build/libjitbridge.a -pthread -ldl -lm
        JITBRIDGE_DISK_CACHE=0 "$work/run" >/dev/null
    else
        cc "${flags[@]}" -c "$example" -o /dev/null
    fi
done
echo "README.md: $count C examples compile, and the ones with a main() run"
