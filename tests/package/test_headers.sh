#!/usr/bin/env bash
# The installed package, from outside the build: exactly the public headers under
# include/wallfacer/ (the list of src/wallfacer/CMakeLists.txt, nothing internal), each compiling
# alone against the prefix (so none includes a header that is not installed), exported targets
# with none of the project's build flags or build-tree paths, and the static library linking on
# its own interface.
# Usage: test_headers.sh BUILD_DIR SOURCE_DIR HEADER...
set -u
build=$1 src=$2
shift 2
source "$(dirname "$0")/common.sh"

want=$(printf '%s\n' "$@" | sort)
got=$(cd "$prefix/include/wallfacer" && find . -type f | sed 's|^\./||' | sort)
[ "$want" = "$got" ] || err "installed headers differ from WALLFACER_PUBLIC_HEADERS:
$(diff <(echo "$want") <(echo "$got"))"

config=$prefix/lib/cmake/wallfacer
for f in wallfacerConfig.cmake wallfacerConfigVersion.cmake wallfacerTargets.cmake; do
  [ -f "$config/$f" ] || err "$config/$f not installed"
done
flags=$(grep -nE -- '-W[a-z]|-march|-mtune|-fsanitize|-O[0-3s]\b' "$config"/wallfacerTargets*.cmake)
[ -z "$flags" ] || err "build flags in the exported targets:
$flags"
paths=$(grep -nF -e "$src" -e "$build" "$config"/*.cmake "$prefix/lib/pkgconfig/wallfacer.pc")
[ -z "$paths" ] || err "build-tree paths in the package files:
$paths"
for lib in libwallfacer.a libwallfacer.so; do
  [ -e "$prefix/lib/$lib" ] || err "lib/$lib not installed"
done
"$prefix/bin/wallfacer" --version >/dev/null || err "bin/wallfacer --version failed"

headers=$(IFS=';'; echo "$*")
if cmake -S "$src/tests/package/headers" -B "$tmp/check" -DCMAKE_PREFIX_PATH="$prefix" \
     "-DWALLFACER_HEADERS=$headers" >"$tmp/configure.log" 2>&1; then
  if cmake --build "$tmp/check" -j 2 >"$tmp/build.log" 2>&1; then
    "$tmp/check/static_link" || err "static_link failed"
  else
    cat "$tmp/build.log"
    err "a public header does not compile alone against the installed prefix, or the static library does not link"
  fi
else
  cat "$tmp/configure.log"
  err "find_package(wallfacer) failed against the installed prefix"
fi
[ $fail -eq 0 ] && echo "package headers: ok ($# headers)"
exit $fail
